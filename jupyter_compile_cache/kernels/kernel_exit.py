"""A kernel that used torch.compile shuts down in time.

Inductor keeps a compile-worker sidecar process (started by every torch.compile where Triton is installed: the GPU
case). On a shutdown request, ipykernel signals its children until none is left, sleeping 0.01, 0.03, ... 3, 10 s
between rounds. The sidecar dies on the first SIGTERM but stays a zombie: torch only reaps it in its own exit
handler, which runs later. So the kernel is still "stopping" when jupyter_client terminates it 2.5 s later, on
every restart. Stopping the workers the way torch does at exit, before ipykernel looks for children, reaps them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..torch_adapter.compiler import stop_compile_workers

_MARK = "_jupyter_compile_cache_stops_compile_workers"


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
