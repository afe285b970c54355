"""A spare kernel process: torch's compiler stack imported ahead of time, waiting to become the next kernel.

Started with the kernel's own Python, environment and working directory, in one of two ways.

By `warm_kernel.WarmSpareProvisioner` (front ends that launch kernels through jupyter_client):
`python -m jupyter_compile_cache.kernels.spare READY_FD DONE_FD [--cold]`. Unless `--cold` (the first kernel, which has
no spare to take over), it imports torch, torch's compiler and the kernel's own modules, hashes
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

By `launcher.py` (front ends that launch a kernel spec's argv themselves, as VS Code does):
`python -m jupyter_compile_cache.kernels.spare --listen OWNER_PID DELAY`. Detached from every kernel, it waits DELAY
seconds (and exits if its owner ends meanwhile), warms up, then listens on a Unix socket in a private folder
(`spare_dir()`), named after what it fits (the Python, environment and working directory: `spare_key()`) and its
owner, the launcher that started it. A later launcher that fits connects, hands over its stdin, stdout and stderr
and the kernel's arguments, and the spare becomes the kernel, with the environment it was started with. The
connection stays open as the kernel's tie to that launcher: the kernel's exit code goes back on it, and if it
closes first (the front end killed the launcher) the kernel's process group is killed. Once its owner is gone, a
spare that nobody takes within JUPYTER_COMPILE_CACHE_SPARE_LINGER seconds (default 30: a front end's restart
relaunches within a second or two) exits. One that cannot warm up leaves why in the folder, and the next launch
prints it to the front end's kernel log. With no spare ready, the launcher starts a cold kernel the same way,
`python -m jupyter_compile_cache.kernels.spare --attached FD`, its end of a socket pair as FD, and no warm-up.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import hashlib
import json
import os
import select
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

KERNEL_MODULES = ("ipykernel_launcher", "ipykernel")  # what a spare can become: `python -m <module> ARGS`
SPARE_ENV = "JUPYTER_COMPILE_CACHE_SPARE"
SPARE_DELAY_ENV = "JUPYTER_COMPILE_CACHE_SPARE_DELAY"
DEFAULT_SPARE_DELAY = 3.0
LINGER_ENV = "JUPYTER_COMPILE_CACHE_SPARE_LINGER"
DEFAULT_LINGER = 30.0
# Set by jupyter_client for the process it launches; ipykernel exits when its parent is not that pid. A spare's
# parent is whoever adopted it, so the variable is neither part of what a spare fits nor given to its kernel.
PARENT_PID_ENV = "JPY_PARENT_PID"


def spares_enabled(env: dict[str, str]) -> bool:
    return env.get(SPARE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    try:
        return max(0.0, float(env.get(name, default)))
    except ValueError:
        return default


def spare_delay(env: dict[str, str]) -> float:
    """Seconds between a kernel's start and its spare's (the spare's imports take a core for a few seconds)."""
    return _seconds(env, SPARE_DELAY_ENV, DEFAULT_SPARE_DELAY)


def spare_info_path(connection_file: str) -> str:
    """Where a kernel finds its spare's pid, for `%compile_cache status`: next to its connection file."""
    return os.path.splitext(connection_file)[0] + "-spare.json"


def spare_dir() -> str | None:
    """The folder of listening spares: this user's own, private; None if it cannot be made so (no spares then)."""
    if os.name != "posix" or not hasattr(socket, "send_fds"):
        return None  # Unix sockets passing file descriptors: what a launcher hands to its spare
    # $TMPDIR or /tmp, as tempfile would pick on a POSIX system (tempfile's import costs the launcher's every start)
    path = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"jupyter_compile_cache-spares-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None  # someone else's, or open to others: a spare there could be anybody's process
    return path


def spare_key(python: str, env: dict[str, str], cwd: str) -> str:
    """What a spare must match to become a kernel: the same Python, environment and working directory."""
    fitting = {k: v for k, v in env.items() if k != PARENT_PID_ENV}
    text = json.dumps([python, os.path.abspath(cwd), sorted(fitting.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


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
    if argv[1:2] == ["--listen"]:
        return listen(int(argv[2]), float(argv[3]))
    if argv[1:2] == ["--attached"]:
        return attached(int(argv[2]))
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
    _finish(lambda: os.write(done_fd, b"done\n"))
    with contextlib.suppress(OSError):
        os.close(done_fd)
    return 0


def listen(owner: int, delay: float) -> int:
    """The launcher's kind of spare (see the module docstring): warm up, wait for a launcher, become its kernel."""
    directory = spare_dir()
    if directory is None:
        return 1
    environ = dict(os.environ)  # the kernel's environment: as started, whatever the warm-up sets
    key = spare_key(sys.executable, environ, os.getcwd())
    started = time.monotonic()
    while time.monotonic() - started < delay:
        if not process_alive(owner):
            return 0  # its kernel is gone already: the next launch starts cold and starts its own spare
        time.sleep(min(0.5, delay))
    try:
        warm_up()
    except Exception as exc:  # detached, nobody sees our stderr: the next launch tells it (`take_failure`)
        with contextlib.suppress(OSError), open(_failure_path(directory, key), "w", encoding="utf-8") as f:
            f.write(f"{type(exc).__name__}: {exc}")
        return 1
    path = os.path.join(directory, f"{key}-{owner}-{os.getpid()}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(1)
        taken = _wait_for_launcher(listener, owner, _seconds(environ, LINGER_ENV, DEFAULT_LINGER))
    finally:
        listener.close()  # a launcher that connected meanwhile is refused: it tries another spare or starts cold
        with contextlib.suppress(OSError):
            os.unlink(path)
    if taken is None:
        return 0
    return _serve(*taken, environ)


def _failure_path(directory: str, key: str) -> str:
    return os.path.join(directory, f"{key}.failed")


def take_failure(directory: str, key: str) -> str | None:
    """Why the last spare that fits `key` could not warm up, once (the file goes), or None."""
    path = _failure_path(directory, key)
    try:
        with open(path, encoding="utf-8") as f:
            reason = f.read().strip()
        os.unlink(path)
    except OSError:
        return None
    return reason or None


def attached(fd: int) -> int:
    """A cold kernel for a launcher that found no spare ready: FD is our end of its socket pair. No warm-up: this
    is an ordinary kernel start, only with the launcher standing in, as for a spare (so its exit is as quick)."""
    conn = socket.socket(fileno=fd)
    taken = _take_request(conn)
    if taken is None:
        return 2
    return _serve(conn, *taken[1:], dict(os.environ))


def _serve(conn: socket.socket, module: str, args: list[str], environ: dict[str, str]) -> int:
    """Be the launcher's kernel: its environment as it was, tied to the launcher, the exit code back to it."""
    os.environ.clear()
    os.environ.update({k: v for k, v in environ.items() if k != PARENT_PID_ENV})
    exiting = threading.Event()
    threading.Thread(target=_die_with_launcher, args=(conn, exiting), name="jcc-launcher-tie", daemon=True).start()
    code = 0
    try:
        _become_kernel(module, args, own_stdin=False)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)

    def say_exit() -> None:
        exiting.set()
        conn.sendall(f"exit {code}\n".encode())

    _finish(say_exit)
    return code


def _wait_for_launcher(
    listener: socket.socket, owner: int, linger: float
) -> tuple[socket.socket, str, list[str]] | None:
    """The first launcher of this user that hands over its stdio and a kernel command, with that command; None once
    the owner is gone and `linger` seconds passed with no taker."""
    deadline: float | None = None
    while deadline is None or time.monotonic() < deadline:
        if deadline is None and not process_alive(owner):
            deadline = time.monotonic() + linger
        readable, _, _ = select.select([listener], [], [], 1.0)
        if not readable:
            continue
        conn, _ = listener.accept()
        taken = _take_request(conn)
        if taken is not None:
            return taken
        conn.close()
    return None


def _take_request(conn: socket.socket) -> tuple[socket.socket, str, list[str]] | None:
    """Read one launcher's request: {"module", "args"} with its stdin, stdout and stderr; put those in place of
    ours and answer with our pid. None (and nothing changed) for a request that is not one."""
    fds: list[int] = []
    try:
        if hasattr(socket, "SO_PEERCRED"):  # Linux; elsewhere the private folder alone keeps other users out
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
            if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
                return None
        conn.settimeout(10)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        request = json.loads(message)
        module, args = request["module"], [str(a) for a in request["args"]]
        if module not in KERNEL_MODULES or len(fds) != 3:
            return None
        conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")
        conn.settimeout(None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        for fd in fds:
            os.close(fd)
        return None
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    return conn, module, args


def process_alive(pid: int) -> bool:
    """A process of ours with that pid exists (a zombie counts: its parent has not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pid reused by another user's process: ours is gone
        return False
    return True


def _die_with_launcher(conn: socket.socket, exiting: threading.Event) -> None:
    """The launcher stands in for this kernel: when its end closes before the kernel said its exit code (the front
    end killed it), the kernel and its children go too, as they would have with a kernel the front end started."""
    while True:
        try:
            if not conn.recv(64):
                break
        except OSError:
            break
    if not exiting.is_set():
        os.killpg(os.getpgrp(), signal.SIGKILL)


def _become_kernel(module: str, args: list[str], own_stdin: bool = True) -> None:
    """Run `python -m module args` here. Our own modules go first, so the kernel starts without them, as a fresh
    one would (the user's `%load_ext jupyter_compile_cache` imports them again)."""
    import runpy

    from ipykernel.ipkernel import IPythonKernel

    from .kernel_exit import stop_compile_workers_on_shutdown

    ours = (__package__ or "jupyter_compile_cache").partition(".")[0]  # the whole package, not only kernels/
    for name in [n for n in sys.modules if n == ours or n.startswith(f"{ours}.")]:
        del sys.modules[name]
    if own_stdin:  # the provisioner's pipe: a kernel started by jupyter_client has its stdin closed
        sys.stdin.close()
        sys.stdin = open(os.devnull)  # noqa: SIM115  (the kernel replaces it with its own stream)
    sys.argv = [module, *args]
    stop_compile_workers_on_shutdown(IPythonKernel)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _finish(say_done: Callable[[], object]) -> None:
    """The kernel returned: run the exit handlers now (they would run at exit anyway; among them IPython clears the
    user's namespace, collects garbage and ipykernel closes its sockets), release CUDA memory, then say so. The
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
        say_done()
    with contextlib.suppress(OSError):
        os.nice(19)


@dataclass
class SpareState:
    """The warm-restart kernel's spare process, as `status` shows it."""

    pid: int
    alive: bool
    rss_bytes: int


def spare_status() -> SpareState | None:
    """This kernel's spare (called inside the kernel): pid, alive, resident memory; None without one."""
    try:
        from ipykernel.connect import get_connection_file

        with open(spare_info_path(get_connection_file()), encoding="utf-8") as f:
            pid = int(json.load(f)["pid"])
    except Exception:  # not a warm kernel, or not in a kernel at all
        return None
    try:
        import psutil

        process = psutil.Process(pid)
        return SpareState(pid, process.is_running(), process.memory_info().rss)
    except Exception:  # the spare went away or cannot be read: shown as not running
        return SpareState(pid, False, 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
