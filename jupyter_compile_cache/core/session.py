"""The cell flow behind `%%compile_cache`: restore before a cell, watch it, save after it.

One `CompileCacheSession` lives in each kernel (`get_session`). `cell` runs a cell's stages in order, each in its
module, around one record, the `Cell` (its `CellOptions`, its `CellPlan`, the report it fills in): restore and lease
(restore_stage.py: the one bundle search, local store then hub; if nothing fits, the hub's single flight), compiler
ready, run (run_stage.py: the body watched, torch's counters snapshotted), record (record_stage.py) and save
(save_stage.py: the local store, then the push). The plan decides which stages run: a cell that compiles nothing
while the compiler loads, with nothing to restore, runs at once; one that does not compile here runs them without
waiting for the compiler; one whose processes compile (`!torchrun`; the CLI's `run`) restores beside their start.
What a stage switches on (precompile, NAME's lease, the processes' hook) is undone on one `ExitStack`. Nothing here
raises into the cell but the user's own exception: store and hub failures become warnings. The commands besides
cells are commands.py.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..failure import Failure
from ..kernels import header_calls
from ..kernels.prewarm import Prewarm
from ..storage.bundle import check_name
from ..storage.sources import HubSource, Progress
from ..torch_adapter import capture, compiler, cpp_headers, kernel_load_fixes, process_hook
from ..torch_adapter.precompile import PrecompileGuard
from . import events, record_stage, run_stage
from .events import Reporter
from .notebook import NotebookStage
from .options import CellOptions
from .records import CellReport, RestoreResult
from .restore_stage import CellRestore, RestoreStage
from .save_stage import SaveStage
from .settings import CompileCache
from .store_session import StoreSession
from .toolchain import Toolchain

current: CompileCacheSession | None = None  # the kernel's one session


@dataclass(frozen=True)
class CellPlan:
    """How a cell runs, decided before its stages."""

    loading: bool  # compiles nothing while torch's compiler loads: the body runs at once, without the stages
    deferred: bool  # does not compile here (eager code, processes): restored and watched, the compiler not awaited
    here: bool  # compiles here: the compiler readied before the body
    precompile: bool  # torch's caching_precompile on for the body
    hub: HubSource | None  # once per cell: restore, lease and push use it
    beside: bool  # the local restore runs beside the body's start (processes that compile)
    processes: bool  # its processes compile (the CLI's run: its command's; a magic's `!torchrun`)
    frames: int  # Dynamo's frames compiled before the body (loading or deferred: what compiled out of sight)


@dataclass(frozen=True)
class Cell:
    """One cell as its stages see it: what it was asked, how it runs, and its report, filled in as it runs."""

    opts: CellOptions
    plan: CellPlan
    report: CellReport

    @property
    def name(self) -> str:
        return self.report.name


def get_session(reporter: Reporter | None = None) -> CompileCacheSession:
    """The kernel's one session (created on first use, telling REPORTER what happens)."""
    global current
    if current is None:
        current = CompileCacheSession(reporter=reporter)
    return current


class CompileCacheSession(StoreSession):
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
        self.toolchain = Toolchain(lambda: self.settings.store_dir, self.hub_policy, self.search, self.tell)
        self.prewarm = Prewarm(
            enabled=lambda: self.settings.prewarm,
            before_probe=self.toolchain.restore,
            after_probe=self.toolchain.save,
            listing=lambda: capture.listing(capture.cache_roots()),
        )
        self.notebook = NotebookStage(self)  # the kernel's notebook, its bundles fetched ahead (%load_ext starts it)
        self.restore_stage = RestoreStage(self, self.guard, self.notebook)
        self.save_stage = SaveStage(self)
        self._cache_load_patches: list[Any] | None = None  # kernel_load_fixes, from the first cell to close()
        self._header_calls: list[cpp_headers.HeaderCall] = []  # made since the last cell's end, not yet kept

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
        result = self.restore_stage.restore(check_name(name), opts, None, self.hub_policy.for_cell(opts), progress)
        self.restore_stage.refresh_loaded()
        return result

    # -- the cell -----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def cell(self, name: str, options: CellOptions | None = None) -> Iterator[CellReport]:
        """Restore NAME, run the block, save what it compiled. Used by the magic and usable from scripts: the stages
        of the module docstring, in order. A failure of ours before the body lets it run as plain torch.compile
        would; one after it leaves the cell's result standing: either is told, never raised."""
        cell = self._new_cell(name, options or CellOptions())
        with contextlib.ExitStack() as ending:
            undo = ending.enter_context(contextlib.ExitStack())  # torch's switch, the lease: at the end, or at once
            stand_aside = functools.partial(self._stand_aside, cell, undo)
            restored = self._ready(cell, undo, stand_aside)
            ending.callback(self._end, cell)
            refresh = self.restore_stage.refresh_loaded
            with (
                run_stage.run(cell.report, restored, self.guard, cell.plan.precompile, refresh, stand_aside) as watched,
                contextlib.ExitStack() as body,
            ):
                if cell.plan.beside and watched is not None:  # after the watch's listing: restored files, not compiled
                    pending = self._restore_beside(cell)
                    body.callback(lambda: watched.watcher.add_restored(pending.result()))
                carried = self._carry_hook(cell, ending, body)
                yield cell.report
            self._record(cell, watched, carried)

    def _new_cell(self, name: str, opts: CellOptions) -> Cell:
        """NAME checked, its cell's plan made, and its report begun."""
        name = check_name(name)
        hub = self.hub_policy.for_cell(opts)  # once per cell: restore, lease and push use it
        loading = (
            hub is None
            and self._compiles_nothing(opts)
            and not (opts.restore and name in self.store(opts.store_dir).names())
        )
        deferred = not loading and self._compiles_elsewhere(opts)
        here = opts.compiles_here and not (loading or deferred)
        precompile = self.precompile_default if opts.precompile is None else opts.precompile
        # processes that compile start (Python, torch) while the restore runs, unless a hub's single flight must
        # decide before the body who compiles: only a local restore goes beside it
        beside = (opts.restore_beside_body and not here) or self._starts_processes_only(opts)
        plan = CellPlan(
            loading=loading,
            deferred=deferred,
            here=here,
            precompile=precompile and here and PrecompileGuard.available(),
            hub=hub,
            beside=beside and opts.restore and hub is None and not loading,
            processes=not opts.compiles_here or self._starts_processes(opts),
            frames=compiler.frames_compiled() if loading or deferred else 0,
        )
        return Cell(opts, plan, CellReport(name, source_digest=opts.source_digest))

    def _ready(
        self, cell: Cell, undo: contextlib.ExitStack, stand_aside: Callable[[Exception], None]
    ) -> CellRestore | None:
        """The stages before the body: the compiler readied (where it compiles here), NAME restored and leased, the
        processes' toolchain. None where the body runs without them (ours failed: told, and undone)."""
        opts, plan, report = cell.opts, cell.plan, cell.report
        try:
            if plan.here:
                self.prewarm.join()  # before touching torch's compiler: importing it from two threads deadlocks
                if self._cache_load_patches is None:
                    self._cache_load_patches = kernel_load_fixes.cache_load_patches(self._load_fix_failed)
                    recording = cpp_headers.recording(self._header_calls.append)
                    self._cache_load_patches += [recording] if recording is not None else []
                # torch's switch is left alone where nothing compiles (and Dynamo is not imported for it)
                undo.callback(self._set_precompile, self._set_precompile(plan.precompile))
            if plan.deferred:
                self.prewarm.stand_back()  # the body and its processes go first
            if plan.loading:
                return None
            if opts.restore:  # after the kernel's own fetch of NAME, if one is running
                report.staged_wait_seconds = self.notebook.wait_for(cell.name)
            restore = self.restore_stage.restore_for_cell
            restored = CellRestore() if plan.beside else restore(cell.name, opts, report, plan.hub)
            if restored.lease is not None:
                undo.callback(restored.lease.release)
            self._compiler_stage(plan.here, plan.processes, report, plan.hub, opts.torch_remote)
            return restored
        except Exception as exc:
            stand_aside(exc)
            return None

    def _stand_aside(self, cell: Cell, undo: contextlib.ExitStack, exc: Exception) -> None:
        """Ours failed before the body: it runs without the cache around it, torch's switch as it was."""
        self.tell(events.StoodAside(cell.name, True, Failure.of(exc)), cell.report)
        undo.close()

    def _carry_hook(
        self, cell: Cell, ending: contextlib.ExitStack, body: contextlib.ExitStack
    ) -> process_hook.Carried | None:
        """The processes the body starts count their hits and misses as the cell's (where its processes compile), and
        with `--precompile-processes` load and save precompile entries too."""
        opts = cell.opts
        if not (opts.precompile_processes or cell.plan.processes):
            return None
        try:
            carried = process_hook.Carried(opts.precompile_processes)
            carried.start()
        except Exception as exc:  # the processes compile as without it
            self.tell(events.StepFailed(events.Step.PROCESS_HOOK, Failure.of(exc), cell.name), cell.report)
            return None
        ending.callback(carried.discard)  # a body that raised: its processes' records are not read
        body.callback(carried.stop)
        return carried

    def _record(self, cell: Cell, watched: run_stage.Watch | None, carried: process_hook.Carried | None) -> None:
        """After a body that returned: what its processes and it compiled and used, recorded and saved."""
        opts, report = cell.opts, cell.report
        if carried is not None:  # before the record: the processes' entries are on disk by now
            report.processes_share = carried.collect()
            report.stale_rejected += report.processes_share.stale
            for reason in report.processes_share.bypassed:
                self.tell(events.PrecompileBypassed(reason, in_processes=True), report, opts.quiet)
            for trouble in report.processes_share.troubles:
                self.tell(events.PrecompileFailed(trouble), report)
        if watched is None:
            return
        try:
            recorded = record_stage.record(report, opts, watched, self.guard, self.tell)
            if recorded.files.processes and recorded.files.probe_programs:  # kept for the next processes
                self.toolchain.save(recorded.files.probe_programs)
            self.save_stage.keep(cell.name, recorded, report, opts, cell.plan.hub)
        except Exception as exc:  # ours failed after the body: its result stands
            self.tell(events.StoodAside(cell.name, False, Failure.of(exc)), report)

    def _end(self, cell: Cell) -> None:
        """Every cell whose body ran, whichever way it went: what compiled out of its sight, its wait, its line."""
        plan, report = cell.plan, cell.report
        if (plan.loading or plan.deferred) and compiler.frames_compiled() > plan.frames:
            self.tell(events.CompiledWhileLoading(cell.name, watched=plan.deferred), report)
        if plan.deferred:  # a compile in its body waited for the compiler's import (first_compile_gate): told now
            report.waited_seconds += self.prewarm.take_waited()
        self._keep_header_calls(report)
        self.save_stage.end(report, cell.opts)

    def _keep_header_calls(self, report: CellReport) -> None:
        """torch's header checks first made in this cell, for the warm templates (kernels/header_calls.py)."""
        calls = self._header_calls.copy()
        self._header_calls.clear()
        try:
            header_calls.keep(calls)
        except Exception as exc:  # a speed-up for kernels to come: they make the checks themselves
            self.tell(events.StepFailed(events.Step.HEADER_CALLS, Failure.of(exc)), report)

    def _restore_beside(self, cell: Cell) -> Future[list[str]]:
        """NAME's restore from the local store on a thread of its own while the body starts; its future gives the
        files it installed (none if it failed, which is told: the processes compile as without us)."""

        def restore() -> list[str]:
            try:
                return self.restore_stage.restore_for_cell(cell.name, cell.opts, cell.report, None).files
            except Exception as exc:
                self.tell(events.StepFailed(events.Step.RESTORE_BESIDE, Failure.of(exc), cell.name), cell.report)
                return []

        future: Future[list[str]] = Future()

        def run() -> None:
            files: list[str] = []
            try:
                files = restore()
            finally:  # whatever ends the thread, the cell's end that waits for it is not left waiting
                future.set_result(files)

        threading.Thread(target=run, name="jcc-restore", daemon=True).start()
        return future

    def _compiler_stage(
        self, here: bool, processes: bool, report: CellReport, hub: HubSource | None, torch_remote: bool
    ) -> None:
        """torch's compiler ready for a body that compiles `here`, and for the `processes` it starts: the prewarm's
        work it needs done, and torch's own remote caches pointed at the hub where asked."""
        if here:
            self._wait_for_prewarm(report.restore)
        if processes:  # they probe the CPU each: give them this machine's probe programs, if kept
            try:
                self.toolchain.restore()
            except Exception as exc:  # a speed-up only: the processes probe for themselves
                self.tell(events.StepFailed(events.Step.PROBE_RESTORE, Failure.of(exc)), report)
        report.waited_seconds = self.prewarm.take_waited()  # this cell's wait, IPython's pre-run hook's part included
        prewarm_error = self.prewarm.take_error()
        if prewarm_error is not None:
            self.tell(events.StepFailed(events.Step.PREWARM, prewarm_error), report)
        if torch_remote and hub is not None:
            self.hub_policy.point_torch_at(hub, report)

    def _compiles_nothing(self, opts: CellOptions) -> bool:
        """A magic's cell while torch's compiler is still loading, whose body does not look like it compiles (the
        caller checks that no hub is in play and the local store has no NAME): it runs at once, without a snapshot or
        a save (what does not compile has nothing to save). Should it compile after all, that is said; plain
        torch.compile ran it."""
        return opts.body is not None and not compiler.may_compile(opts.body) and self.prewarm.loading() is not None

    def _compiles_elsewhere(self, opts: CellOptions) -> bool:
        """A magic's cell while torch's compiler is still loading, whose body does not look like it compiles in this
        process (eager code, data loading, processes it starts): it starts at once, restored and watched. Should it
        compile here after all, `torch.compile` waits for the import first (kernels/prewarm.py), and that is said."""
        if opts.body is None or compiler.compiles_here(opts.body) or not opts.compiles_here or opts.torch_remote:
            return False  # (torch's remote caches are switched in its compiler's config)
        return self.prewarm.loading() is not None

    @staticmethod
    def _starts_processes(opts: CellOptions) -> bool:
        """A magic's cell whose body starts processes (`!torchrun`)."""
        return opts.body is not None and compiler.starts_processes(opts.body)

    @classmethod
    def _starts_processes_only(cls, opts: CellOptions) -> bool:
        """A magic's cell whose body starts processes and does not look like it compiles here."""
        return cls._starts_processes(opts) and not compiler.compiles_here(opts.body or "")

    def compiled_code(self) -> dict[str, str]:
        """{qualified name: code digest} of the functions this kernel's compiled cells looked up last."""
        return self.guard.code_digests()

    def _wait_for_prewarm(self, restore: RestoreResult | None) -> None:
        """Never compile while the prewarm thread imports; wait for its CPU ISA probe when C++ kernels follow."""
        self.prewarm.start()  # scripts never ran %load_ext: probe here (in parallel, toolchain bundle first)
        uses_cpu_kernels = restore is not None and restore.uses_cpu_kernels
        if uses_cpu_kernels or not compiler.cuda_available():
            self.prewarm.join(probe=True)  # torch would otherwise probe again, serially, on the critical path
        else:
            self.prewarm.join(hashes=True)

    def _set_precompile(self, enabled: bool | None) -> bool | None:
        """Switch torch's caching_precompile (and our guard with it); returns the previous value."""
        if enabled is None or not PrecompileGuard.available():
            return None
        if enabled:
            self.guard.install()
        return compiler.set_caching_precompile(enabled)
