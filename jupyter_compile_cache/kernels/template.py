"""A warm template: a process that has imported torch, its compiler and ipykernel, and forks kernels.

Started detached by a launcher (launcher.py) that found no template fitting its launch, with that launch's
environment (less its per-launch variables), in this user's private runtime folder:
`python -m jupyter_compile_cache.kernels.template HOLDER_PID LAUNCH_KEY`. It:

1. waits for a quiet machine (at most JUPYTER_COMPILE_CACHE_TEMPLATE_QUIET_WAIT seconds, idle_cpu.py), then warms up
   on otherwise idle CPU: ipykernel, torch, Dynamo and Inductor, the file hashes, the CPU's ISA probe and the header
   checks kernels of this installation made (header_calls.py), recording every environment variable it reads
   (template_fit.py). It never touches CUDA (`PYTORCH_NVML_BASED_CUDA_CHECK=1` while it imports) and runs no torch
   operation on the CPU (an OpenMP thread pool does not survive a fork);
2. says what it fits in `<runtime dir>/<name>.json` and listens on `<name>.sock` beside it;
3. forks, for each launcher of this user that connects, a child that becomes the kernel (kernel_process.py), after
   checking what would make a child differ from a fresh kernel, or hang (a thread started since torch's import, CUDA
   initialized, its installed files changed, a file in the launch's folder shadowing a module it imported). Each
   refusal is answered, and the launcher starts that kernel cold.

When it retires (idle, its launchers gone for a grace, replaced, SIGTERM; docs/reference.md has the settings) it
forks no more and exits once the kernels it forked have ended: it is their parent, and tells their launchers how each
ended. A warm-up that fails leaves its reason in the folder; the next launch prints it once. The hash seed of `str`
is the one thing a child keeps from its template: set PYTHONHASHSEED where hashes must differ between kernels.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any

from ..failure import Failure
from . import protocol
from .header_calls import Replayer
from .idle_cpu import (
    QUIET_WAIT_ENV,
    QUIET_WAIT_MAX,
    cores_used,
    cpu_times,
    on_idle_cpu,
    quiet_below,
    wait_for_a_quiet_machine,
)
from .kernel_process import become_kernel
from .protocol import KernelRequest, TemplateProblem, TemplateTrouble, answer, receive_request
from .runtime_dir import process_alive, runtime_dir
from .template_fit import EnvironReads, TemplateInfo, install_stamp, per_launch, read_natively

NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
IDLE_ENV = "JUPYTER_COMPILE_CACHE_TEMPLATE_IDLE"
DEFAULT_IDLE = 3600.0
GRACE_ENV = "JUPYTER_COMPILE_CACHE_TEMPLATE_GRACE"
DEFAULT_GRACE = 600.0  # seconds a template outlives the last process that launched from it
SETTLE_SECONDS = 10.0  # a helper thread that the warm-up started may take this long to end
STAMP_EVERY = 3.0  # seconds between two looks at the installed files (every fork looks too)

# What a starting ipykernel imports beyond ipykernel.kernelapp (its debugger, history database, completer, the
# interface lookup behind its connection file). debugpy alone is 0.09 s of a forked kernel's start on the CPU machine.
KERNEL_IMPORTS = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "jupyter_client.localinterfaces",
    "psutil",
    "IPython.core.debugger",
    "IPython.core.oinspect",
    "IPython.utils.wildcard",
    "IPython.core.completerlib",
    "IPython.extensions.storemagic",
    "sqlite3",
    "tornado.platform.asyncio",
    "tornado.queues",
)
# What `%load_ext jupyter_compile_cache` imports (the extension's front end and session): 0.2 s of a forked kernel's
# first cell on the CPU machine when the template left it to the child.
EXTENSION_IMPORTS = (
    "jupyter_compile_cache.core.session",
    "jupyter_compile_cache.core.settings",
    "jupyter_compile_cache.frontends.event_wording",
    "jupyter_compile_cache.frontends.magics",
    "jupyter_compile_cache.frontends.reporter",
    "jupyter_compile_cache.kernels.kernel_exit",
)


class WarmUpFailed(Exception):
    """The warm-up's own work failed: its Failure as it was (type and message), for the failure file."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def seconds_setting(env: dict[str, str], name: str, default: float) -> float:
    try:
        return max(0.0, float(env.get(name, default)))
    except ValueError:
        return default


def native_threads() -> set[str]:
    """This process's OS threads (Linux)."""
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


def warm_up(headers: Replayer | None = None) -> tuple[set[str], dict[str, str]]:
    """Import and compute what a kernel's start and its first compiled cell would, without CUDA or a torch operation
    (`headers`: this installation's kernels' header checks, made here too). Returns the OS threads once done (any thread
    beyond them at a fork was started by something that must not be forked) and the environment variables the kernel's
    imports set (debugpy's PYDEVD_USE_FRAME_EVAL), which a forked kernel gets on top of its launch's."""
    import importlib

    before = dict(os.environ)
    importlib.import_module("ipykernel.kernelapp")
    for module in KERNEL_IMPORTS:
        with contextlib.suppress(ImportError):  # optional ones (psutil, debugpy): the kernel does without them too
            importlib.import_module(module)
    kernel_sets = {name: value for name, value in os.environ.items() if before.get(name) != value}
    import torch  # noqa: F401

    for module in EXTENSION_IMPORTS:
        importlib.import_module(module)
    threads = native_threads()
    from ..torch_adapter import compiler
    from .prewarm import Prewarm

    prewarm = Prewarm()
    prewarm.run_here(gpu=False, idle_work=True)  # all of it runs here; the order only matters to a kernel's cells
    if prewarm.error and not compiler.compiler_imported():  # a failed CPU probe only costs a cell time
        raise WarmUpFailed(prewarm.error)
    if headers is not None and compiler.compiler_imported():
        headers.replay_new()
    gc.collect()
    gc.freeze()  # lives as long as every kernel forked from it: kept out of their collections, and of their copies
    lingering = settled_threads(threads)
    if lingering:
        raise RuntimeError(f"threads started while warming up did not end: {lingering}")
    return native_threads(), kernel_sets


def _imported_from(stem: str, path: str) -> bool:
    """Whether the module STEM was imported from PATH (a checkout it runs in: the same files, no shadow)."""
    origin = getattr(sys.modules.get(stem), "__file__", None)
    if not origin:
        return False
    origin = os.path.realpath(origin)
    return os.path.realpath(path) in (origin, os.path.dirname(origin))


def settled_threads(baseline: set[str], timeout: float = SETTLE_SECONDS) -> str | None:
    """Wait for native threads started since `baseline` to end (a library's helper threads may take a moment); a
    description of those still running after `timeout` seconds, or None. The CUDA driver's own thread ("cuda..."), which
    importing Inductor starts on a GPU host, is allowed: forked children run CUDA and CPU work right beside it."""
    deadline = time.monotonic() + timeout
    while True:
        extra = {tid for tid in native_threads() - baseline if not _thread_name(tid).startswith("cuda")}
        if not extra:
            return None
        if time.monotonic() > deadline:
            return ", ".join(sorted(_thread_name(tid) for tid in extra))
        time.sleep(0.05)


def _thread_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as f:
            return f"{f.read().strip()} ({tid})"
    except OSError:
        return tid


class Template:
    def __init__(self, directory: str, info: TemplateInfo, baseline_threads: set[str], headers: Replayer) -> None:
        self.directory, self.info = directory, info
        self.headers = headers
        self.cpu_sample = cpu_times()
        self.baseline_threads = baseline_threads
        self.info_path = protocol.info_path(directory, protocol.template_name(info.launch_key, info.pid))
        self.holders = set(info.holders)
        self.last_used = time.monotonic()
        self.holders_gone_at: float | None = None
        # A forked kernel's pid -> its launcher's connection, and a descriptor that becomes readable when it exits:
        # the template is the kernel's parent, the only process that can learn how it ended and tell the launcher.
        self.kernels: dict[int, tuple[socket.socket, int | None]] = {}
        self.stamp_checked = time.monotonic()
        self.retired: TemplateProblem | None = None
        self.imported = {name.partition(".")[0] for name in sys.modules} - {"__main__"}
        self.path0 = sys.path[0] if sys.path else ""
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def publish(self) -> None:
        self.listener.bind(self.info.socket)
        self.listener.listen(16)
        tmp = self.info_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.info.to_json(), f)
        os.replace(tmp, self.info_path)

    def serve(self) -> tuple[Any, ...] | None:
        """Fork kernels until retired; in a forked child, returns what it needs to become the kernel."""
        while self.retired is None:
            self._reap()
            self.retired = self._retire_reason()
            if self.retired is not None:
                break
            self._replay_header_calls()
            exits = [fd for _, fd in self.kernels.values() if fd is not None]
            try:
                readable, _, _ = select.select([self.listener, *exits], [], [], 1.0)
            except InterruptedError:
                continue
            if self.listener not in readable:
                continue
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            child = self._answer(conn)
            if child is not None:
                return child
        return None

    def _replay_header_calls(self) -> None:
        """Header checks a kernel kept since the warm-up: made here once the machine has been quiet for a poll, on
        idle CPU time, so that the kernels forked later skip them (a launch meanwhile waits for them)."""
        previous, now = self.cpu_sample, cpu_times()
        self.cpu_sample = now
        if previous is None or now is None or now[1] == previous[1] or not self.headers.changed():
            return
        if cores_used(previous, now) >= quiet_below():
            return
        on_idle_cpu(self.headers.replay_new)

    def _answer(self, conn: socket.socket) -> tuple[Any, ...] | None:
        taken = receive_request(conn)
        if taken is None:
            conn.close()
            return None
        request, stdio = taken
        refusal = self._fork_problem(request)
        if refusal is None:
            try:
                pid = os.fork()
            except OSError as exc:
                refusal = TemplateProblem(TemplateTrouble.FORK_FAILED, str(exc))
            else:
                if pid == 0:
                    self._forget_for_child()
                    return conn, request, stdio, self.path0
                self.kernels[pid] = (conn, _exit_descriptor(pid))
                self.last_used = time.monotonic()
                self.holders.add(request.holder)
                with contextlib.suppress(OSError):
                    os.utime(self.info_path)  # the least recently used template is the first to go
        if refusal is not None:
            with contextlib.suppress(OSError):
                answer(conn, {"refused": refusal.to_json()})
        for fd in stdio:
            os.close(fd)
        if refusal is not None:
            conn.close()
        return None

    def _forget_for_child(self) -> None:
        """In a forked child: the listener and the other kernels' connections are not the kernel's to hold (a
        launcher sees its kernel's end only when every copy of its connection is closed)."""
        self.listener.close()
        self._drop_kernels()

    def _drop_kernels(self) -> None:
        for conn, exit_fd in self.kernels.values():
            conn.close()
            if exit_fd is not None:
                os.close(exit_fd)
        self.kernels.clear()

    def _fork_problem(self, request: KernelRequest) -> TemplateProblem | None:
        """Why a child of this process would not be a fresh kernel of that launch (or would hang), or None."""
        mismatch = self.info.mismatch(sys.executable, request.env, self.info.stamp)
        if mismatch is not None:
            return mismatch
        problem = self._permanent_problem()
        if problem is not None:
            self.retired = problem
            return problem
        shadowing = self._shadowed(request.cwd)
        if shadowing:
            return TemplateProblem(TemplateTrouble.SHADOWED, shadowing)
        return None

    def _permanent_problem(self) -> TemplateProblem | None:
        if threading.active_count() != 1:
            return TemplateProblem(TemplateTrouble.THREAD_RUNNING)
        extra = settled_threads(self.baseline_threads, timeout=1.0)
        if extra:
            return TemplateProblem(TemplateTrouble.THREADS_AFTER_IMPORT, str(extra))
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            return TemplateProblem(TemplateTrouble.CUDA_INITIALIZED)
        if install_stamp() != self.info.stamp:
            return TemplateProblem(TemplateTrouble.PACKAGES_CHANGED)
        return None

    def _shadowed(self, cwd: str) -> str | None:
        try:
            names = os.listdir(cwd)
        except OSError:
            return None
        for name in names:
            stem, _, suffix = name.partition(".")
            if stem not in self.imported or _imported_from(stem, os.path.join(cwd, name)):
                continue
            package = os.path.isfile(os.path.join(cwd, name, "__init__.py"))
            if suffix in ("py", "pyc") or suffix.endswith("so") or package:
                return name
        return None

    def _retire_reason(self) -> TemplateProblem | None:
        idle = self.info.idle_seconds
        if idle and time.monotonic() - self.last_used > idle:
            return TemplateProblem(TemplateTrouble.IDLE)
        self.holders = {pid for pid in self.holders if process_alive(pid)}
        if self.holders:
            self.holders_gone_at = None
        elif self.holders_gone_at is None:
            self.holders_gone_at = time.monotonic()
        elif time.monotonic() - self.holders_gone_at > self.info.grace_seconds:
            return TemplateProblem(TemplateTrouble.HOLDERS_GONE)
        if not os.path.exists(self.info_path):
            return TemplateProblem(TemplateTrouble.FILE_REMOVED)
        if time.monotonic() - self.stamp_checked > STAMP_EVERY:  # a few ms of stat calls: not every second
            self.stamp_checked = time.monotonic()
            if install_stamp() != self.info.stamp:
                return TemplateProblem(TemplateTrouble.PACKAGES_CHANGED)
        return None

    def _reap(self) -> bool:
        """Collect the kernels that ended and tell each one's launcher how (a kernel that says its exit code itself
        has its launcher gone by then; one that ended by `os._exit` or a signal has not). Whether any child is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            conn, exit_fd = self.kernels.pop(pid, (None, None))
            if exit_fd is not None:
                os.close(exit_fd)
            if conn is not None:
                code = os.waitstatus_to_exitcode(status)
                with contextlib.suppress(OSError):
                    conn.setblocking(False)
                    conn.send(protocol.exit_line(code) if code >= 0 else protocol.signal_line(-code))
                conn.close()

    def close(self) -> None:
        for path in (self.info.socket, self.info_path):  # first: no launcher connects to a closing listener
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.listener.close()
        if self.retired is not None:  # the next launch that finds no template says why this one went
            retired = protocol.retired_path(self.directory, self.info.launch_key)
            with contextlib.suppress(OSError), open(retired, "w", encoding="utf-8") as f:
                json.dump(self.retired.to_json(), f)

    def linger(self) -> None:
        """After `close`: the kernels it forked are its children, so it stays (listening to nobody) until they have
        ended, to tell each one's launcher how. Were it to go first, they would be re-parented, which ipykernel's
        parent poller may take for their front end's end."""
        while self.kernels:
            exits = [fd for _, fd in self.kernels.values() if fd is not None]
            try:
                select.select(exits, [], [], 1.0)
            except InterruptedError:
                pass
            if not self._reap():
                break
        self._drop_kernels()


def _exit_descriptor(pid: int) -> int | None:
    """A pidfd of the child (Linux 5.3+): readable once it exits, which wakes the template to tell its launcher at
    once. Without one, the template tells within its one-second poll."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _stop(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    holder, launch_key = int(argv[1]), argv[2]
    directory = runtime_dir()
    if directory is None:
        return 1
    signal.signal(signal.SIGTERM, _stop)
    started = time.time()
    start_env = dict(os.environ)
    stamp = install_stamp()
    headers = Replayer(stamp)
    warming = protocol.warming_path(directory, launch_key)
    quiet_wait = seconds_setting(start_env, QUIET_WAIT_ENV, QUIET_WAIT_MAX)
    state = protocol.Warming(os.getpid(), started, protocol.WarmingStep.QUIET, quiet_wait)
    state.write(warming)
    try:
        set_here = NVML_CHECK_ENV not in os.environ
        os.environ.setdefault(NVML_CHECK_ENV, "1")
        try:
            busy = wait_for_a_quiet_machine(most=quiet_wait) >= quiet_wait > 0
            state.step = protocol.WarmingStep.IMPORTING_BUSY if busy else protocol.WarmingStep.IMPORTING
            state.write(warming)
            with EnvironReads() as reads:
                baseline, kernel_sets = on_idle_cpu(lambda: warm_up(headers), busy)
        finally:
            if set_here:
                os.environ.pop(NVML_CHECK_ENV, None)
        names = {n for n in reads.names | set(start_env) if n in reads.names or read_natively(n)}
        selecting = {n: start_env.get(n) for n in sorted(names) if not per_launch(n) and n != NVML_CHECK_ENV}
    except BaseException as exc:  # said in the failure file: the launcher tells the kernel's user why it started cold
        failure = exc.failure if isinstance(exc, WarmUpFailed) else Failure.of(exc)
        protocol.write_failure(directory, launch_key, failure)
        with contextlib.suppress(OSError):
            os.unlink(warming)
        return 1
    name = protocol.template_name(launch_key, os.getpid())
    info = TemplateInfo(
        pid=os.getpid(),
        python=sys.executable,
        stamp=stamp,
        launch_key=launch_key,
        selecting=selecting,
        socket=protocol.socket_path(directory, name),
        started=started,
        warm_up_seconds=time.time() - started,
        holders=[holder],
        idle_seconds=seconds_setting(start_env, IDLE_ENV, DEFAULT_IDLE),
        grace_seconds=seconds_setting(start_env, GRACE_ENV, DEFAULT_GRACE),
    )
    template = Template(directory, info, baseline, headers)
    child = None
    try:
        if stamp != install_stamp():
            return 0  # upgraded while it warmed up: never used
        template.publish()
        with contextlib.suppress(OSError):
            os.unlink(warming)
        with contextlib.suppress(SystemExit):  # SIGTERM: no more kernels from it
            child = template.serve()
    finally:
        if child is None:
            template.close()
            with contextlib.suppress(OSError):
                os.unlink(warming)
    if child is None:
        template.linger()  # a second SIGTERM ends it at once
        return 0
    conn, request, stdio, path0 = child
    return become_kernel(conn, request, stdio, forked_from=path0, kernel_sets=kernel_sets)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
