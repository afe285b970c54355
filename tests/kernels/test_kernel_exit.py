"""kernel_exit.py: a kernel's shutdown stops inductor's compile workers first, so it is not still waiting for a
zombie sidecar when jupyter_client terminates it; the timing in a real kernel is tests/kernels/test_warm_kernel.py's."""

from __future__ import annotations

import asyncio

import psutil

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
