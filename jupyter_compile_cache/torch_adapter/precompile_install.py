"""Installing a loaded entry into its function (a failure sets the entry aside and compiles afresh), and installing a
newer entry a later restore brought into a function already live (refresh)."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterable
from typing import Any

from . import guard_policy
from .installed_entries import DeserializedOnce, advance_unique_ids, check_installed_globals
from .miss_reasons import PrecompileStep
from .precompile_guards import GuardBuilder
from .precompile_load import EntryLoader
from .precompile_troubles import Troubles

# On a CompilePackage: {backend id -> (the type of its saved content, what torch deserialized)}, from its last install.
DESERIALIZED_ATTR = "_jcc_deserialized"


class EntryInstaller:
    """torch's CompilePackage install, and the refresh of live functions."""

    def __init__(self, troubles: Troubles, loader: EntryLoader, guards: GuardBuilder) -> None:
        self.troubles, self.loader, self.guards = troubles, loader, guards
        # key -> the live CompilePackage a restored entry was installed into (a later restore may bring a newer one)
        self.live: dict[str, weakref.ref[Any]] = {}
        self.installing: str | None = None  # key of the package being installed
        self._refreshing = False  # installing a newer entry into a live function (refresh)

    def install(self, pkg: Any, orig_install: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        key = getattr(pkg, "source_id", None)
        for code in getattr(pkg, "_codes", {}):  # the entries installed before are replaced
            self.guards.restored.pop(code, None)
        self.installing = key
        self.troubles.log_filter.installing = True
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
            self.loader.loaded_keys.discard(key)
            self.troubles.fallback(key, PrecompileStep.INSTALL, exc)
            raise RuntimeError(f"jupyter_compile_cache: precompile entry {key} set aside") from exc
        finally:
            self.installing = None
            self.troubles.log_filter.installing = False
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
        if not self.live:
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
            loading = self.loader.scopes.get(key)
            result = package.DynamoCache.load(fn)  # our load: the code digest is checked again
            if result is None:
                continue
            if not guard_policy.guard_states(pkg._codes.values()) < guard_policy.guard_states(result.dynamo.codes):
                # Not strictly newer: an older bundle (a cell re-run after a later one), or the live function
                # compiled graphs here that the entry lacks. Replacing it would drop those graphs, to be traced
                # again and left out of the next save; it stays as it is.
                if loading is not None:
                    self.loader.scopes[key] = loading
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
            except Exception:  # told by `install` (or torch raised before it): the plain path recompiles what it needs
                if not pkg.is_initialized():
                    pkg.initialize(fn, None, ignore_inlined_sources=False)
                continue
            refreshed += 1
        return refreshed
