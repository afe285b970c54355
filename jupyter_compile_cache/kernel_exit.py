"""A kernel that used torch.compile shuts down in time.

Inductor keeps a compile-worker sidecar process (started by every torch.compile where Triton is installed: the GPU
case). On a shutdown request, ipykernel signals its children until none is left, sleeping 0.01, 0.03, ... 3, 10 s
between rounds. The sidecar dies on the first SIGTERM but stays a zombie: torch only reaps it in its own exit
handler, which runs later. So the kernel is still "stopping" when jupyter_client terminates it 2.5 s later, on
every restart. Stopping the workers the way torch does at exit, before ipykernel looks for children, reaps them.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable
from typing import Any

_MARK = "_jupyter_compile_cache_stops_compile_workers"


def stop_compile_workers() -> None:
    """Shut down inductor's compile-worker pools (and reap the sidecar) if this process started any.

    torch's graceful pool shutdown waits about a second for the sidecar to stop its own workers, out of the ~2.5 s
    jupyter_client gives a kernel to exit (measured on the 2-core CI machine, torch 2.13: the kernel was then
    terminated in some runs). The kernel is going away, so the sidecar and its workers are killed first; torch's
    shutdown then reaps the sidecar at once, and the workers, orphaned, are no longer this kernel's children.
    """
    async_compile = sys.modules.get("torch._inductor.async_compile")
    shutdown = getattr(async_compile, "shutdown_compile_workers", None)
    if shutdown is None:
        return
    # torch 2.9-2.15: SubprocPool objects in `_pool_set`, each with its sidecar's Popen in `.process`
    for pool in list(getattr(async_compile, "_pool_set", ())):
        _kill_tree(getattr(getattr(pool, "process", None), "pid", None))
    with contextlib.suppress(Exception):  # torch's own exit handler tries again; a shutdown must go on
        shutdown()


def _kill_tree(pid: int | None) -> None:
    if pid is None:
        return
    try:
        import psutil  # an ipykernel dependency

        sidecar = psutil.Process(pid)
        for process in [*sidecar.children(recursive=True), sidecar]:
            with contextlib.suppress(psutil.Error):
                process.kill()
    except Exception:  # psutil missing or the sidecar already gone: torch's graceful shutdown does it all
        return


def _stopping_workers_first(do_shutdown: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapper(*args: Any) -> Any:
        stop_compile_workers()
        reply = do_shutdown(*args)
        return await reply if inspect.isawaitable(reply) else reply

    setattr(wrapper, _MARK, do_shutdown)
    return wrapper


def stop_compile_workers_on_shutdown(kernel: Any) -> None:
    """Make `kernel.do_shutdown` (an ipykernel kernel, or its class) stop the compile workers first. Idempotent."""
    do_shutdown = getattr(kernel, "do_shutdown", None)
    if do_shutdown is not None and not hasattr(do_shutdown, _MARK):
        kernel.do_shutdown = _stopping_workers_first(do_shutdown)


def undo_stop_compile_workers_on_shutdown(kernel: Any) -> None:
    """Put back an instance's `do_shutdown` (the extension's unload)."""
    if hasattr(vars(kernel).get("do_shutdown"), _MARK):
        del kernel.do_shutdown
