"""The cell flow behind `%%compile_cache`: restore before a cell, watch it, save after it.

One `CompileCacheSession` lives in each kernel (`get_session`). A cell restores through the one bundle search
(bundle_search.py: the local store, then the hub), runs under `capture.CellCapture` with one `CellSnapshot` of
torch's counters, and saves through `store.LocalStore` (then the hub policy's push). Nothing here raises into the
user's cell except the user's own exception: store and hub failures become warnings, and the cell's result
stands. What the front ends show and manage besides cells (status, list, explain, stats, gc...) is commands.py.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from ..kernels.prewarm import Prewarm
from ..storage import bundle
from ..storage.bundle import Manifest, check_name, matching_versions
from ..storage.hub import Lease
from ..storage.sources import HubSource, Progress, Source
from ..storage.store import LocalStore
from ..torch_adapter import capture, compiler, fingerprint, kernel_load_fixes
from ..torch_adapter.cell_snapshot import CellSnapshot
from ..torch_adapter.entry_records import alternate_member, saved_functions
from ..torch_adapter.miss_reasons import MissCause, MissReason
from ..torch_adapter.precompile import PrecompileGuard
from . import events
from .events import Reporter
from .notebook import NotebookStage
from .records import CellOptions, CellReport, RestoreResult, writer
from .settings import CompileCache
from .stores import Stores
from .toolchain import Toolchain

current: CompileCacheSession | None = None  # the kernel's one session


PASSED_OVER = "not the version asked for"


def get_session(reporter: Reporter | None = None) -> CompileCacheSession:
    """The kernel's one session (created on first use, telling REPORTER what happens)."""
    global current
    if current is None:
        current = CompileCacheSession(reporter=reporter)
    return current


class CompileCacheSession(Stores):
    def __init__(
        self,
        store_dir: str | None = None,
        settings: CompileCache | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        super().__init__(store_dir, settings, reporter)
        if os.environ.get("TORCH_CACHING_PRECOMPILE") == "1":  # read from the environment: torch is not imported yet
            self.tell(events.CachingPrecompileEverywhere())
        self.guard = PrecompileGuard(warn=lambda trouble: self.tell(events.PrecompileFailed(trouble)))
        self._stats_failed = False
        self.toolchain = Toolchain(lambda: self.settings.store_dir, self.hub_policy, self.search, self.tell)
        self.prewarm = Prewarm(
            enabled=lambda: self.settings.prewarm,
            before_probe=self.toolchain.restore,
            after_probe=self.toolchain.save,
            listing=lambda: capture.listing(capture.cache_roots()),
        )
        self.notebook = NotebookStage(self)  # the kernel's notebook, its bundles fetched ahead (%load_ext starts it)
        self._restored_paths: dict[str, list[str]] = {}
        # (name, version, cache roots) -> each file this session extracted for it, with its size and mtime then
        self._installed: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[tuple[str, Any]]] = {}
        self._cache_load_patches: list[Any] | None = None  # kernel_load_fixes, from the first cell to close()
        self._to_refresh: list[str] = []  # files the last restore wrote, for the precompile guard's refresh
        self._alternates: dict[str, set[str]] = {}  # NAME -> versions whose entries were installed beside its own

    # -- plumbing -----------------------------------------------------------------------------------------------
    @property
    def precompile_default(self) -> bool:
        return self.settings.precompile

    def close(self) -> None:
        """Undo everything this session changed in torch and the environment (used by %unload_ext)."""
        self.guard.uninstall()
        for patch in reversed(self._cache_load_patches or []):
            patch.undo()
        self._cache_load_patches = None
        super().close()

    def _load_fix_failed(self, trouble: kernel_load_fixes.LoadFixTrouble) -> None:
        self.tell(events.LoadFixFailed(trouble))

    # -- restore ------------------------------------------------------------------------------------------------
    def restore(
        self,
        name: str,
        store_dir: str | None = None,
        quiet: bool = False,
        options: CellOptions | None = None,
        progress: Progress | None = None,
    ) -> RestoreResult:
        """Restore the newest compatible version of NAME into torch's cache dirs: local store, then the hub.
        `progress(done, total)` is told the bytes pulled, then restored (else a bar shows what takes over a second)."""
        opts = options or CellOptions(store_dir=store_dir, quiet=quiet)
        result = self._restore(check_name(name), opts, None, self.hub_policy.for_cell(opts), progress)
        self._refresh_loaded()
        return result

    def _refresh_loaded(self) -> None:
        """Newer precompile entries a restore brought for functions this kernel already loaded, installed now."""
        paths, self._to_refresh = self._to_refresh, []
        if paths:
            self.guard.refresh(paths)

    def _install(
        self, manifest: Manifest, payload: IO[bytes], roots: dict[str, str], progress: Progress | None = None
    ) -> list[str]:
        """Extract a version into the cache dirs, unless this session put it there and every file is as it left
        it (same size, same modification time): restoring NAME and then running its cell passes over it once."""
        key = (manifest.name, manifest.version, tuple(sorted(roots.items())))
        stamps = self._installed.get(key)
        if stamps is not None and all(_stamp(path) == stamp for path, stamp in stamps):
            return [path for path, _stamp_now in stamps]
        paths = bundle.extract(payload, manifest, roots, progress)
        self._installed[key] = [(path, _stamp(path)) for path in paths]
        self._to_refresh += paths  # a function this kernel already loaded may have a newer entry here
        return paths

    def _restore(
        self,
        name: str,
        opts: CellOptions,
        report: CellReport | None,
        hub: HubSource | None,
        progress: Progress | None = None,
    ) -> RestoreResult:
        result = RestoreResult(name)
        store = self.store(opts.store_dir)
        start = time.perf_counter()
        roots = capture.cache_roots()

        def pull_bar(source: Source, _manifest: Manifest) -> Progress | None:
            if source.kind != "hub":
                return None
            return progress or self.transfer(events.Moving.PULL, name, opts.quiet)

        def install(manifest: Manifest, payload: IO[bytes]) -> list[str]:
            bar = None if progress is not None else self.transfer(events.Moving.RESTORE, name, opts.quiet)
            try:
                return self._install(manifest, payload, roots, progress or bar)
            finally:
                if bar is not None:
                    bar.close()

        pinned = opts.version

        def wanted(manifest: Manifest) -> str | None:
            if pinned is not None and not matching_versions([manifest.version], pinned):
                return PASSED_OVER
            return None

        found = self.search.newest(name, store, hub, wanted=wanted, install=install, progress=pull_bar, report=report)
        found.skipped = [skip for skip in found.skipped if skip.detail != PASSED_OVER]
        # a version asked for that NAME has not
        unknown_version = pinned if pinned is not None and found.manifest is None and not found.skipped else None
        result.skipped = list(found.skipped)
        from_hub = hub if hub is not None and found.source is hub else None
        if found.manifest is not None and found.source is not None:
            manifest = found.manifest
            self._restored_paths[name] = found.installed
            result.source, result.version = found.source.kind, manifest.version
            result.files, result.bytes = len(found.installed), manifest.payload_bytes
            result.uses_cpu_kernels = manifest.uses_cpu_kernels
            cold = manifest.stats.get("body_seconds")
            result.cold_seconds = float(cold) if isinstance(cold, (int, float)) else None
            if from_hub is not None:
                self.hub_policy.trust(from_hub, report)
                result.hub_url, result.pull_seconds = from_hub.display_url, found.fetch_seconds
        result.hub_signed_elsewhere = found.wrong_signatures > 0 and from_hub is None
        result.retries = len(found.retries)
        result.seconds = time.perf_counter() - start
        if result.restored:  # what went wrong on the way is worth telling: a wrong secret, a damaged version
            for problem in found.problems:
                self.tell(events.ManifestQuarantined(problem), report)
            for skip in found.skipped:
                if skip.worth_telling:
                    self.tell(events.SkippedVersion(name, skip), report)
            fetched_at_start = result.source == "local" and name in self.notebook.fetched
            if fetched_at_start and hub is not None:
                self.hub_policy.trust(hub, report)
            restored = events.Restored(
                name,
                result.source or "",
                result.hub_url,
                fetched_at_start,
                result.files,
                result.bytes,
                result.seconds,
                result.pull_seconds,
                result.retries,
            )
            self.tell(restored, report, opts.quiet)
        elif found.skipped or found.problems or unknown_version is not None:  # one line says it all, each reason once
            not_restored = events.NotRestored(name, tuple(found.skipped), tuple(found.problems), unknown_version)
            self.tell(not_restored, report, opts.quiet)
        return result

    # -- the cell -----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def cell(self, name: str, options: CellOptions | None = None) -> Iterator[CellReport]:
        """Restore NAME, run the block, save what it compiled. Used by the magic and usable from scripts.

        The stages, in order: restore (the local store, then the hub), lease (the hub's single flight: one kernel
        compiles NAME while the others wait for its bundle), compiler ready (the background prewarm joined), run
        (the body, its cache files watched), record (what it compiled and used) and save (the local store, then the
        hub). Success and failure end the same way (`_end`). A failure of ours before the body lets it run as plain
        torch.compile would; one after it leaves the cell's result standing: either is told, never raised."""
        opts = options or CellOptions()
        check_name(name)
        if self._compiles_nothing(name, opts):
            with self._cell_without_compiler(name, opts) as report:
                yield report
            return
        report = CellReport(name, source_digest=opts.source_digest)
        precompile = self.precompile_default if opts.precompile is None else opts.precompile
        precompile = precompile and PrecompileGuard.available()
        hub = self.hub_policy.for_cell(opts)  # once per cell: restore, lease and push use the same hub
        lease: Lease | None = None
        previous_precompile: bool | None = None
        ran = False
        try:
            try:
                self.prewarm.join()  # before touching torch's compiler: importing it from two threads deadlocks
                if self._cache_load_patches is None and opts.compiles_here:
                    warn = self._load_fix_failed
                    self._cache_load_patches = kernel_load_fixes.cache_load_patches(warn)
                # torch's switch is left alone where nothing compiles (and Dynamo is not imported for it)
                previous_precompile = self._set_precompile(precompile) if opts.compiles_here else None
                if opts.restore:
                    self._restore_stage(name, opts, report, hub)
                lease = self._lease_stage(name, opts, report, hub)
                self._compiler_stage(opts, report, hub)
                watch = self._watch(name, opts, report, precompile)
            except Exception as exc:  # ours failed before the body: it runs without the cache around it
                self.tell(events.StoodAside(name, True, f"{type(exc).__name__}: {exc}"), report)
                watch = None
                self._set_precompile(previous_precompile)  # torch's own switch back for the body
                previous_precompile = None
            ran = True
            with self._run_stage(report, watch):
                yield report
            if watch is not None:
                try:
                    self._record_and_save_stages(name, opts, report, hub, watch)
                except Exception as exc:  # ours failed after the body: its result stands
                    self.tell(events.StoodAside(name, False, f"{type(exc).__name__}: {exc}"), report)
        finally:
            self.guard.find_elsewhere = None
            if ran:  # the body ran: its ending, whichever way it went
                self._end(report, opts)
            self._set_precompile(previous_precompile)
            if lease is not None:
                lease.release()

    def _restore_stage(self, name: str, opts: CellOptions, report: CellReport, hub: HubSource | None) -> None:
        """NAME restored: the local store, then the hub (after the kernel's own fetch of it, if one is running)."""
        report.staged_wait_seconds = self.notebook.wait_for(name)  # only while NAME itself is being fetched
        report.restore = self._restore(name, opts, report, hub)

    def _lease_stage(self, name: str, opts: CellOptions, report: CellReport, hub: HubSource | None) -> Lease | None:
        """The hub's single flight: the lease to compile NAME taken, or a collaborator's bundle waited for and
        restored. Returns the lease the cell holds until it ends."""
        fingerprint_id = fingerprint.digest(fingerprint.current()) if hub is not None else ""
        return self.hub_policy.single_flight(
            hub, name, fingerprint_id, writer(), opts, report, lambda: self._restore(name, opts, report, hub)
        )

    def _compiler_stage(self, opts: CellOptions, report: CellReport, hub: HubSource | None) -> None:
        """torch's compiler ready for the body: the prewarm's work it needs done, and torch's own remote caches
        pointed at the hub where asked."""
        if opts.compiles_here:
            self._wait_for_prewarm(report.restore)
        else:  # the processes it starts probe the CPU each: give them this machine's probe programs, if kept
            try:
                self.toolchain.restore()
            except Exception as exc:  # a speed-up only: the processes probe for themselves
                self.tell(events.StepFailed(events.Step.PROBE_RESTORE, f"{type(exc).__name__}: {exc}"), report)
        report.waited_seconds = self.prewarm.take_waited()  # this cell's wait, IPython's pre-run hook's part included
        prewarm_error = self.prewarm.take_error()
        if prewarm_error is not None:
            self.tell(events.StepFailed(events.Step.PREWARM, prewarm_error), report)
        if opts.torch_remote and hub is not None:
            self.hub_policy.point_torch_at(hub, report)

    def _watch(self, name: str, opts: CellOptions, report: CellReport, precompile: bool) -> _Watch:
        """Right before the body: the cache files and torch's counters as they are, the guard set to find another
        version of NAME for a function whose code the restored one does not hold, and what was restored loaded."""
        capture.export_cache_dirs()  # processes the cell starts use, and fill, the same caches
        roots = capture.cache_roots()
        watcher = capture.CellCapture(roots, self._restored_paths.get(name, ()))
        before = CellSnapshot.take(self.guard if precompile else None)
        self._before_body(name, opts, report, watcher)
        return _Watch(watcher, before, roots, precompile)

    @contextlib.contextmanager
    def _run_stage(self, report: CellReport, watch: _Watch | None) -> Iterator[None]:
        """The body, timed, its cache files watched; a body that raises leaves the report not ok."""
        if watch is not None:
            watch.watcher.start()
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            report.ok = False
            if watch is not None:
                watch.watcher.stop()
            raise
        finally:
            report.body_seconds = time.perf_counter() - start
            self.guard.find_elsewhere = None

    def _record_and_save_stages(
        self, name: str, opts: CellOptions, report: CellReport, hub: HubSource | None, watch: _Watch
    ) -> None:
        """After a body that ran to its end: what it compiled and used recorded, then saved if it compiled."""
        cell_files, precompile_keys = self._record_step(
            report, opts, watch.before, watch.watcher, watch.roots, watch.precompile
        )
        if cell_files.processes and cell_files.probe_programs:  # built by its processes: kept for the next ones
            self.toolchain.save(cell_files.probe_programs)
        compiled_new = cell_files.compiled_new(report.layers, watch.before.frames_compiled())
        if opts.save and cell_files.files and (compiled_new or opts.force_save):
            functions = saved_functions(precompile_keys) if watch.precompile else {}
            self._save(name, cell_files, report, opts, hub, functions)

    def _end(self, report: CellReport, opts: CellOptions) -> None:
        """Every cell's ending, whether its body ran to the end or raised: its run kept (in the store it named), the
        statistics counted, its line told."""
        self._finish(report, opts.store_dir)
        self.tell(events.CellFinished(report), None, opts.quiet)

    def _compiles_nothing(self, name: str, opts: CellOptions) -> bool:
        """A magic's cell while torch's compiler is still loading, whose body does not look like it compiles, with
        nothing to restore: no bundle NAME in the local store and no hub for it. Waiting for the compiler gains it
        nothing (what does not compile has nothing to save)."""
        if opts.body is None or compiler.may_compile(opts.body) or self.prewarm.loading() is None:
            return False
        if opts.restore and name in self.store(opts.store_dir).names():
            return False
        return self.hub_policy.for_cell(opts) is None

    @contextlib.contextmanager
    def _cell_without_compiler(self, name: str, opts: CellOptions) -> Iterator[CellReport]:
        """The body at once, without the cache around it: no snapshot of torch's counters, no save. Should it
        compile after all (through code out of the cell's sight), that is said; plain torch.compile ran it."""
        report = CellReport(name, source_digest=opts.source_digest)
        frames = compiler.frames_compiled()
        start = time.perf_counter()
        try:
            yield report
        except BaseException:
            report.ok = False
            raise
        finally:
            report.body_seconds = time.perf_counter() - start
            if compiler.frames_compiled() > frames:
                self.tell(events.CompiledWhileLoading(name), report)
            self._end(report, opts)

    def _before_body(self, name: str, opts: CellOptions, report: CellReport, watcher: capture.CellCapture) -> None:
        """Right before the body, after the counters' snapshot: the guard set to find another version of NAME for a
        function whose code the restored one does not hold, and what was restored loaded (this cell's hits)."""
        self.guard.take_miss_reasons()  # what happened outside this cell is not its to tell
        installed = report.restore.version if report.restore is not None else None
        if installed is not None:  # nothing fitted at all: no other version of NAME will
            self.guard.find_elsewhere = lambda digest: self._install_version_with(
                name, digest, installed, opts, watcher
            )
        self._refresh_loaded()

    def _record_step(
        self,
        report: CellReport,
        opts: CellOptions,
        before: CellSnapshot,
        watcher: capture.CellCapture,
        roots: dict[str, str],
        precompile: bool,
    ) -> tuple[capture.CellFiles, set[str]]:
        """After the body: the report's counts per layer, why it compiled after a restore, and the files the cell
        wrote or used (what a save bundles), with its precompile entries' keys."""
        if report.restore is not None and report.restore.restored:  # a cold cell's misses need no reason
            report.miss_reasons = self.guard.take_miss_reasons()
        precompile_keys = before.save_precompile_entries()
        empty = before.empty_functions()
        digest_files = self.guard.write_digests(precompile_keys, empty) if precompile else []
        precompile_keys |= empty
        if opts.whole_cache:
            precompile_keys |= capture.all_precompile_keys(roots)
            digest_files += capture.all_files(roots)
        cell_files = watcher.collect(precompile_keys if precompile else None, digest_files)
        delta = before.layer_counts()
        for layer_name, counts in delta.items():
            counts["written"] = cell_files.new_by_layer.get(layer_name, 0)
        report.layers = delta
        report.processes = cell_files.processes
        report.compiled_elsewhere = cell_files.compiled_elsewhere()
        misses = sum(counts.get("misses", 0) for counts in delta.values())
        if report.miss_reasons == [] and misses and report.restore is not None and report.restore.restored:
            # torch named no function (no precompile here, or a graph's files were missing): still, say so
            report.miss_reasons = [MissReason(MissCause.NEW_GRAPHS, count=misses)]
        report.stale_rejected = before.stale_rejected()
        report.precompile_fallbacks = before.precompile_fallbacks()
        for reason in self.guard.new_bypass_reasons() if precompile else ():
            self.tell(events.PrecompileBypassed(reason), report, opts.quiet)
        for function in self.guard.new_unpackaged() if precompile else ():
            self.tell(events.CompiledOutsideCell(function), report, opts.quiet)
        return cell_files, precompile_keys

    def _install_version_with(
        self, name: str, digest: str, installed: str, opts: CellOptions, watcher: capture.CellCapture
    ) -> bool:
        """Another version of NAME (local store, then the hub) whose precompile entries include one for this code
        digest, installed beside the restored one: each function of the cell takes the entry made for its code, and a
        colleague's variant of the cell, saved as a newer version, never makes the original's kernel compile.
        Whether one was installed."""
        if not opts.restore or opts.version is not None:  # a pinned version is the only one
            return False
        tried = self._alternates.setdefault(name, set())  # installed beside it already in this kernel
        roots = capture.cache_roots()

        def wanted(manifest: Manifest) -> str | None:
            functions = manifest.stats.get("functions")
            if manifest.version in tried or manifest.version == installed or not isinstance(functions, dict):
                return "not this code"
            if not any(isinstance(f, dict) and f.get("digest") == digest for f in functions.values()):
                return "not this code"
            return None

        def install(manifest: Manifest, payload: IO[bytes]) -> list[str]:
            paths = bundle.extract(payload, manifest, roots, None, lambda m: alternate_member(m, manifest.version))
            watcher.add_restored(paths)  # not this cell's work: carried into its bundle only if used
            return paths

        hub = self.hub_policy.for_cell(opts)  # None while it is being left alone after a failure
        try:
            found = self.search.newest(name, self.store(opts.store_dir), hub, wanted=wanted, install=install)
        except Exception as exc:  # the restored version stands; this function compiles as plain torch.compile would
            self.tell(events.StepFailed(events.Step.FIND_ELSEWHERE, str(exc), name))
            return False
        for problem in found.problems:  # a manifest the store could not read (the restore told the rest)
            self.tell(events.ManifestQuarantined(problem))
        if found.manifest is None:
            return False
        tried.add(found.manifest.version)
        return True

    def compiled_code(self) -> dict[str, str]:
        """{qualified name: code digest} of the functions this kernel's compiled cells looked up last."""
        return {function: self.guard.pending[key] for key, (function, _parts) in self.guard.functions.items()
                if key in self.guard.pending}  # fmt: skip

    def _wait_for_prewarm(self, restore: RestoreResult | None) -> None:
        """Never compile while the prewarm thread imports; wait for its CPU ISA probe when C++ kernels follow."""
        self.prewarm.start()  # scripts never ran %load_ext: probe here (in parallel, toolchain bundle first)
        uses_cpu_kernels = restore is not None and restore.uses_cpu_kernels
        if uses_cpu_kernels or not compiler.cuda_available():
            self.prewarm.join(probe=True)  # torch would otherwise probe again, serially, on the critical path
        else:
            self.prewarm.join(hashes=True)

    def _finish(self, report: CellReport, store_dir: str | None = None) -> None:
        report.finished = time.time()
        self.history.append(report)
        store = self.store(store_dir)
        if report.ok:
            with contextlib.suppress(OSError):
                store.save_run(report.name, report.to_json())
        try:  # statistics are worth a cell's nothing: a store that cannot take them is left as it is
            store.add_stats(report.stats_outcome())
        except Exception as exc:  # statistics must never break a cell
            if not self._stats_failed:  # told once a session
                self._stats_failed = True
                self.tell(events.StepFailed(events.Step.STATISTICS, str(exc)))

    def _set_precompile(self, enabled: bool | None) -> bool | None:
        """Switch torch's caching_precompile (and our guard with it); returns the previous value."""
        if enabled is None or not PrecompileGuard.available():
            return None
        if enabled:
            self.guard.install()
        return compiler.set_caching_precompile(enabled)

    def _save(
        self,
        name: str,
        cell_files: capture.CellFiles,
        report: CellReport,
        opts: CellOptions,
        hub: HubSource | None,
        functions: dict[str, dict[str, str]],
    ) -> None:
        store = self.store(opts.store_dir)
        stats = {"body_seconds": report.body_seconds, "layers": report.layers, "layer_bytes": cell_files.layer_bytes()}
        if functions:  # which code each precompile entry is for: another kernel finds the version that fits its code
            stats["functions"] = functions
        if opts.source_digest:  # the notebook's plan compares it with the saved cell's body
            stats["cell_digest"] = opts.source_digest
        now = fingerprint.current()
        manifest = Manifest.new(name, now, fingerprint.digest(now), writer(), stats)
        start = time.perf_counter()
        bar = self.transfer(events.Moving.SAVE, name, opts.quiet)
        try:
            manifest = store.write(manifest, cell_files.files, bar)
        except OSError as exc:
            self.tell(events.StepFailed(events.Step.SAVE, str(exc), name, store.root), report)
            return
        finally:
            bar.close()
        report.saved_version = manifest.version
        report.saved_bytes = manifest.payload_bytes
        report.saved_files = len(manifest.members)
        report.save_seconds = time.perf_counter() - start
        self._enforce_size_cap(store, report, opts.quiet)
        if hub is not None and report.restore is not None and report.restore.hub_signed_elsewhere:
            # The team's versions of NAME did not verify with our secret: a version signed with it would be refused
            # by the team in turn. Most likely our secret is not the team's.
            self.tell(events.NotPushedSignedElsewhere(name), report)
            return
        if hub is None:
            return
        if report.push_left_to is not None:  # a collaborator compiled NAME at the same time: one version goes up
            started = time.time() - report.body_seconds - report.save_seconds - 60  # 60: clocks of two machines
            report.push_left_to = self.hub_policy.push_left_to(hub, name, manifest.fingerprint_id, started)
        if report.push_left_to is None:
            self.hub_policy.push(hub, store, manifest, report, self.transfer(events.Moving.PUSH, name, opts.quiet))

    def _enforce_size_cap(self, store: LocalStore, report: CellReport, quiet: bool) -> None:
        """Evict least recently used versions past `CompileCache.max_size`."""
        cap = self.settings.max_bytes
        try:
            evicted = store.gc(cap)
        except OSError as exc:
            self.tell(events.StepFailed(events.Step.EVICT, str(exc), where=store.root), report)
            return
        if evicted:
            names = tuple(sorted({name for name, _, _ in evicted}))
            self.tell(events.Evicted(len(evicted), names, cap), report, quiet)


@dataclass
class _Watch:
    """What a cell's record stage compares the body's work against: the cache files and torch's counters as they
    were before it."""

    watcher: capture.CellCapture
    before: CellSnapshot
    roots: dict[str, str]
    precompile: bool


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns
