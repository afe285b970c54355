"""Dynamo precompile that never answers differently from plain torch.compile (the design: docs/how_it_works.md).

torch's caching_precompile drops the guards that compare object identity while it builds them. `PrecompileGuard`
lets torch build the guards twice, once as plain torch.compile does (for the live entry) and once the precompile
way (for what is saved), records the dropped guards with a digest of the code (code_digest.py), refuses a saved
entry whose code or objects changed, and gives a restored entry its dropped guards back as one identity check
(identity_checks.py). Any failure of torch's precompile machinery falls back to the plain path, told in one line.

Over 400 lines on purpose: `PrecompileGuard` is one object deciding for four of torch's steps (guard building,
loading, installing, saving) that share its load scope, its refused keys and its fallbacks. The patches that hand
those steps to it are in precompile_patches.py; its helpers live in code_digest.py, identity_checks.py,
installed_entries.py and torch_logs.py, the records beside the entries on disk in entry_records.py, which guards
precompile drops in guard_policy.py, and what it reports (miss reasons, failures) as data in miss_reasons.py.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from . import dispatch_state, entry_records, frame_sizes, guard_policy, precompile_patches
from .code_digest import changed_parts, code_digest, code_parts
from .identity_checks import LoadScope, identity_check, innermost, into_tree, load_scope, never, resolve, sha
from .installed_entries import DeserializedOnce, advance_unique_ids, check_installed_globals, set_aside
from .layers import COUNTER_GROUP
from .miss_reasons import MissCause, MissReason, PrecompileStep, PrecompileTrouble
from .patch import Patch
from .torch_logs import FILTERED_LOGGERS, TorchLogFilter

# torch 2.10 has caching_precompile, but its saved entries fail to install (an IndexError, or code saved as a
# placeholder) and the plain path they fall back to then misses the FX graph and AOTAutograd caches: there, bundles
# carry those layers only, as before torch 2.9. Measured on the CPU; 2.11, 2.13 and 2.15 restore through precompile.
MIN_TORCH = "2.11.0a0"  # pre-releases of 2.11 included
# On a CompilePackage: {backend id -> (the type of its saved content, what torch deserialized)}, from its last install.
DESERIALIZED_ATTR = "_jcc_deserialized"


_INSTALLED: PrecompileGuard | None = None  # the guard whose patches are on torch now


def _owners(parts: Any) -> set[str]:
    """The part naming the object a saved function is a method of (`self (Block)`), from a record's parts."""
    return {name for name in parts if name.startswith("self (")} if isinstance(parts, dict) else set()


class PrecompileGuard:
    """Wraps torch's Dynamo precompile while installed; `uninstall` puts torch back exactly as it was."""

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
        self.entry_digest: dict[str, str] = {}  # key -> the code digest of the entry in torch's folder for it
        # functions Dynamo compiled in a cell with no package (new_unpackaged)
        self._unpackaged: list[str] = []
        self._patches: list[Patch] = []
        self._log_filter = TorchLogFilter()
        self._loggers = [logging.getLogger(f"torch.{name}") for name in FILTERED_LOGGERS]

    def new_bypass_reasons(self) -> list[str]:
        """torch's reasons for functions it would not package since the last call, each reason once a session."""
        reasons, self._log_filter.bypass_reasons = self._log_filter.bypass_reasons, []
        return self._once(reasons)

    def new_unpackaged(self) -> list[str]:
        """Functions Dynamo compiled in a cell without a package since the last call (torch makes one when
        torch.compile is called, only while precompile is on): their names, "" for a module compiled through
        torch's own wrapper; each once a session."""
        names, self._unpackaged = self._unpackaged, []
        return self._once([f"unpackaged:{name}" for name in names], prefix="unpackaged:")

    def _once(self, items: list[str], prefix: str = "") -> list[str]:
        fresh = [item for item in dict.fromkeys(items) if item not in self._told]
        self._told.update(fresh)
        return [item[len(prefix) :] for item in fresh]

    @staticmethod
    def available() -> bool:
        try:
            import torch
            import torch._dynamo.config as dynamo_config
            from torch._dynamo import guards, package
        except Exception:  # no torch, or one without precompile: the plain path
            return False
        if torch.__version__ < MIN_TORCH:
            return False
        return (
            hasattr(dynamo_config, "caching_precompile")
            and hasattr(package, "DynamoCache")
            and hasattr(package, "load_guard_manager")
            and hasattr(package, "load_guards_state")
            and hasattr(guards, "CheckFunctionManager")
        )

    # -- install / uninstall ----------------------------------------------------------------------------------
    def install(self) -> None:
        global _INSTALLED
        if self.installed or not self.available():
            return
        if _INSTALLED is not None:
            # One guard wraps torch at a time (two sessions in one process: wrapping torch's wrapped functions
            # again breaks them): the session whose cell runs now. The other installs itself again at its next cell.
            _INSTALLED.uninstall()
        _INSTALLED = self
        self._patches = precompile_patches.wire(self)
        for logger in self._loggers:
            logger.addFilter(self._log_filter)
        self.installed = True

    def uninstall(self) -> None:
        global _INSTALLED
        if not self.installed:
            return
        if _INSTALLED is self:
            _INSTALLED = None
        for patch in reversed(self._patches):
            patch.undo()
        self._patches = []
        for logger in self._loggers:
            logger.removeFilter(self._log_filter)
        self.installed = False

    # -- while compiling ----------------------------------------------------------------------------------------
    def _build_guards(
        self, cfm: Any, orig_init: Any, signature: inspect.Signature, args: tuple, kwargs: dict[str, Any]
    ) -> None:
        """Live guards as plain torch.compile builds them; the saved state from torch's precompile build."""
        import torch._dynamo.config as dynamo_config

        arguments = dict(signature.bind(cfm, *args, **kwargs).arguments)
        arguments.pop(next(iter(signature.parameters)))  # self
        save = bool(arguments.get("save_guards", False))
        if self._installing is None:  # torch builds a restored entry's guards this way too: that is no compile
            self._note_fresh_compile(arguments)
            # torch makes a function's package when torch.compile is called, only while precompile is on
            code = arguments.get("f_code")
            name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "")
            if (
                dynamo_config.caching_precompile
                and getattr(arguments.get("output_graph"), "package", False) is None
                and not name.startswith("torch_dynamo_resume_in_")
            ):
                # A module may be compiled through torch's own wrapper, whose name says nothing to the user. Other
                # frames of torch's are ones Dynamo reached on its own (after a graph break): not what was compiled.
                filename = getattr(code, "co_filename", "")
                if f"{os.sep}torch{os.sep}" not in filename:
                    self._unpackaged.append(name)
                elif filename.endswith(os.path.join("_dynamo", "external_utils.py")):
                    self._unpackaged.append("")
        if not dynamo_config.caching_precompile and not save:
            orig_init(cfm, *args, **kwargs)
            return
        live = {**arguments, "save_guards": False} if "save_guards" in signature.parameters else arguments
        with dynamo_config.patch(caching_precompile=False):
            orig_init(cfm, **live)
        if not save:
            return
        # The entry a package records (also when a function compiled in a %%compile_cache cell recompiles
        # outside one): torch's precompile build, whose guards can be serialized.
        user_filter = arguments.get("guard_filter_fn")
        seen: list[Any] = []

        def recording_filter(entries: Any) -> Any:
            seen.extend(entries)
            keep = user_filter(entries) if user_filter else [True] * len(entries)
            return [bool(k) and not guard_policy.is_dropped(entry) for k, entry in zip(keep, entries)]

        output_graph = arguments.get("output_graph")
        shadow = object.__new__(type(cfm))
        self._log_filter.dropped_names = logged = []
        try:
            with dynamo_config.patch(caching_precompile=True):
                orig_init(shadow, **{**arguments, "guard_filter_fn": recording_filter})
            guards_state = getattr(shadow, "guards_state", None)
        except Exception as exc:  # torch's failure: this entry is not saved, the cell runs
            package: Any = getattr(output_graph, "package", None)
            self._fallback(getattr(package, "source_id", None), PrecompileStep.BUILD_GUARDS, exc)
            with contextlib.suppress(Exception):
                package.bypass_current_entry()
            guards_state = None
        finally:
            self._log_filter.dropped_names = None
        # None: torch bypassed this entry (it is not saved); its package ignores the state then, but torch asserts
        # that there is one ("check_fn.guards_state must not be None").
        cfm.guards_state = guards_state if guards_state is not None else b""
        if guards_state is None:
            return
        logged_names = set(logged)
        dropped = {
            guard_policy.guard_source(entry): code_digest(entry.value) if entry.has_value else "<no value>"
            for entry in seen
            if guard_policy.is_dropped(entry) or guard_policy.guard_source(entry) in logged_names
        }
        # Per package: its function's entry, and those of the frames it left to Dynamo (resume functions after a
        # graph break, functions in other modules that Dynamo compiled as frames of their own).
        key = getattr(getattr(output_graph, "package", None), "source_id", None) or ""
        self.dropped.setdefault(key, {})[sha(guards_state)] = dropped
        self.dispatch_keys.setdefault(key, {})[sha(guards_state)] = dispatch_state.current()

    def _refused_by_torch(self, fn: Any, exc: BaseException) -> None:
        """torch refused a saved entry we passed (its source check of inlined module code, its version check): the
        function compiles as plain torch.compile would; the cell's line says why, and it is a miss, not a hit."""
        from torch._dynamo.utils import counters

        if counters["dynamo_cache"]["dynamo_cache_hit"] > 0:  # torch counted the load as a hit
            counters["dynamo_cache"]["dynamo_cache_hit"] -= 1
        counters["dynamo_cache"]["dynamo_cache_miss"] += 1
        with contextlib.suppress(Exception):  # not loaded after all
            from torch._dynamo import package

            key = package.CompilePackage.source_id_from_fn(fn)
            self.loaded_keys.discard(key)
            self._loading.pop(key, None)
        name = getattr(innermost(fn), "__qualname__", None) or repr(fn)
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        self.miss_reasons.append(MissReason(MissCause.REFUSED, name, detail))

    def _note_fresh_compile(self, arguments: dict[str, Any]) -> None:
        """A function whose restored entry torch just passed over compiles: why, in torch's words where it can say."""
        code = arguments.get("f_code")
        restored = self._restored_guards.get(code) if code is not None else None
        if not restored:
            return
        reason = ""
        with contextlib.suppress(Exception):  # only words for the cell's line
            from torch._dynamo import guards

            local_scope = getattr(arguments.get("output_graph"), "local_scope", None) or {}
            for guard_manager in restored:
                found = guards.get_guard_fail_reason_helper(guard_manager, local_scope, None, None)
                # the traced frame's tensors are fake: a type check failing on that is not the reason
                if found and "FakeTensor" not in found:
                    reason = found
                    break
        name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "?")
        detail = reason.strip().splitlines()[0].removeprefix("None: ")[:200] if reason and reason.strip() else ""
        self.miss_reasons.append(MissReason(MissCause.RESTORED_GUARD_FAILED, name, detail))

    # -- on restore -----------------------------------------------------------------------------------------------
    def _load(self, fn: Any, orig_load: Any) -> Any:
        from torch._dynamo import package
        from torch._dynamo.utils import counters

        key = package.CompilePackage.source_id_from_fn(fn)
        if key in self.refused_keys:  # never saved again: no digest to take
            return None
        digest = code_digest(fn)
        function = getattr(innermost(fn), "__qualname__", None) or repr(fn)
        parts = code_parts(fn)
        self.pending[key] = digest
        self.functions[key] = (function, parts)
        self.codes.setdefault(key, {})[digest] = parts
        self.lookups.append(key)
        try:
            code_id = frame_sizes.code_id(innermost(fn))
        except Exception as exc:  # its input sizes are then not carried: a later recompile may compile afresh
            code_id = None
            self._tell(key, PrecompileStep.KEEP_SIZES, exc)
        self.code_ids[key] = code_id
        prefix = package.DynamoCache.path_prefix()
        entry_dir = os.path.join(prefix, key)
        record = entry_records.read_record(entry_dir)
        if record is None or record.get("digest") != digest:
            # torch names an entry by the function's name and first line: a line added above it, or the same code
            # in another version of the bundle, is found by its code instead.
            try:
                if entry_records.is_empty_for(entry_records.sibling(prefix, key, digest), digest):
                    return None  # this code traced nothing when it was saved (beside others of its key that did)
                matching = entry_records.entry_with(prefix, digest)
                if matching is None and self.find_elsewhere is not None and self.find_elsewhere(digest):
                    matching = entry_records.entry_with(prefix, digest)
                if matching is not None and matching != entry_dir:
                    entry_records.adopt_entry(matching, entry_dir)
                    counters[COUNTER_GROUP]["precompile_entry_found_by_code"] += 1
                    record = entry_records.read_record(entry_dir)
            except Exception as exc:  # a full disk, an unreadable folder: the entry under torch's name stands
                self._tell(key, PrecompileStep.FIND_BY_CODE, exc)
                record = (
                    entry_records.read_record(entry_dir) if os.path.exists(os.path.join(entry_dir, "entry")) else None
                )
        if not os.path.exists(os.path.join(entry_dir, "entry")):
            if record is not None and record.get("empty") and record.get("digest") == digest:
                # Dynamo traced nothing of this function when it was saved (its frames are torch's own, such as
                # `Module._wrapped_call_impl` under transformers' compiled `generate`): nothing to restore, no miss.
                return None
            self.miss_reasons.append(MissReason(MissCause.NO_ENTRY, function))
            return orig_load(fn)
        if record is None or record.get("digest") != digest:
            counters["dynamo_cache"]["dynamo_cache_miss"] += 1
            saved_parts = (record or {}).get("parts")
            if _owners(saved_parts) != _owners(parts):
                # the entry of another class's method under torch's key (each block class's `Module._call_impl`
                # under regional compilation): no entry for this code, nothing stale
                self.miss_reasons.append(MissReason(MissCause.NO_ENTRY, function))
                return None
            counters[COUNTER_GROUP]["precompile_stale_rejected"] += 1
            where = changed_parts(saved_parts, parts)[:3] if isinstance(saved_parts, dict) else []
            self.miss_reasons.append(MissReason(MissCause.OTHER_CODE, function, changed=tuple(where)))
            return None
        if code_id is not None:
            # What the cold kernel had seen of the inputs' sizes: a later recompile makes the same graph it made.
            try:
                frame_sizes.merge(entry_dir, code_id)
            except Exception as exc:  # a damaged sizes file: the restored function still loads
                self._tell(key, PrecompileStep.USE_SAVED_SIZES, exc)
        try:
            result = orig_load(fn)
        except Exception as exc:  # torch's failure: the plain torch.compile path
            self._fallback(key, PrecompileStep.LOAD, exc)
            return None
        self.entry_digest[key] = digest
        if result is not None:
            self.loaded_keys.add(key)
            self._loading[key] = load_scope(record, fn)
            # Saved again with this cell, the entry keeps its record of dropped guards.
            self.dropped.setdefault(key, {}).update(record.get("guarded", {}))
            self.dispatch_keys.setdefault(key, {}).update(record.get("dispatch_keys", {}))
        return result

    def _package_made(self, pkg: Any) -> None:
        """torch made PKG for the function it just looked up (`_load`): which code it holds."""
        key = getattr(pkg, "source_id", None)
        digest = self.pending.get(key) if key else None
        if key and digest:
            self._package_digest[pkg] = digest
            self._packages.setdefault(key, {})[digest] = weakref.ref(pkg)

    def _package_recorded(self, pkg: Any) -> None:
        """torch recorded PKG's entry for saving, under its key: kept under its code too (the last one last)."""
        from torch._dynamo.precompile_context import PrecompileContext

        key, digest = getattr(pkg, "source_id", None), self._package_digest.get(pkg)
        entry = getattr(PrecompileContext, "_dynamo_cache_entries", {}).get(key)
        if key and digest and entry is not None:
            by_code = self.recorded.setdefault(key, {})
            by_code.pop(digest, None)
            by_code[digest] = entry

    def take_miss_reasons(self) -> list[MissReason]:
        """Why functions were not restored since the last call, each once."""
        reasons, self.miss_reasons = self.miss_reasons, []
        return list(dict.fromkeys(reasons))

    def _recompiled(self, frame: Any, reasons: list[str]) -> None:
        if not reasons:  # no entry of its own failed: a restored one's failure is told if it compiles (_build_guards)
            return
        code = getattr(frame, "f_code", None)
        name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "?")
        reason = str(reasons[0]).strip().splitlines()[0][:200] if reasons and str(reasons[0]).strip() else ""
        self.miss_reasons.append(MissReason(MissCause.GUARD_FAILED, name, reason))

    def _install(self, pkg: Any, orig_install: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        key = getattr(pkg, "source_id", None)
        for code in getattr(pkg, "_codes", {}):  # the entries installed before are replaced
            self._restored_guards.pop(code, None)
        self._installing = key
        self._log_filter.installing = True
        try:
            if args and isinstance(args[0], dict):
                args = (self._reusing_backends(pkg, args[0]), *args[1:])
            orig_install(pkg, *args, **kwargs)
            check_installed_globals(pkg)
            if key is not None:
                self.live[key] = weakref.ref(pkg)
        except Exception as exc:  # torch's failure: a fresh compile instead
            with contextlib.suppress(Exception):
                pkg.uninstall()
            advance_unique_ids(pkg)  # the globals torch put in the module stay: the fresh compile must not clash
            # torch catches a RuntimeError here and initializes the package afresh, but the package is already
            # initialized with the failed entry ("CompilePackage is already initialized"): make it a new one.
            type(pkg).__init__(pkg, None)  # type: ignore[arg-type]  # torch's own call, CompilePackage(None)
            from torch._dynamo.utils import counters

            if counters["dynamo_cache"]["dynamo_cache_hit"] > 0:  # torch counted the load as a hit
                counters["dynamo_cache"]["dynamo_cache_hit"] -= 1
            counters["dynamo_cache"]["dynamo_cache_miss"] += 1
            self.loaded_keys.discard(key)
            self._fallback(key, PrecompileStep.INSTALL, exc)
            raise RuntimeError(f"jupyter_compile_cache: precompile entry {key} set aside") from exc
        finally:
            self._installing = None
            self._log_filter.installing = False
        advance_unique_ids(pkg)

    def _reusing_backends(self, pkg: Any, backends: dict[str, Any]) -> dict[str, Any]:
        """The backends torch is about to deserialize, each noted on the package once it is (so they live exactly
        as long as the compiled function). In a refresh, one the live function already deserialized (the same
        compile) is handed back as it is, instead of being loaded a second time with all its kernels. Only there: a
        cell that wraps a function anew reads its graphs' files, which is how its bundle comes to hold them."""
        before = getattr(pkg, DESERIALIZED_ATTR, {}) if self._refreshing else {}
        after: dict[str, tuple[Any, Any]] = {}
        setattr(pkg, DESERIALIZED_ATTR, after)
        return {
            backend_id: DeserializedOnce(artifact, before.get(backend_id), after, backend_id)
            if hasattr(artifact, "after_deserialization")
            else artifact
            for backend_id, artifact in backends.items()
        }

    def refresh(self, paths: Iterable[str]) -> int:
        """Entries a restore just wrote for functions this process already loaded from an older entry: installed
        into the live function now. torch reads a function's entry once, when `torch.compile` wraps it, so a later
        cell's bundle (saved after the same compiled function met new input sizes, and compiled them) would
        otherwise be traced again for those sizes. Each entry passes the same checks as at first load; one that
        fails leaves the function on the plain path. Only an entry holding every graph the live function has, and more,
        replaces it: an older one, or one lacking a graph this kernel compiled, would drop graphs. Returns how many
        functions took a newer entry."""
        if not self.installed or not self.live:
            return 0
        from torch._dynamo import package

        prefix = os.path.realpath(package.DynamoCache.path_prefix())
        keys = set()
        for path in paths:
            relative = os.path.relpath(os.path.realpath(path), prefix)
            if not relative.startswith(os.pardir):
                keys.add(relative.split(os.sep)[0])
        refreshed = 0
        for key in sorted(keys & self.live.keys()):
            pkg = self.live[key]()
            fn = getattr(pkg, "_innermost_fn", None)
            if pkg is None or fn is None or package.CompilePackage.source_id_from_fn(fn) != key:
                continue
            loading = self._loading.get(key)
            result = package.DynamoCache.load(fn)  # our load: the code digest is checked again
            if result is None:
                continue
            if not guard_policy.guard_states(pkg._codes.values()) < guard_policy.guard_states(result.dynamo.codes):
                # Not strictly newer: an older bundle (a cell re-run after a later one), or the live function
                # compiled graphs here that the entry lacks. Replacing it would drop those graphs, to be traced
                # again and left out of the next save; it stays as it is.
                if loading is not None:
                    self._loading[key] = loading
                continue
            try:
                pkg.uninstall()
                type(pkg).__init__(pkg, None)  # type: ignore[arg-type]  # torch's own call, CompilePackage(None)
                pkg.initialize(fn, result.dynamo, ignore_inlined_sources=False)
                self._refreshing = True
                try:
                    pkg.install(result.backends)  # our install: a failure is told and sets the entry aside
                finally:
                    self._refreshing = False
            except Exception:  # told by _install (or torch raised before it): the plain path recompiles what it needs
                if not pkg.is_initialized():
                    pkg.initialize(fn, None, ignore_inlined_sources=False)
                continue
            refreshed += 1
        return refreshed

    def _saved_dispatch_keys(self, guards_state: Any) -> contextlib.AbstractContextManager[Any]:
        """While torch builds a restored entry's guards: the dispatch keys it was compiled under (dispatch_state.py)."""
        scope = self._loading.get(self._installing or "")
        saved = (scope.record.get("dispatch_keys") or {}).get(self._state_sha or "") if scope is not None else None
        return dispatch_state.in_force(guards_state, saved)

    def _with_identity_guard(self, guard_manager: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """Give a restored entry back the guards precompile dropped, bound to objects verified against its record.

        Each entry's record lists the sources of its dropped guards and a digest of what each watched when it was
        compiled. A source that names an object now (a global, `L['self'].act` of the restored method) is checked
        now; one that names an argument or a local of a frame other than the restored function's is checked when
        the entry's guards first run. If every object is equal to the one compiled for, the entry gets one guard:
        each source still names that very object. If not (or the record is missing), the entry's guard fails:
        torch compiles anew instead, as plain torch.compile would for a changed object.
        """
        from torch._dynamo.utils import counters

        scope = self._loading.get(self._installing or "")
        if scope is None:
            return guard_manager
        runtime_globals = kwargs.get("runtime_global_scope", args[2] if len(args) > 2 else scope.fn_globals)
        target_code = kwargs.get("code", args[1] if len(args) > 1 else None)
        dropped = (scope.record.get("guarded") or {}).get(self._state_sha or "")
        # L is the restored function's frame only for its own entry; a resume function's L is another frame.
        local_scope = scope.local_scope if target_code is scope.code else {}
        split = resolve(dropped, runtime_globals, local_scope) if isinstance(dropped, dict) else None
        if split is None:
            counters[COUNTER_GROUP]["precompile_stale_rejected"] += 1
            guard_manager.root.add_lambda_guard(
                never, ["jupyter_compile_cache: an object this entry was compiled for has changed"], None
            )
        elif split[0] or split[1]:
            in_python = into_tree(guard_manager, split[0], runtime_globals, local_scope)
            if in_python or split[1]:
                check, parts = identity_check(in_python, split[1], runtime_globals)
                root = guard_manager.root
                # after torch's own guards: an entry they reject (the prefill's, at a decode step) never runs ours
                add = getattr(root, "add_epilogue_lambda_guard", None) or root.add_lambda_guard
                add(check, parts, None)
        if target_code is not None:  # asked why, should this code compile afresh after all
            self._restored_guards.setdefault(target_code, []).append(guard_manager)
        return guard_manager

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

    # -- when the cell saves --------------------------------------------------------------------------------------
    def save_cell_entries(
        self, context: Any, compiled: set[str], loaded_since: set[str], looked_up: Iterable[str]
    ) -> tuple[set[str], list[str]]:
        """A cell's precompile entries written to the cache dir (`compiled`: those it compiled), each with its record;
        returns the keys its bundle carries (compiled, restored and used, or traced to nothing) and the record
        files written."""
        # torch rewrites every entry of the process when saving (with new bytes each time): only save when this
        # cell compiled something, or a warm re-run would look like new work.
        if compiled:
            self.save_entries(context)
        # Entries whose precompile failed in torch stay out of bundles (and out of the cache dir).
        keys = (compiled | loaded_since) - self.refused_keys
        empty = self.empty_keys(looked_up)
        records = self.write_digests(keys, empty)
        return keys | empty | {os.path.basename(os.path.dirname(path)) for path in records}, records

    def save_entries(self, context: Any) -> None:
        """Write the process's precompile entries to the cache dir, one by one: torch's own save_to_dynamo_cache
        stops at the first entry it cannot pickle (torch 2.11: "Can't pickle local object
        'PyCodegen.pop_null.<locals>.<lambda>'") and so would lose every entry after it, in every later cell too."""
        from torch._dynamo.package import DynamoCache

        try:
            if not hasattr(context, "create_cache_entries"):  # a torch without it: its all-or-nothing save
                context.save_to_dynamo_cache()
                return
            entries, _ = context.create_cache_entries()
        except Exception as exc:  # torch's failure: nothing saved for precompile
            self._fallback(None, PrecompileStep.COLLECT, exc)
            return
        for key, entry in entries.items():
            if key in self.refused_keys:
                continue
            try:
                DynamoCache.write(entry, key)
            except Exception as exc:  # this entry is not saved; the function already ran, the others are saved
                self._fallback(key, PrecompileStep.SAVE, exc)
                continue
            if self.recorded.get(key):
                self.entry_digest[key] = next(reversed(self.recorded[key]))
            if len(self.codes.get(key, {})) > 1:
                self._save_siblings(context, key)

    def _save_siblings(self, context: Any, key: str) -> None:
        """Each code's entry of a key that several codes share, in a folder of its own beside torch's."""
        from torch._dynamo.package import DynamoCache, PrecompileCacheEntry

        prefix = DynamoCache.path_prefix()
        for digest, dynamo_entry in self.recorded.get(key, {}).items():
            sibling = os.path.basename(entry_records.sibling(prefix, key, digest))
            try:
                entry = PrecompileCacheEntry.from_cache_entry(dynamo_entry, context._backend_artifacts_by_key)
                if entry is not None:
                    DynamoCache.write(entry, sibling)
            except Exception as exc:  # that code compiles again where it is restored; the others are saved
                self._tell(sibling, PrecompileStep.SAVE, exc)

    def _traced_nothing(self, key: str, digest: str) -> bool:
        """Whether the package torch made for this code of KEY holds no compiled frame (as `empty_keys`)."""
        ref = self._packages.get(key, {}).get(digest)
        pkg = ref() if ref is not None else None
        codes = getattr(pkg, "_codes", None) if pkg is not None else None
        return isinstance(codes, dict) and not any(getattr(code, "guarded_codes", True) for code in codes.values())

    def empty_keys(self, looked_up: Iterable[str]) -> set[str]:
        """Of the functions looked up, those torch made a package for that holds no compiled frame: Dynamo traced
        none of their code (it skips torch's own frames), so they have no entry to save."""
        from torch._dynamo.precompile_context import PrecompileContext

        saved = getattr(PrecompileContext, "_dynamo_cache_entries", {})
        out = set()
        for key in set(looked_up) - self.refused_keys - saved.keys():
            pkg = self.fresh[key]() if key in self.fresh else None
            codes = getattr(pkg, "_codes", None) if pkg is not None else None
            if isinstance(codes, dict) and not any(getattr(code, "guarded_codes", True) for code in codes.values()):
                out.add(key)
        return out

    def write_digests(self, keys: set[str], empty: Iterable[str] = ()) -> list[str]:
        """Write the record next to each saved entry, and a record marked empty for each function in `empty`
        (found again on restore, it is no miss); returns the record files written."""
        from torch._dynamo import package

        written = []
        sized = []  # (key, entry_dir) of saved entries whose function's input sizes this kernel remembers
        prefix = package.DynamoCache.path_prefix()
        empty = set(empty)
        places = [
            (key, os.path.join(prefix, key), self.entry_digest.get(key) or self.pending.get(key), key in empty)
            for key in (keys | empty) - self.refused_keys
        ]
        for key in keys - self.refused_keys:
            if len(self.codes.get(key, {})) > 1:  # several codes under one key: each its own, beside torch's
                places += [
                    (key, entry_records.sibling(prefix, key, digest), digest, self._traced_nothing(key, digest))
                    for digest in self.codes[key]
                ]
        for key, entry_dir, digest, traced_nothing in places:
            has_entry = os.path.exists(os.path.join(entry_dir, "entry"))
            if digest is None or (not has_entry and not traced_nothing):
                continue
            guarded = self.dropped.get(key, {})
            record = {
                "version": entry_records.RECORD_VERSION,
                "digest": digest,
                "guarded": dict(sorted(guarded.items())),
                "dispatch_keys": dict(sorted(self.dispatch_keys.get(key, {}).items())),
            }
            if not has_entry:
                record["empty"] = True
                os.makedirs(entry_dir, exist_ok=True)
            if key in self.functions:  # which function, and a digest per part: where a later edit differs
                record["function"] = self.functions[key][0]
                record["parts"] = self.codes.get(key, {}).get(digest) or self.functions[key][1]
            written.append(entry_records.write_record(entry_dir, record))
            if has_entry and self.code_ids.get(key) is not None:
                sized.append((key, entry_dir))
        for key, entry_dir in sized:
            try:
                sizes = frame_sizes.save(entry_dir, self.code_ids[key])
            except Exception as exc:  # a later recompile in a restored kernel may then compile afresh
                self._tell(key, PrecompileStep.SAVE_SIZES, exc)
            else:
                written += [sizes] if sizes else []
        return written
