"""A spare kernel process: torch's compiler stack imported ahead of time, waiting to become the next kernel.

Started by `warm_kernel.WarmSpareProvisioner` with the kernel's own Python, environment and working directory:
`python -m jupyter_compile_cache.spare READY_FD DONE_FD [--cold]`. Unless `--cold` (the first kernel, which has
no spare to take over), it imports torch, torch._dynamo, torch._inductor and the kernel's own modules, hashes
torch's files and probes the CPU's vector ISAs: per-process work that costs seconds and that no bundle carries. It
never touches CUDA. What it imported is frozen out of the garbage collector (it lives as long as the kernel), so the
kernel's full collections, IPython's at shutdown among them, skip it. Then it writes "ready" to READY_FD and blocks
on stdin.

One JSON line on stdin, {"module": "ipykernel_launcher", "args": [...]}, makes it the kernel: it forgets its own
modules and runs `python -m ipykernel_launcher ARGS` here, as a fresh kernel would. End of input (the provisioner,
or the server holding it, went away) makes it exit: a spare never outlives its kernel.

When the kernel shuts down, its exit handlers run as usual (the user's, IPython's history, ipykernel closing its
sockets); then "done" goes to DONE_FD and the interpreter finalizes as usual. That finalization (a second or more
after torch.compile) is the only part the restarted kernel need not wait for: the provisioner starts the next
kernel meanwhile, and the finalization runs at the lowest CPU priority. A kernel that used CUDA first releases what
its caching allocator holds. Any kernel run by a spare stops inductor's compile workers before ipykernel looks for
children to terminate (see kernel_exit).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import runpy
import sys

from .kernel_exit import stop_compile_workers_on_shutdown

KERNEL_MODULES = ("ipykernel_launcher", "ipykernel")


# What a starting ipykernel imports beyond ipykernel.kernelapp (its debugger, history database, completer).
KERNEL_IMPORTS = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "IPython.core.debugger",
    "IPython.core.completerlib",
    "IPython.extensions.storemagic",
    "sqlite3",
    "tornado.platform.asyncio",
    "tornado.queues",
)


def warm_up() -> None:
    """Everything a kernel's start and its first compiled cell would otherwise import or compute, without CUDA."""
    import importlib

    for module in KERNEL_IMPORTS:
        importlib.import_module(module)

    from .prewarm import Prewarm

    Prewarm().run_here()
    # What is imported now lives as long as the kernel: keep it out of every later full collection. IPython runs
    # one at shutdown (0.2 s with torch imported, on the restart's path), and a user's gc.collect() gets cheaper too.
    gc.freeze()


def main(argv: list[str]) -> int:
    ready_fd, done_fd = int(argv[1]), int(argv[2])
    if "--cold" not in argv:
        try:
            warm_up()
        except Exception as exc:  # a spare that cannot warm up is useless: the provisioner starts kernels plainly
            print(f"jupyter_compile_cache spare: warm-up failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    try:
        os.write(ready_fd, b"ready\n")
        os.close(ready_fd)
    except OSError:  # the provisioner already let go of us
        return 0
    line = sys.stdin.readline()
    if not line:
        return 0  # the provisioner let go of us (kernel shut down, server gone)
    try:
        request = json.loads(line)
        module, args = request["module"], [str(a) for a in request["args"]]
    except (ValueError, KeyError, TypeError):
        return 2
    if module not in KERNEL_MODULES:
        return 2
    _become_kernel(module, args)
    _finish(done_fd)
    return 0


def _become_kernel(module: str, args: list[str]) -> None:
    """Run `python -m module args` here. Our own modules go first, so the kernel starts without them, as a fresh
    one would (the user's `%load_ext jupyter_compile_cache` imports them again)."""
    for name in [n for n in sys.modules if n == __package__ or n.startswith(f"{__package__}.")]:
        del sys.modules[name]
    sys.stdin.close()  # a kernel started by jupyter_client has its stdin closed too
    sys.stdin = open(os.devnull)  # noqa: SIM115  (the kernel replaces it with its own stream)
    sys.argv = [module, *args]
    from ipykernel.ipkernel import IPythonKernel

    stop_compile_workers_on_shutdown(IPythonKernel)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _finish(done_fd: int) -> None:
    """The kernel returned: run the exit handlers now (they would run at exit anyway; among them IPython clears the
    user's namespace, collects garbage and ipykernel closes its sockets), release CUDA memory, then say "done". The
    finalization left runs at the lowest priority: the next kernel, starting meanwhile, goes first."""
    atexit._run_exitfuncs()
    torch = sys.modules.get("torch")
    with contextlib.suppress(Exception):
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        os.write(done_fd, b"done\n")
        os.close(done_fd)
    with contextlib.suppress(OSError):
        os.nice(19)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
