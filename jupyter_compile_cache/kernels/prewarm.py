"""Start torch's compiler stack while the user is still reading, not when the first compiled call waits for it.

Importing Dynamo and Inductor, hashing torch's and Triton's files and probing the CPU's vector ISAs are per-process
work that no cache can hold (measured in docs/how_it_works.md). `%load_ext` starts them in a background thread.

Two threads importing the same modules can trip over torch's circular imports, so a cell that looks like it compiles
waits for the imports (on a GPU machine, also for the hashes its Triton kernels' keys need). Any other cell (eager
code, one that starts processes, which import the compiler for themselves) starts at once; should it compile after
all, `torch.compile` waits at `first_compile_gate`, and the wait is told. A `%%compile_cache` cell with nothing to
restore that does not look like it compiles runs without the cache around it. Work no cell waits for (the hashes on
a CPU machine, the ISA probe on a GPU one, at the lowest CPU priority there) waits until the kernel has been idle for
a moment: beside a running cell it took a core and the GIL from it. On a CPU machine a compiling cell waits for the
probe, which keeps the usual priority. A kernel forked from a warm template has all of it done; a script (`cell()`
without IPython, which never idles) leaves that work to torch, which does it when a compile needs it.
`CompileCache.prewarm = False` (or JUPYTER_COMPILE_CACHE_PREWARM=0) turns this off.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..failure import Failure
from ..torch_adapter import compiler

IDLE_QUIET = 0.5  # seconds with no cell running before work no cell waits for starts
FIRST_CELL_WAIT = 0.1  # seconds the imports wait after %load_ext for the next cell (Run All's comes in milliseconds)


class Prewarm:
    def __init__(
        self,
        enabled: Callable[[], bool] = lambda: True,
        before_probe: Callable[[], None] | None = None,
        after_probe: Callable[[list[str]], None] | None = None,
        listing: Callable[[], dict[str, tuple[int, int]]] | None = None,
    ) -> None:
        """`before_probe` restores the machine's probe programs kept from an earlier kernel; `listing` lists the
        cache files (sizes and mtimes), so that `after_probe` is given those the probe wrote, to keep. All run in
        the background thread, off the cells' path."""
        self.enabled = enabled
        self.thread: threading.Thread | None = None
        self.imported = threading.Event()  # set once the compiler is imported (or failed to)
        self.hashed = threading.Event()  # torch's and Triton's files hashed, which a GPU cell's kernels need
        self.probed = threading.Event()  # the CPU's vector ISAs probed, which a cell's C++ kernels need
        self.import_seconds: float | None = None
        self.before_probe = before_probe
        self.after_probe = after_probe
        self.listing = listing
        self.created: list[str] = []  # cache files the ISA probe wrote (compiled test programs)
        self.waited = 0.0  # seconds cells waited for it, not yet reported
        self.error: Failure | None = None  # why it stopped early, until a cell tells it (`take_error`)
        self.started = 0.0
        # No cell runs (IPython's pre/post_run_cell hooks), since when: work no cell waits for goes then.
        self.follows_cells = False  # whether IPython tells it when cells run (a script's process: never)
        self.idle = threading.Event()
        self.idle.set()
        self.idle_since = 0.0
        self.stood_back = False  # a cell that does not wait for this work ran meanwhile (`stand_back`)
        self.cell_seen = threading.Event()  # a cell started since %load_ext
        self.needed: set[int] = set()  # id() of each event a cell has waited for: that work waits for no idle moment

    def start(self) -> None:
        if self.thread is not None or not self.enabled():
            return
        self.thread = threading.Thread(target=self.run_here, name="jupyter_compile_cache-prewarm", daemon=True)
        self.started = time.perf_counter()
        self.thread.start()

    def loading(self) -> float | None:
        """Seconds the compiler import has run so far while it still runs in the background, else None."""
        if self.thread is None or self.imported.is_set():
            return None
        return time.perf_counter() - self.started

    def run_here(self, gpu: bool | None = None, idle_work: bool | None = None) -> None:
        """The work, in the calling thread (the background thread's body; a warm template calls it directly). After the
        imports, what cells here need first goes first: on a GPU machine the file hashes every Triton kernel's key needs
        (a cell would otherwise compute them again beside this thread), on a CPU-only one the ISA probe. `gpu` says
        which without asking CUDA (that starts NVML's thread in a template). The rest waits for an idle moment where
        cells are followed (`idle_work`)."""
        start = time.perf_counter()
        gate = None
        try:
            try:
                if self.thread is threading.current_thread():
                    self._hold_back()
                    gate = compiler.first_compile_gate(self._wait_at_compile)  # a cell's compile waits for the rest
                compiler.import_compiler()
            finally:
                self.import_seconds = time.perf_counter() - start
                self.imported.set()
                if gate is not None:
                    gate.undo()
            gpu = compiler.cuda_available() if gpu is None else gpu
            if gpu:  # a GPU cell waits for the hashes only: the probe goes once the kernel is idle, set aside
                first, later, last = self._hash, lambda: self._probe(aside=True), self.probed
            else:  # a compiling CPU cell waits for the probe: it goes first, at the usual priority
                first, later, last = self._probe, self._hash, self.hashed
            first_done = self.probed if last is self.hashed else self.hashed
            if self.stood_back and (self.follows_cells if idle_work is None else idle_work):
                # the cell that stood it back, and its processes, go first
                self._wait_for_idle(until=lambda: id(first_done) in self.needed)
            first()
            if self.follows_cells if idle_work is None else idle_work:
                self._wait_for_idle(until=lambda: id(last) in self.needed)
                later()
        except Exception as exc:  # prewarming is an optimisation: a failure only costs time later, told once
            self.error = Failure.of(exc)
        finally:
            self.hashed.set()
            self.probed.set()

    def _hold_back(self) -> None:
        """Before the imports: should the cell after %load_ext start processes and compile nothing here
        (`!torchrun`), they wait until no cell runs, leaving its processes the CPU; a cell that needs them ends the
        wait (`wanted`), and a compile meanwhile imports the compiler itself, never beside this thread."""
        if not self.follows_cells:
            return
        self.cell_seen.wait(FIRST_CELL_WAIT)
        if self.stood_back:
            self._wait_for_idle(until=lambda: bool(self.needed))

    def stand_back(self) -> None:
        """A cell that does not wait for this work runs (processes it starts, eager code): the rest of it goes at
        the lowest CPU priority, so that the cell and its processes go first, and what follows the imports waits for
        a moment when no cell runs. For good: Linux lets a thread lower its own priority, not raise it again."""
        thread = self.thread
        if self.stood_back or thread is None or not thread.is_alive() or thread.native_id is None:
            return
        self.stood_back = True
        try:
            os.setpriority(os.PRIO_PROCESS, thread.native_id, 19)  # Linux: this thread's own priority
        except (AttributeError, OSError):  # not Linux, or not allowed: it shares the CPU as before
            pass

    def _wait_at_compile(self) -> None:
        """A compile in another thread (a cell's) while the imports run: it waits for them, and says so."""
        if threading.current_thread() is not self.thread:
            self.join()

    def _hash(self) -> None:
        compiler.hash_torch_and_triton()
        self.hashed.set()

    def _wait_for_idle(self, quiet: float = IDLE_QUIET, until: Callable[[], bool] | None = None) -> None:
        """Until no cell has run for `quiet` seconds (in Run All, the next cell starts within milliseconds), or
        `until()` says a cell waits for what follows."""
        while until is None or not until():
            if not self.idle.wait(None if until is None else 0.05):
                continue
            left = self.idle_since + quiet - time.perf_counter()
            if left <= 0 and self.idle.is_set():
                return
            time.sleep(max(left, 0.05) if until is None else 0.05)

    def _probe(self, aside: bool = False) -> None:
        if compiler.can_probe_cpu():
            if self.before_probe is not None:
                self.before_probe()
            before = self.listing() if self.listing else {}
            compiler.probe_cpu(aside)
            after = self.listing() if self.listing else {}
            self.created = compiler.probe_files(sorted(p for p, meta in after.items() if before.get(p) != meta))
            if self.after_probe is not None:
                self.after_probe(self.created)
        self.probed.set()

    def take_error(self) -> Failure | None:
        """Why the work stopped early, once (the next cell tells it), or None."""
        error, self.error = self.error, None
        return error

    def join(self, hashes: bool = False, probe: bool = False) -> None:
        """Wait for the imports, and with `hashes` for the file hashes, with `probe` for the CPU ISA probe too."""
        events = [self.imported] + [self.hashed] * hashes + [self.probed] * probe
        self.needed.update(id(event) for event in events)  # a running cell waits: no idle moment comes meanwhile
        if self.thread is not None and not all(e.is_set() for e in events):
            start = time.perf_counter()
            for event in events:
                event.wait()
            self.waited += time.perf_counter() - start

    def take_waited(self) -> float:
        """Seconds cells have waited for this work since the last call (a cell reports it, then it is reset)."""
        waited, self.waited = self.waited, 0.0
        return waited

    def after_cell(self, result: Any = None) -> None:
        """IPython post_run_cell hook: the kernel is idle from now."""
        self.idle_since = time.perf_counter()
        self.idle.set()

    def follow_cells(self) -> None:
        """IPython's cell hooks are registered: work no cell waits for can wait for a moment when none runs."""
        self.follows_cells = True

    def before_cell(self, info: Any) -> None:
        """IPython pre_run_cell hook: wait only for cells that may compile."""
        self.follows_cells = True
        self.idle.clear()
        self.waited = 0.0  # what a cell reports is its own wait, not an earlier plain cell's
        if self.thread is None or not self.thread.is_alive():
            return
        source = getattr(info, "raw_cell", "") or ""
        magic = source.lstrip().startswith("%%compile_cache")
        body = source.lstrip().partition("\n")[2] if magic else source
        if not self.imported.is_set() and compiler.starts_processes(body) and not compiler.compiles_here(body):
            self.stand_back()  # its processes go first
        self.cell_seen.set()
        if compiler.compiles_here(source) and not magic:
            self.join()  # a %%compile_cache cell waits in the session, only if its body compiles here
