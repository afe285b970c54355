"""The kernel's side of a launch: a child forked from a warm template (template.py), or a cold process the launcher
starts when no template fits (`python -m jupyter_compile_cache.kernels.kernel_process FD`, its end of a socket pair).

Both receive one `KernelRequest` (protocol.py) with the launcher's standard streams, and become what a fresh `python -m
ipykernel_launcher ARGS` started there would be: the launch's environment, working directory, umask and niceness,
Python's, NumPy's and torch's random states as a fresh process has them. They answer with their pid, run the kernel,
and send "exit CODE" once its exit handlers ran, so the launcher ends at once and the interpreter's finalization goes
on at the lowest priority, off the next kernel's path. If the connection closes first (the front end killed the
launcher), the kernel's process group is killed with it.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..torch_adapter.compiler import defer_library_finalizers
from .protocol import KERNEL_MODULE, KernelRequest, answer, exit_line, receive_request


def become_kernel(
    conn: socket.socket,
    request: KernelRequest,
    stdio: list[int],
    forked_from: str | None = None,
    kernel_sets: dict[str, str] | None = None,
) -> int:
    """Be the launcher's kernel in this process; returns the kernel's exit code (the caller returns it from main,
    so that the interpreter finalizes as a kernel's does). `forked_from`: the template's `sys.path[0]`, which a
    fresh kernel has as its working directory instead; `kernel_sets`: the environment variables the kernel's
    imports set in the template, which a fresh kernel's set at its start."""
    _as_launched(request, stdio, forked_from)
    os.environ.update(kernel_sets or {})
    answer(conn, {"pid": os.getpid()})
    conn.settimeout(None)
    exiting = threading.Event()
    threading.Thread(target=_die_with_launcher, args=(conn, exiting), name="jcc-launcher-tie", daemon=True).start()
    code = 0
    try:
        _run_kernel(request.args, forked=forked_from is not None)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)

    def say_exit() -> None:
        exiting.set()
        conn.sendall(exit_line(code))

    _finish(say_exit)
    return code


def _as_launched(request: KernelRequest, stdio: list[int], forked_from: str | None) -> None:
    """Take on the launch's streams, environment, folder, umask, niceness; random states as a fresh process's."""
    if forked_from is not None:
        os.setsid()  # a session and process group of its own, as jupyter_client and the launcher give a kernel
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in zip((0, 1, 2), stdio):
        os.dup2(fd, target)
        os.close(fd)
    _fresh_stdio()
    os.umask(request.umask)
    if hasattr(os, "nice") and request.nice > os.nice(0):
        with contextlib.suppress(OSError):
            os.nice(request.nice - os.nice(0))
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    if forked_from is not None and sys.path and sys.path[0] == forked_from:
        sys.path[0] = request.cwd  # what `python -m` puts first
    sys.orig_argv = [sys.executable, "-m", KERNEL_MODULE, *request.args]
    _fresh_random_states()


def _fresh_stdio() -> None:
    """New sys.std* objects on fds 0-2, made as CPython makes them at start-up (line-buffered on a terminal)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        old = getattr(sys, f"__{name}__", None)
        unbuffered = bool(getattr(sys.__stdout__, "write_through", False))  # python -u, PYTHONUNBUFFERED
        encoding = getattr(old, "encoding", None) or "utf-8"
        errors = getattr(old, "errors", None) or ("backslashreplace" if fd == 2 else "strict")
        try:
            raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
            buffered: Any = (
                raw if unbuffered and fd else (io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw))
            )
            stream = io.TextIOWrapper(
                buffered,
                encoding=encoding,
                errors=errors,
                line_buffering=fd == 2 or (fd == 1 and raw.isatty()),
                write_through=unbuffered,
            )
        except (OSError, ValueError):
            continue
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _fresh_random_states() -> None:
    """A forked child shares its template's random states: reseed what a fresh process seeds from the OS (Python's,
    NumPy's global one, torch's default CPU generator). torch's CUDA generators start from a constant in every
    fresh process and are made only when CUDA starts, which the template never did."""
    import random

    random.seed()
    numpy = sys.modules.get("numpy")
    with contextlib.suppress(Exception):
        if numpy is not None:
            numpy.random.seed()
    torch = sys.modules.get("torch")
    with contextlib.suppress(Exception):
        if torch is not None:
            torch.default_generator.seed()


def _run_kernel(args: list[str], forked: bool = False) -> None:
    """`python -m ipykernel_launcher ARGS` here. A cold launch's kernel starts without our own modules, as a fresh
    one would; a forked one keeps those its template imported ahead of `%load_ext jupyter_compile_cache` (0.2 s of
    its first cell), as it keeps torch's: none holds state of the template's (no session, no patch on torch)."""
    import importlib
    import runpy

    from ipykernel.ipkernel import IPythonKernel

    from .kernel_exit import stop_compile_workers_on_shutdown

    ours = (__package__ or "jupyter_compile_cache").partition(".")[0]
    if not forked:
        for name in [n for n in sys.modules if n == ours or n.startswith(f"{ours}.")]:
            del sys.modules[name]
    if forked and "ipykernel.kernelapp" in sys.modules:
        # The one module the template imports that reads a launch's own variables when imported: IPKernelApp's
        # defaults take JPY_PARENT_PID (the front end's pid) and JPY_INTERRUPT_EVENT. Imported in the template, before
        # any launch, a forked kernel took itself for one started by hand (the "Ctrl-C will not work" banner in the
        # server's log). Imported again here, it reads this launch's, as a fresh kernel does.
        del sys.modules["ipykernel.kernelapp"]
        importlib.import_module("ipykernel.kernelapp")
    sys.argv = [KERNEL_MODULE, *args]
    stop_compile_workers_on_shutdown(IPythonKernel)
    runpy.run_module(KERNEL_MODULE, run_name="__main__", alter_sys=True)


def _die_with_launcher(conn: socket.socket, exiting: threading.Event) -> None:
    """The launcher stands in for this kernel: when its end closes before the kernel said its exit code (the front
    end killed it), the kernel and its children go too, as they would with a kernel the front end started."""
    while True:
        try:
            if not conn.recv(64):
                break
        except OSError:
            break
    if not exiting.is_set():
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _finish(say_exit: Callable[[], object]) -> None:
    """The kernel returned: run the exit handlers now (they would run at exit anyway), release CUDA memory, then
    say so. The finalization left runs at the lowest priority: the next kernel, starting meanwhile, goes first.
    torch's op-library finalizers are part of it (compiler.py says why)."""
    finalize_torch_libraries = defer_library_finalizers()
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
        say_exit()
    with contextlib.suppress(OSError):
        os.nice(19)
    finalize_torch_libraries()


def main(argv: list[str]) -> int:
    """The cold kernel: FD is our end of the launcher's socket pair."""
    conn = socket.socket(fileno=int(argv[1]))
    taken = receive_request(conn)
    if taken is None:
        return 2
    return become_kernel(conn, *taken)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
