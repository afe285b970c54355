"""The logic behind `%%compile_cache`: restore before a cell, watch it, save after it.

One `CompileCacheSession` lives in each kernel. The magics, the panel, the CLI and the Python API all call it.
Reading top-down: a cell restores through `sources.find` (the local store, then the hub), runs under
`capture.CellCapture`, and saves through `store.LocalStore` (then `HubLink.push`). Nothing here raises into the
user's cell except the user's own exception: store and hub failures become warnings, and the cell's result stands.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import IO, Any, TextIO

from . import bundle, capture, fingerprint, layers, stats, torch_fixes
from .bundle import Manifest, check_name
from .hub import HubError, Lease, RedisHub
from .hub_link import HubLink
from .precompile import COUNTER_GROUP, PrecompileGuard
from .prewarm import Prewarm
from .records import CellOptions, CellReport, RestoreResult, writer
from .settings import CompileCache
from .sources import HubSource, LocalSource, Source, TransferBar, find
from .store import LocalStore, Removal, human_bytes, speed


def spare_status() -> dict[str, Any] | None:
    """The warm-restart kernel's spare process (warm_kernel.py), when this kernel has one."""
    try:
        from .warm_kernel import spare_status as status
    except ImportError:  # jupyter_client missing: a script, not a kernel
        return None
    return status()


MIN_TORCH = (2, 7)


def torch_problem() -> str | None:
    """Why torch cannot be used with this extension, or None."""
    try:
        import torch
    except ImportError:
        return "jupyter_compile_cache needs PyTorch: pip install torch (2.7 or newer)"
    version = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2])
    compiler = getattr(torch, "compiler", None)
    if version < MIN_TORCH or not hasattr(compiler, "save_cache_artifacts"):
        return f"jupyter_compile_cache needs PyTorch 2.7 or newer with torch.compiler caches; found {torch.__version__}"
    return None


class CompileCacheSession:
    def __init__(
        self,
        store_root: str | None = None,
        out: TextIO | None = None,
        err: TextIO | None = None,
        settings: CompileCache | None = None,
    ) -> None:
        self.settings = settings or CompileCache()
        if store_root:
            self.settings.store_dir = os.path.abspath(store_root)
        self._out = out
        self._err = err
        self.settings.resolved()  # reads every environment variable now, so a bad one is told once, here
        for problem in self.settings.env_problems:
            self.warn(problem)
        if os.environ.get("TORCH_CACHING_PRECOMPILE") == "1":  # read from the environment: torch is not imported yet
            self.warn(
                "TORCH_CACHING_PRECOMPILE=1 turns torch's Dynamo precompile on outside %%compile_cache cells too, "
                "where it drops identity guards and no guard of ours checks edits: plain torch.compile may return "
                "stale results after a helper is redefined. Unset it: our cells switch precompile on themselves"
            )
        self.hub_link = HubLink(self.settings, self.warn, lambda: self.out)
        self.guard = PrecompileGuard(warn=self.warn)
        self._stats_failed = False
        self.prewarm = Prewarm(enabled=lambda: self.settings.prewarm)
        self.prewarm.before_probe = self._restore_toolchain
        self.prewarm.after_probe = self._save_toolchain
        self.prewarm.listing = lambda: capture.listing(capture.cache_roots())
        self.history: list[CellReport] = []  # this kernel's %%compile_cache runs, oldest first
        self.listeners: list[Callable[[CellReport], None]] = []  # the panel refreshes through this
        self._restored_paths: dict[str, list[str]] = {}
        # (name, version, cache roots) -> each file this session extracted for it, with its size and mtime then
        self._installed: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[tuple[str, Any]]] = {}
        self._cache_load_patches: list[Any] | None = None  # torch_fixes.cache_load_patches, from the first cell on
        self.toolchain_source: str | None = None  # where this process's CPU probe programs came from, if restored

    # -- plumbing -----------------------------------------------------------------------------------------------
    @property
    def out(self) -> TextIO:
        return self._out or sys.stdout

    @property
    def err(self) -> TextIO:
        return self._err or sys.stderr

    @property
    def precompile_default(self) -> bool:
        return self.settings.precompile

    def warn(self, message: str, report: CellReport | None = None) -> None:
        print(f"compile_cache: warning: {message}", file=self.err)
        if report is not None:
            report.warnings.append(message)

    def store(self, root: str | None = None) -> LocalStore:
        return LocalStore(root or self.settings.store_dir)

    def close(self) -> None:
        """Undo everything this session changed in torch and the environment (used by %unload_ext)."""
        self.guard.uninstall()
        for patch in reversed(self._cache_load_patches or []):
            patch.undo()
        self._cache_load_patches = None
        self.hub_link.close()
        self.listeners.clear()

    # -- restore ------------------------------------------------------------------------------------------------
    def restore(
        self, name: str, store_root: str | None = None, quiet: bool = False, options: CellOptions | None = None
    ) -> RestoreResult:
        """Restore the newest compatible version of NAME into torch's cache dirs: local store, then the hub."""
        opts = options or CellOptions(store=store_root, quiet=quiet)
        return self._restore(check_name(name), opts, None, self.hub_link.for_cell(opts))

    def _install(self, manifest: Manifest, payload: IO[bytes], roots: dict[str, str]) -> list[str]:
        """Extract a version into the cache dirs, unless this session put it there and every file is as it left
        it (same size, same modification time): restoring NAME and then running its cell passes over it once."""
        key = (manifest.name, manifest.version, tuple(sorted(roots.items())))
        stamps = self._installed.get(key)
        if stamps is not None and all(_stamp(path) == stamp for path, stamp in stamps):
            return [path for path, _stamp_now in stamps]
        paths = bundle.extract(payload, manifest, roots)
        self._installed[key] = [(path, _stamp(path)) for path in paths]
        return paths

    def _restore(self, name: str, opts: CellOptions, report: CellReport | None, hub: RedisHub | None) -> RestoreResult:
        result = RestoreResult(name)
        store = self.store(opts.store)
        start = time.perf_counter()
        roots = capture.cache_roots()
        sources: list[Source] = [LocalSource(store)] + ([HubSource(hub)] if hub is not None else [])

        def bar(source: Source, _manifest: Manifest) -> TransferBar | None:
            return TransferBar(f"pulling {name!r} from the hub", opts.quiet) if source.kind == "hub" else None

        found = find(name, sources, store, lambda m, payload: self._install(m, payload, roots), bar)
        for source, exc in found.down:
            if isinstance(source, HubSource):
                self.hub_link.failed(source.hub, exc, report)
        for message in found.warnings:
            self.warn(message, report)
        result.skipped = found.skipped
        if found.manifest is not None and found.source is not None:
            manifest = found.manifest
            self._restored_paths[name] = found.installed
            result.source, result.version = found.source.kind, manifest.version
            result.files, result.bytes = len(found.installed), manifest.payload_bytes
            result.uses_cpu_kernels = manifest.uses_cpu_kernels
            cold = manifest.stats.get("body_seconds")
            result.cold_seconds = float(cold) if isinstance(cold, (int, float)) else None
            if isinstance(found.source, HubSource):
                result.hub_url, result.pull_seconds = found.source.hub.display_url, found.fetch_seconds
        result.hub_signed_elsewhere = found.wrong_signatures > 0 and not isinstance(found.source, HubSource)
        result.seconds = time.perf_counter() - start
        if not opts.quiet:
            if result.restored:
                where = "the local store" if result.source == "local" else f"the hub {result.hub_url}"
                pulled = f", pull {result.pull_seconds:.2f} s" if result.source == "hub" else ""
                print(
                    f"compile_cache: restored {name!r} from {where} ({result.files} files, "
                    f"{human_bytes(result.bytes)}) in {result.seconds:.2f} s"
                    + (f" ({speed(result.bytes, result.seconds)})" if result.seconds >= 1 else "")
                    + pulled,
                    file=self.out,
                )
            elif result.skipped:
                print(f"compile_cache: {name!r} not restored: " + "; ".join(result.skipped), file=self.out)
        return result

    # -- the cell -----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def cell(self, name: str, options: CellOptions | None = None) -> Iterator[CellReport]:
        """Restore NAME, run the block, save what it compiled. Used by the magic and usable from scripts."""
        opts = options or CellOptions()
        check_name(name)
        self.prewarm.join()  # before touching torch._dynamo: importing it from two threads at once deadlocks
        if self._cache_load_patches is None:
            self._cache_load_patches = torch_fixes.cache_load_patches()
        report = CellReport(name)
        lease: Lease | None = None
        precompile = self.precompile_default if opts.precompile is None else opts.precompile
        precompile = precompile and PrecompileGuard.available()
        previous_precompile = self._set_precompile(precompile)
        hub = self.hub_link.for_cell(opts)  # once per cell: restore, lease and push use the same hub
        try:
            if opts.restore:
                report.restore = self._restore(name, opts, report, hub)
            lease = self.hub_link.single_flight(hub, name, opts, report, lambda: self._restore(name, opts, report, hub))
            self._wait_for_prewarm(report.restore)
            # this cell's wait, the part in IPython's pre-run hook included
            report.waited_seconds = self.prewarm.take_waited()
            prewarm_error = self.prewarm.take_error()
            if prewarm_error is not None:
                self.warn(f"preparing torch's compiler in the background stopped ({prewarm_error}); cells run as they "
                          "would without it", report)  # fmt: skip
            if opts.torch_remote and hub is not None:
                self.hub_link.point_torch_at(hub)
            roots = capture.cache_roots()
            watcher = capture.CellCapture(roots, self._restored_paths.get(name, ()))
            before = layers.counter_snapshot()
            stale_before = _stale_count()
            fallbacks_before = _fallback_count()
            context_before = _precompile_context_snapshot() if precompile else {}
            loaded_before = set(self.guard.loaded_keys)
            watcher.start()
            start = time.perf_counter()
            try:
                yield report
            except BaseException:
                watcher.stop()
                report.ok = False
                report.body_seconds = time.perf_counter() - start
                self._finish(report)
                raise
            report.body_seconds = time.perf_counter() - start
            dynamo_keys: set[str] = set()
            digest_files: list[str] = []
            if precompile:
                dynamo_keys = self._save_precompile_entries(context_before, loaded_before, report)
                digest_files = self.guard.write_digests(dynamo_keys)
            if opts.whole_cache:
                dynamo_keys |= _all_dynamo_keys(roots)
                digest_files += capture.all_files(roots)
            cell_files = watcher.collect(dynamo_keys if precompile else None, digest_files)
            delta = layers.counter_delta(before, layers.counter_snapshot())
            for layer_name, counts in delta.items():
                counts["written"] = cell_files.new_by_layer.get(layer_name, 0)
            report.layers = delta
            report.stale_rejected = _stale_count() - stale_before
            report.precompile_fallbacks = _fallback_count() - fallbacks_before
            for reason in self.guard.new_bypass_reasons() if precompile else ():
                if not opts.quiet:
                    print(
                        f"compile_cache: torch does not package a function of this cell for precompile ({reason}); "
                        "a restored kernel traces it again, its compiled graph still from torch's AOTAutograd and FX "
                        "graph caches",
                        file=self.out,
                    )
            # A graph loaded from a cache still writes files (torch emits the Triton kernels bundled in a precompile
            # or FX entry): new files only count as new work when some graph layer missed.
            compiled_new = not layers.only_graph_hits(delta) and (
                sum(n for layer_name, n in cell_files.new_by_layer.items() if layer_name != "pgo") > 0
            )
            if opts.save and cell_files.files and (compiled_new or opts.force_save):
                self._save(name, cell_files, report, opts, hub)
            self._finish(report, opts.store)
            if not opts.quiet:
                print(self.summary_line(report), file=self.out)
        finally:
            self._set_precompile(previous_precompile)
            if lease is not None:
                lease.release()

    def _wait_for_prewarm(self, restore: RestoreResult | None) -> None:
        """Never compile while the prewarm thread imports; wait for its CPU ISA probe when C++ kernels follow."""
        import torch

        self.prewarm.start()  # scripts never ran %load_ext: probe here (in parallel, toolchain bundle first)
        uses_cpu_kernels = restore is not None and restore.uses_cpu_kernels
        if uses_cpu_kernels or not torch.cuda.is_available():
            self.prewarm.wait_all()  # torch would otherwise probe again, serially, on the critical path
        else:
            self.prewarm.join()

    def _finish(self, report: CellReport, store_root: str | None = None) -> None:
        report.finished = time.time()
        self.history.append(report)
        store = self.store(store_root)
        if report.ok:
            with contextlib.suppress(OSError):
                store.save_run(report.name, report.to_json())
        try:  # statistics are worth a cell's nothing: a store that cannot take them is left as it is
            store.add_stats(stats.outcome(report))
        except Exception as exc:
            if not self._stats_failed:  # told once a session
                self._stats_failed = True
                self.warn(f"the store's statistics were not updated ({exc}); the cell's result stands")
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):  # a broken view must never break the cell
                listener(report)

    def stats(self, store_root: str | None = None, zero: bool = False) -> dict[str, Any]:
        """The store's cumulative statistics (stats.py) with its size against the cap; `zero` starts them again
        (the returned figures are those before zeroing)."""
        store = self.store(store_root)
        current = store.zero_stats() if zero else store.read_stats()
        size, versions, names = store.usage()
        return {
            "store": store.root,
            "since": current.since or None,
            **current.counts,
            "hit_rate": current.hit_rate,
            "store_bytes": size,
            "max_bytes": self.settings.max_bytes,
            "versions": versions,
            "bundles": names,
            "zeroed": zero,
        }

    def _set_precompile(self, enabled: bool) -> bool | None:
        """Switch torch's caching_precompile (and our guard with it); returns the previous value."""
        if not PrecompileGuard.available():
            return None
        import torch._dynamo.config as dynamo_config

        previous = bool(dynamo_config.caching_precompile)
        if enabled:
            self.guard.install()
        dynamo_config.caching_precompile = bool(enabled)
        return previous

    def _save_precompile_entries(
        self, context_before: dict[str, int], loaded_before: set[str], report: CellReport
    ) -> set[str]:
        """Write Dynamo precompile entries to the cache dir; return the keys this cell compiled or restored."""
        try:
            from torch._dynamo.precompile_context import PrecompileContext
        except ImportError:
            return set()
        entries = getattr(PrecompileContext, "_dynamo_cache_entries", {})
        compiled = {key for key, entry in entries.items() if context_before.get(key) != id(entry)}
        # torch rewrites every entry of the process when saving (with new bytes each time): only save when this
        # cell compiled something, or a warm re-run would look like new work.
        if compiled:
            self.guard.save_entries(PrecompileContext)
        # Entries whose precompile failed in torch stay out of bundles (and out of the cache dir).
        return (compiled | (self.guard.loaded_keys - loaded_before)) - self.guard.refused_keys

    def _save(
        self, name: str, cell_files: capture.CellFiles, report: CellReport, opts: CellOptions, hub: RedisHub | None
    ) -> None:
        store = self.store(opts.store)
        stats = {"body_seconds": report.body_seconds, "layers": report.layers, "layer_bytes": cell_files.layer_bytes()}
        manifest = _new_manifest(name, fingerprint.current(), stats)
        start = time.perf_counter()
        try:
            manifest = store.write(manifest, cell_files.files)
        except OSError as exc:
            self.warn(f"could not save bundle {name!r} to {store.root}: {exc}; the cell's result stands", report)
            return
        report.saved_version = manifest.version
        report.saved_bytes = manifest.payload_bytes
        report.saved_files = len(manifest.members)
        report.save_seconds = time.perf_counter() - start
        self._enforce_size_cap(store, report)
        if hub is not None and report.restore is not None and report.restore.hub_signed_elsewhere:
            # The team's versions of NAME did not verify with our secret: a version signed with it would be refused
            # by the team in turn. Most likely our secret is not the team's.
            self.warn(
                f"not pushed {name!r} to the hub: its versions there are signed with another secret (is "
                "JUPYTER_COMPILE_CACHE_SECRET the team's?); saved to the local store only",
                report,
            )
        elif hub is not None:
            self.hub_link.push(hub, store, manifest, report, opts.quiet)

    # -- the per-machine toolchain bundle ---------------------------------------------------------------------
    def toolchain_store(self, store_root: str | None = None) -> LocalStore:
        """Programs torch compiles once per process to probe the CPU (pick_vec_isa): one bundle per fingerprint."""
        return LocalStore(os.path.join(self.store(store_root).root, "toolchain"), max_versions=1)

    def _restore_toolchain(self) -> None:
        """Before the CPU probe (prewarm thread): this machine's probe programs from the local store, else from the
        hub, where a colleague with the same CPU left them."""
        now = fingerprint.current(with_gpu=False)
        store = self.toolchain_store()
        hub = self.hub_link.for_toolchain()
        sources: list[Source] = [LocalSource(store)] + ([HubSource(hub)] if hub is not None else [])
        roots = capture.cache_roots()
        found = find(fingerprint.digest(now), sources, store, lambda m, p: bundle.extract(p, m, roots), now=now)
        for source, exc in found.down:  # the next cell skips it instead of waiting for it again, and says so
            if isinstance(source, HubSource):
                self.hub_link.failed(source.hub, exc, None, quiet=True)
        self.toolchain_source = found.source.kind if found.source is not None else None

    def _save_toolchain(self) -> None:
        """After the CPU probe (prewarm thread): the probe programs this process built, as a bundle, in the local
        store and on the hub. The prewarm thread runs once per session, so this does too."""
        files = [p for p in self.prewarm.created if os.path.exists(p)]
        if not files:
            return
        now = fingerprint.current(with_gpu=False)
        digest = fingerprint.digest(now)
        store = self.toolchain_store()
        manifests = store.versions(digest)
        if not manifests:
            roots = capture.cache_roots()
            members = {capture.member_name(p, roots): p for p in files}
            try:
                manifests = [store.write(_new_manifest(digest, now, {}), {k: v for k, v in members.items() if k})]
            except OSError as exc:
                self.warn(f"could not save the CPU probe programs to {store.root}: {exc}")
                return
        hub = self.hub_link.for_toolchain()
        if hub is not None:
            try:
                on_hub = hub.versions(digest)
            except HubError as exc:
                self.hub_link.failed(hub, exc, None, quiet=True)
                return
            if not on_hub:
                self.hub_link.push(hub, store, manifests[0], CellReport(digest), quiet=True, background=True)

    def _enforce_size_cap(self, store: LocalStore, report: CellReport) -> None:
        """Evict least recently used versions past `CompileCache.max_size`."""
        cap = self.settings.max_bytes
        try:
            evicted = store.gc(cap)
        except OSError as exc:
            self.warn(f"could not evict old bundles from {store.root}: {exc}", report)
            return
        if evicted:
            names = ", ".join(sorted({name for name, _, _ in evicted}))
            print(
                f"compile_cache: store over {human_bytes(cap)}: evicted {len(evicted)} least recently used "
                f"version(s) ({names})",
                file=self.out,
            )

    def summary_line(self, report: CellReport) -> str:
        hits = sum(v["hits"] for v in report.layers.values())
        misses = sum(v["misses"] for v in report.layers.values())
        parts = [
            f"compile_cache: {report.name!r} ran in {report.body_seconds:.2f} s, {hits} cache hits, {misses} misses"
        ]
        if report.stale_rejected:
            parts.append(f"{report.stale_rejected} stale precompile entries refused (code changed)")
        if report.precompile_fallbacks:
            parts.append(f"{report.precompile_fallbacks} functions fell back from precompile to plain torch.compile")
        if report.waited_seconds >= 0.5:
            parts.append(f"waited {report.waited_seconds:.1f} s for torch's compiler to load (once per kernel)")
        if report.saved_version:
            where = "the local store and the hub" if report.pushed else "the local store"
            took = (
                f" in {report.save_seconds:.1f} s ({speed(report.saved_bytes, report.save_seconds)})"
                if report.save_seconds >= 1
                else ""
            )
            parts.append(f"saved {report.saved_files} files ({human_bytes(report.saved_bytes)}) to {where}{took}")
        else:
            parts.append("nothing new to save")
        return "; ".join(parts)

    # -- views ----------------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Per-layer state: switch, env var, entries and bytes on disk, this kernel's hits / misses / bypasses."""
        self.prewarm.join()  # `%load_ext` and `status` in one cell: wait for the background imports
        roots = capture.cache_roots()
        usage = layers.disk_usage(roots["inductor"])
        totals = _session_counters()
        layer_rows = []
        for layer in layers.LAYERS:
            counts = totals.get(layer.name, {"hits": 0, "misses": 0, "bypasses": 0})
            scope = self.switch_scope(layer)
            layer_rows.append(
                {
                    "layer": layer.name,
                    "title": layer.title,
                    "scope": scope,
                    "enabled": scope not in ("off", "n/a"),
                    "supported": layer.supported(),
                    "switch": ".".join(layer.switch) if layer.switch else None,
                    "env_var": layer.env_var,
                    "env_value": os.environ.get(layer.env_var) if layer.env_var else None,
                    "place": layer.place,
                    **usage.get(layer.name, {"entries": 0, "bytes": 0}),
                    **counts,
                }
            )
        store = self.store()
        hub = self.hub_link.status()
        return {
            "hub": report_hub_line(hub) if hub.get("url") else None,
            "settings": self.settings.resolved(),
            "spare": spare_status(),
            "cache_dir": roots["inductor"],
            "store": store.root,
            "store_bytes": store.total_bytes(),
            "precompile_default": self.precompile_default,
            "torch_remote": self.hub_link.torch_remote,
            "stale_rejected": _stale_count(),
            "precompile_fallbacks": _fallback_count(),
            "layers": layer_rows,
            "cells": [asdict(r) for r in self.history],
        }

    def bundles(self, store_root: str | None = None) -> list[dict[str, Any]]:
        """Local bundles, then the hub's (when one is configured and answers)."""
        local = list(self.store(store_root).bundles())
        remote: list[Manifest] = []
        hub = self.hub_link.for_cell(CellOptions())
        if hub is not None:
            try:
                remote = [m for name in hub.names() for m in hub.versions(name)]
            except HubError as exc:
                self.hub_link.failed(hub, exc, None)
        if not local and not remote:
            return []  # nothing to compare with this machine: torch is not imported (1.4 s)
        now = fingerprint.current(with_gpu=True)
        rows = [bundle_row(b.manifest, now, b.last_used, b.store) for b in local]
        return rows + [bundle_row(m, now, None, "hub") for m in remote]

    def push(self, name: str, store_root: str | None = None) -> str:
        """Push the newest local version of NAME to the hub; returns what happened, in words."""
        hub = self.hub_link.for_cell(CellOptions(store=store_root))
        if hub is None:
            return (
                "no hub: none configured (CompileCache.hub, JUPYTER_COMPILE_CACHE_HUB or %compile_cache hub URL), "
                "or it failed less than a minute ago"
            )
        store = self.store(store_root)
        versions = store.versions(check_name(name))
        if not versions:
            return f"no local bundle named {name!r}"
        report = CellReport(name)
        self.hub_link.push(hub, store, versions[0], report, quiet=True)
        return f"pushed {name!r} to {hub.display_url}" if report.pushed else f"push failed: {report.warnings[-1:]}"

    def remove(self, name: str, version: str | None = None, where: str = "local") -> list[Removal]:
        """Delete NAME (one version or all) from the local store or the hub; returns what went."""
        check_name(name)
        if where == "hub":
            hub = self.hub_link.for_cell(CellOptions())
            return hub.remove(name, version) if hub is not None else []
        return self.store().remove(name, version)

    def gc(
        self,
        store_root: str | None = None,
        max_size: int | None = None,
        older_than: float | None = None,
        incompatible: bool = False,
        dry_run: bool = False,
        yes: bool = False,
    ) -> tuple[LocalStore, list[Removal], bool]:
        """Evict versions unused for more than `older_than` seconds, those that cannot restore on this machine
        (`incompatible`: another torch, Python, GPU...), then the least recently used down to `max_size` (the
        default cap CompileCache.max_size when no other rule is given). Returns (store, removals, refused):
        refused when it would empty the store without `yes`; then nothing is removed and removals is the plan."""
        store = self.store(store_root)
        if max_size is None and older_than is None and not incompatible:
            max_size = self.settings.max_bytes
        unusable = None
        if incompatible:
            now = fingerprint.current(with_gpu=True)
            unusable = lambda m: fingerprint.incompatibility(m, now) is not None  # noqa: E731
        plan = store.gc(max_size, dry_run=True, older_than=older_than, unusable=unusable)
        if dry_run or not plan:
            return store, plan, False
        if len(plan) == store.version_count() and not yes:
            return store, plan, True
        return store, store.gc(max_size, older_than=older_than, unusable=unusable), False

    def explain(self, name: str, store_root: str | None = None) -> dict[str, Any]:
        """Field by field why each version of NAME would or would not restore here, and the last run's layers."""
        check_name(name)
        store = self.store(store_root)
        now = fingerprint.current()
        versions = []
        for m in store.versions(name):
            checks = fingerprint.compare(m.fingerprint, now, m.uses_gpu, m.uses_cpu_kernels)
            versions.append(
                {
                    "version": m.version,
                    "bytes": m.payload_bytes,
                    "files": len(m.members),
                    "created": m.created,
                    "writer": m.writer,
                    "reason": fingerprint.mismatch_reason(checks),
                    "fields": [asdict(c) | {"ok": c.ok} for c in checks],
                }
            )
        return {"name": name, "store": store.root, "versions": versions, "last_run": store.last_run(name)}

    def set_layer(self, layer_name: str, enabled: bool) -> layers.Layer:
        """Switch one of torch's cache layers. Dynamo precompile drops identity guards that only our cells put
        back, so it is switched for `%%compile_cache` cells alone (CompileCache.precompile) and torch's global
        `caching_precompile` is never left on; the other layers are torch's own switches for the whole kernel."""
        self.prewarm.join()
        layer = layers.resolve(layer_name)
        if layer.name == "dynamo_precompile":
            if enabled and not PrecompileGuard.available():  # disabling it is always allowed: a no-op there
                raise ValueError(
                    "Dynamo precompile is not used with this torch (it needs torch._dynamo.config.caching_precompile "
                    "and torch 2.11 or newer)"
                )
            self.settings.precompile = enabled
        else:
            layer.set_switch(enabled)
        return layer

    def switch_scope(self, layer: layers.Layer) -> str:
        """Where LAYER applies now, in words: 'off', '%%compile_cache cells', 'this kernel' or 'everywhere'."""
        if not layer.supported():
            return "n/a"
        if layer.name == "dynamo_precompile":
            if layer.switch_value():  # torch's own switch, set outside us (TORCH_CACHING_PRECOMPILE=1, say)
                return "everywhere"
            return "%%compile_cache cells" if self.precompile_default else "off"
        if layer.switch is None:
            return "this kernel"
        return "this kernel" if layer.switch_value() else "off"

    def switch_line(self, layer: layers.Layer) -> str:
        """What `enable` / `disable` changed, for the magic and the panel."""
        scope = self.switch_scope(layer)
        if layer.name == "dynamo_precompile":
            if scope == "everywhere":
                return (
                    f"{layer.title}: torch's own caching_precompile is on, so plain torch.compile outside our cells "
                    "drops identity guards too; unset TORCH_CACHING_PRECOMPILE (our cells switch it on themselves)"
                )
            if scope == "off":
                return f"{layer.title} off (CompileCache.precompile = False)"
            return (
                f"{layer.title} on in %%compile_cache cells only (CompileCache.precompile = True; torch's "
                "caching_precompile is on only while such a cell runs)"
            )
        switch = ".".join(layer.switch) if layer.switch else "always on"
        return f"{layer.title} {'on' if scope != 'off' else 'off'} in this kernel ({switch} = {layer.switch_value()})"


def bundle_row(m: Manifest, now: dict[str, Any], last_used: float | None, where: str) -> dict[str, Any]:
    return {
        "name": m.name,
        "version": m.version,
        "bytes": m.payload_bytes,
        "files": len(m.members),
        "created": m.created,
        "last_used": last_used,
        "writer": m.writer,
        "store": where,
        "compatible": fingerprint.incompatibility(m, now) is None,
        "fingerprint_id": m.fingerprint_id,
    }


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def report_hub_line(info: dict[str, Any]) -> str:
    from .report import hub_line

    return hub_line(info).removeprefix("compile_cache: hub ")


def _new_manifest(name: str, now: dict[str, Any], stats: dict[str, Any]) -> Manifest:
    """A manifest before its payload is written (the store fills in members and hashes)."""
    fp_id = fingerprint.digest(now)
    return Manifest(
        name=name,
        version=bundle.new_version_id(fp_id),
        created=time.time(),
        writer=writer(),
        fingerprint=now,
        fingerprint_id=fp_id,
        payload_sha256="",
        payload_bytes=0,
        members=[],
        stats=stats,
    )


def _our_counter(name: str) -> int:
    try:
        from torch._dynamo.utils import counters
    except Exception:
        return 0
    return int(counters.get(COUNTER_GROUP, {}).get(name, 0))


def _stale_count() -> int:
    return _our_counter("precompile_stale_rejected")


def _fallback_count() -> int:
    return _our_counter("precompile_fallback")


def _session_counters() -> dict[str, dict[str, int]]:
    return layers.counter_delta({}, layers.counter_snapshot())


def _all_dynamo_keys(roots: dict[str, str]) -> set[str]:
    try:
        return set(os.listdir(os.path.join(roots["inductor"], "dynamo")))
    except OSError:
        return set()


def _precompile_context_snapshot() -> dict[str, int]:
    try:
        from torch._dynamo.precompile_context import PrecompileContext
    except ImportError:
        return {}
    return {key: id(entry) for key, entry in getattr(PrecompileContext, "_dynamo_cache_entries", {}).items()}
