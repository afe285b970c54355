"""kernel_exit.py: a kernel's shutdown stops inductor's compile workers first, so it is not still waiting for a
zombie sidecar when jupyter_client terminates it: the wrapper, then a real kernel against a plain one."""

from __future__ import annotations

import asyncio
import signal

import psutil
from helpers.kernels import Kernel

from jupyter_compile_cache.kernels.kernel_exit import (
    stop_compile_workers_on_shutdown,
    undo_stop_compile_workers_on_shutdown,
)


class _Kernel:
    """Stands for ipykernel's kernel: only its `do_shutdown` is wrapped (sync in old ipykernels, async in new)."""

    def __init__(self, asynchronous: bool) -> None:
        self.calls: list[bool] = []
        self.asynchronous = asynchronous

    def do_shutdown(self, restart: bool):  # noqa: ANN201
        self.calls.append(restart)
        if not self.asynchronous:
            return {"status": "ok", "restart": restart}

        async def reply() -> dict:
            return {"status": "ok", "restart": restart}

        return reply()


def test_shutdown_stops_a_real_compile_worker_pool_first_and_keeps_the_reply():
    from torch._inductor import async_compile

    pool = async_compile.AsyncCompile.process_pool()  # the sidecar torch starts for compile workers
    sidecar = pool.process.pid
    for asynchronous in (False, True):
        kernel = _Kernel(asynchronous)
        stop_compile_workers_on_shutdown(kernel)
        stop_compile_workers_on_shutdown(kernel)  # idempotent: wrapped once
        reply = asyncio.run(kernel.do_shutdown(False))
        assert reply == {"status": "ok", "restart": False} and kernel.calls == [False]
        undo_stop_compile_workers_on_shutdown(kernel)
        assert kernel.do_shutdown.__func__ is _Kernel.do_shutdown  # the class's own method again
    assert not psutil.pid_exists(sidecar)  # killed and reaped, not a zombie


# What torch.compile does where Triton is installed (the GPU case): start inductor's compile-worker sidecar and its
# workers. Kernels that run it need TORCHINDUCTOR_COMPILE_THREADS > 1 (this 2-core machine would use one).
START_COMPILE_WORKERS = (
    "import torch\n"
    "from torch._inductor.async_compile import AsyncCompile\n"
    "AsyncCompile.warm_pool(); AsyncCompile.wakeup(); AsyncCompile.wait_pool_ready()\n"
    "assert __import__('psutil').Process().children()  # the sidecar"
)


def test_a_kernel_with_compile_workers_shuts_down_on_its_own(tmp_path):
    """ipykernel signals its children at shutdown until none is left; inductor's sidecar stays a zombie until torch's
    exit handler reaps it, so a plain kernel is still stopping when jupyter_client terminates it (the control).
    With the extension loaded, the workers are stopped first and the kernel exits by itself.

    jupyter_client sends SIGTERM at half its `shutdown_wait_time` (2.5 s by default): a loaded machine's interpreter
    teardown once took longer, and the kernel that would have exited by itself was terminated. The deadline here is 8 s:
    far above a teardown, far below the 14.4 s ipykernel spends signalling the zombie before it gives up."""
    codes = {}
    for extension in (False, True):
        k = Kernel({"TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
        try:
            if extension:
                k.run("%load_ext jupyter_compile_cache").check()
            k.run(START_COMPILE_WORKERS).check()
            kernel = k.km.provisioner.process
        finally:
            k.km.shutdown_wait_time = 16.0
            k.shutdown(now=False)
        codes[extension] = kernel.wait(10)
    assert codes == {False: -signal.SIGTERM, True: 0}
