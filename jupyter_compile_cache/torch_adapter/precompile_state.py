"""What the precompile guard's steps share (precompile.py puts them together): the functions looked up and their
code, the entries loaded, refused and recorded, the guards precompile dropped, why functions missed, and the one way a
failure of torch's precompile machinery is told (the plain path for that function, one line)."""

from __future__ import annotations

import itertools
import logging
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from .identity_checks import LoadScope
from .installed_entries import set_aside
from .layers import COUNTER_GROUP
from .miss_reasons import MissReason, PrecompileStep, PrecompileTrouble
from .patch import Patch
from .torch_logs import FILTERED_LOGGERS, TorchLogFilter


class PrecompileState:
    """The guard's state, and how its steps fall back and tell."""

    def __init__(self, warn: Any = None) -> None:
        self.installed = False
        # told what failed under us (a PrecompileTrouble); by default, as a warning of Python's
        self.warn: Callable[[PrecompileTrouble], None] = warn or (
            lambda trouble: warnings.warn(repr(trouble), stacklevel=2)
        )
        self.pending: dict[str, str] = {}  # key -> code digest of functions looked up since the last save
        self.functions: dict[str, tuple[str, dict[str, str]]] = {}  # key -> (qualified name, code_parts)
        # Why functions looked up since the last `take_miss_reasons` were not restored.
        self.miss_reasons: list[MissReason] = []
        # Asked, with a code digest no entry in the cache dir has, to install other versions' entries beside torch's
        # (ALTERNATES_DIR); whether it installed any. Set by the session for the length of a cell.
        self.find_elsewhere: Any = None
        # code -> the guards of the entries restored for it (for the reason, should it compile afresh)
        self._restored_guards: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        self.loaded_keys: set[str] = set()  # keys whose entries were handed to torch
        self.refused_keys: set[str] = set()  # keys whose precompile failed in torch: plain path, never saved again
        self._told: set[str] = set()  # one line per function
        # package key -> {sha256 of a saved guard state -> {guard source: digest of the object it watched}}: the
        # guards precompile dropped from each saved entry.
        self.dropped: dict[str, dict[str, dict[str, str]]] = {}
        # package key -> {sha256 of a saved guard state -> the thread's dispatch keys it was compiled under}
        self.dispatch_keys: dict[str, dict[str, list[int]]] = {}
        self._loading: dict[str, LoadScope] = {}  # key -> its record and the scope its guard sources resolve in
        self._installing: str | None = None  # key of the package being installed
        self._state_sha: str | None = None  # sha256 of the guard state torch is loading
        self.code_ids: dict[str, Any] = {}  # key -> torch's key for the function's remembered input sizes
        # key -> the live CompilePackage a restored entry was installed into (a later restore may bring a newer one)
        self.live: dict[str, weakref.ref[Any]] = {}
        self._refreshing = False  # installing a newer entry into a live function (refresh)
        self.lookups: list[str] = []  # the key of every function torch looked up, in order
        # key -> the package torch made afresh for a function without a saved entry
        self.fresh: dict[str, weakref.ref[Any]] = {}
        # Functions that share torch's key but not their code (regional compilation: every block's
        # `Module._call_impl`, blocks told apart by an index): key -> {code digest -> its parts, and its package}.
        # Each code keeps an entry of its own, saved beside torch's (entry_records.sibling): torch keeps one a key.
        self.codes: dict[str, dict[str, dict[str, str]]] = {}
        self._packages: dict[str, dict[str, weakref.ref[Any]]] = {}
        self.recorded: dict[str, dict[str, Any]] = {}  # key -> {code digest -> torch's dynamo entry of its package}
        self._package_digest: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # (key, code digest) -> {package -> torch's dynamo entry of it}: packages of one code, merged into its entry
        self._package_entries: dict[tuple[str, str], dict[int, Any]] = {}
        self._package_serial: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._serials = itertools.count()
        self.entry_digest: dict[str, str] = {}  # key -> the code digest of the entry in torch's folder for it
        # functions Dynamo compiled in a cell with no package (new_unpackaged)
        self._unpackaged: list[str] = []
        self._patches: list[Patch] = []
        self._log_filter = TorchLogFilter()
        self._loggers = [logging.getLogger(f"torch.{name}") for name in FILTERED_LOGGERS]

    def _once(self, items: list[str], prefix: str = "") -> list[str]:
        fresh = [item for item in dict.fromkeys(items) if item not in self._told]
        self._told.update(fresh)
        return [item[len(prefix) :] for item in fresh]

    def take_miss_reasons(self) -> list[MissReason]:
        """Why functions were not restored since the last call, each once."""
        reasons, self.miss_reasons = self.miss_reasons, []
        return list(dict.fromkeys(reasons))

    def _fallback(self, key: str | None, step: PrecompileStep, exc: BaseException) -> None:
        """torch's precompile failed for one function: plain path for it, its entry set aside, one line."""
        from torch._dynamo.utils import counters

        counters[COUNTER_GROUP]["precompile_fallback"] += 1
        if key:
            self.refused_keys.add(key)
            self.pending.pop(key, None)
            set_aside(key)
            if key in self._told:
                return
            self._told.add(key)
        message = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        self.warn(PrecompileTrouble(step, f"{type(exc).__name__}: {message}", fallback=True))

    def _tell(self, key: str, step: PrecompileStep, exc: BaseException) -> None:
        """Once per function and step, a failure that costs time later but changes no answer."""
        if f"{key}:{step.value}" not in self._told:
            self._told.add(f"{key}:{step.value}")
            self.warn(PrecompileTrouble(step, str(exc), fallback=False))
