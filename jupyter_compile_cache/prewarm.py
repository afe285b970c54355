"""Start torch's compiler stack while the user is still reading, not when the first compiled call waits for it.

Measured in a kernel on CPU (torch 2.13) after a restore that hits every cache: of a 2.4 s first call, 1.6 s is
importing torch._dynamo and torch._inductor and 1.2 s is `pick_vec_isa()` probing the CPU's vector ISAs in
subprocesses; on the GPU host (torch 2.11), loading a restored graph also imports torch.utils.cpp_extension
(~1 s) and hashes torch's and Triton's files (~0.8 s). All are per-process work that no cache can hold.
`%load_ext` starts them in a background thread.

Importing the same modules from two threads at once can trip over torch's circular imports, so any cell that
looks like it compiles (and every `%%compile_cache` cell) first waits for the imports to finish. The ISA probe
goes on in the background: a GPU model never needs it, and a CPU compile that asks first simply computes it.
`CompileCache.prewarm = False` (or JUPYTER_COMPILE_CACHE_PREWARM=0) turns this off.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

# Cells matching this wait for the prewarm thread before they run.
COMPILE_HINT = re.compile(r"torch\.compile|_dynamo|_inductor|torch\.compiler|compile_cache|torch\.export")


class Prewarm:
    def __init__(self, enabled: Callable[[], bool] = lambda: True) -> None:
        self.enabled = enabled
        self.thread: threading.Thread | None = None
        self.imported = threading.Event()  # set once the compiler modules are imported (or failed to)
        self.import_seconds: float | None = None
        # Set by the session: restores the per-machine toolchain bundle, lists the cache files, saves what the probe
        # built (off the cells' path: writing the bundle was 41 of a GPU kernel's first cell's 47 ms).
        self.before_probe: Callable[[], None] | None = None
        self.after_probe: Callable[[], None] | None = None
        self.listing: Callable[[], dict[str, tuple[int, int]]] | None = None
        self.created: list[str] = []  # cache files the ISA probe wrote (compiled test programs)
        self.waited = 0.0  # seconds cells waited for it, not yet reported
        self.error: str | None = None  # why it stopped early, until a cell tells it (`take_error`)

    def start(self) -> None:
        if self.thread is not None or not self.enabled():
            return
        self.thread = threading.Thread(target=self.run_here, name="jupyter_compile_cache-prewarm", daemon=True)
        self.thread.start()

    def run_here(self) -> None:
        """The work, in the calling thread (the background thread's body; a spare kernel calls it directly)."""
        start = time.perf_counter()
        try:
            try:
                import torch._dynamo  # noqa: F401
                import torch._inductor.compile_fx  # noqa: F401

                # Imported by inductor's C++ builder when a compiled graph is loaded (setuptools, Cython: ~1 s on
                # the GPU host, in the first restored call).
                import torch.utils.cpp_extension  # noqa: F401
            finally:
                self.import_seconds = time.perf_counter() - start
                self.imported.set()
            _hash_torch_and_triton()
            try:
                from torch._inductor.cpu_vec_isa import pick_vec_isa
            except ImportError:
                pick_vec_isa = None
            if pick_vec_isa is not None:
                if self.before_probe is not None:
                    self.before_probe()
                before = self.listing() if self.listing else {}
                _probe_isas_in_parallel()
                pick_vec_isa()  # cached by torch for the process
                after = self.listing() if self.listing else {}
                self.created = sorted(p for p, meta in after.items() if before.get(p) != meta)
                if self.after_probe is not None:
                    self.after_probe()
        except Exception as exc:  # prewarming is an optimisation: a failure only costs time later, told once
            self.error = f"{type(exc).__name__}: {exc}"

    def take_error(self) -> str | None:
        """Why the work stopped early, once (the next cell tells it), or None."""
        error, self.error = self.error, None
        return error

    def join(self) -> None:
        """Wait for the imports only: the CPU ISA probe runs on (torch computes it itself if asked first)."""
        if self.thread is not None and not self.imported.is_set():
            start = time.perf_counter()
            self.imported.wait()
            self.waited += time.perf_counter() - start

    def wait_all(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            start = time.perf_counter()
            self.thread.join()
            self.waited += time.perf_counter() - start

    def take_waited(self) -> float:
        """Seconds cells have waited for this work since the last call (a cell reports it, then it is reset)."""
        waited, self.waited = self.waited, 0.0
        return waited

    def before_cell(self, info: Any) -> None:
        """IPython pre_run_cell hook: wait only for cells that may compile."""
        self.waited = 0.0  # what a cell reports is its own wait, not an earlier plain cell's
        if self.thread is None or not self.thread.is_alive():
            return
        source = getattr(info, "raw_cell", "") or ""
        if COMPILE_HINT.search(source):
            self.join()


def _hash_torch_and_triton() -> None:
    """Hashes of torch's and Triton's installed files (~0.2 s and ~0.6 s on the GPU host), which inductor takes
    once per process for its cache keys, the first time it loads or compiles a graph. Files only: CUDA is not
    touched."""
    try:
        from torch._inductor.codecache import torch_key

        torch_key()
    except Exception:  # a torch without it: inductor computes what it needs itself
        pass
    try:
        from torch._inductor.runtime.triton_compat import triton_key

        triton_key()
    except Exception:  # no triton here (torch's stand-in raises): the CPU probe goes on
        pass


def _probe_isas_in_parallel() -> None:
    """torch probes each vector ISA in turn, each in a child process (~0.1 s apiece); probe them side by side.

    Each `bool(isa)` fills torch's own per-ISA cache, so the `pick_vec_isa()` that follows finds every answer.
    Only ISAs the CPU advertises are probed, as torch itself does.
    """
    from concurrent.futures import ThreadPoolExecutor

    from torch._inductor import cpu_vec_isa

    checker = getattr(cpu_vec_isa, "x86_isa_checker", None)
    isas = list(getattr(cpu_vec_isa, "supported_vec_isa_list", []))
    if checker is None or not isas:
        return
    flags = checker()
    candidates = [isa for isa in isas if all(flag in flags for flag in str(isa).split())]
    if len(candidates) > 1:
        with ThreadPoolExecutor(max_workers=len(candidates)) as pool:
            list(pool.map(bool, candidates))
