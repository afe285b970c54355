"""The warm kernel's launcher: the kernel spec's argv (`python -m jupyter_compile_cache.kernels.launcher -f
{connection_file}`), which JupyterLab, Notebook 7, nbclient, papermill and VS Code run at every kernel start. It:

- asks this user's warm templates (template.py) for a kernel: the first that fits the launch (template_fit.py) forks
  one, with the launcher's streams, environment and working directory;
- or, with none that fits or answers, starts the kernel cold in a child process, and starts a detached template for
  the launches that follow (at most one being made per environment);
- either way stands in for the kernel: forwards SIGINT, SIGTERM and SIGHUP to it, exits with its exit code as soon
  as its exit handlers ran, and takes the kernel's process group with it if the front end kills the launcher
  (kernel_process.py);
- writes how the kernel started next to its connection file (kernel_start.py).

JUPYTER_COMPILE_CACHE_TEMPLATE=0, or a system without fork and Unix sockets that carry file descriptors (Windows;
macOS, where forking a process that loaded system frameworks is unsafe), makes it a plain ipykernel (`exec`). It
runs on every kernel start: it must stay light (no torch, no jupyter_client).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING

from ..failure import Failure
from . import protocol
from .kernel_start import Cold, KernelStart, Next, write_start
from .protocol import KERNEL_MODULE, KernelRequest, TemplateProblem, read_answer, send_request
from .runtime_dir import process_alive, runtime_dir
from .template_fit import TemplateInfo, install_stamp, launch_key, template_env

if TYPE_CHECKING:
    import subprocess

TEMPLATE_ENV = "JUPYTER_COMPILE_CACHE_TEMPLATE"
MAX_TEMPLATES_ENV = "JUPYTER_COMPILE_CACHE_TEMPLATES"
DEFAULT_MAX_TEMPLATES = 3
FORWARDED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
ANSWER_TIMEOUT = 10.0  # seconds a template has to fork and the child to answer; then the next, or a cold start
COLD_START_TIMEOUT = 60.0  # seconds a cold kernel's process has to start Python and answer; then a plain exec
RETRY_FAILED_AFTER = 600.0  # a template that could not warm up is tried again this much later
TEMPLATE_ONLY = "--template-only"  # start a template for this environment, no kernel (server_extension.py)


class SignalForwarder:
    """Installed first thing: a signal that arrives before the kernel's pid is known is kept and sent on later."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []
        self.termination: int | None = None  # the last terminating signal forwarded
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        if sig != signal.SIGINT:
            self.termination = sig
        if self.pid is None:
            self.pending.append(sig)
        else:
            self._send(sig)

    def forward_to(self, pid: int) -> None:
        self.pid = pid
        for sig in self.pending:
            self._send(sig)
        self.pending.clear()

    def _send(self, sig: int) -> None:
        assert self.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def uninstall(self) -> None:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)


def templates_enabled(env: dict[str, str]) -> KernelStart | None:
    """Why this launch gets no template, as the start it makes (None: it may)."""
    if env.get(TEMPLATE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return KernelStart("cold", cold=Cold.OFF, detail=f"{TEMPLATE_ENV}=0")
    if not sys.platform.startswith("linux") or not hasattr(socket, "send_fds") or not hasattr(os, "fork"):
        return KernelStart("cold", cold=Cold.NO_FORK, detail=sys.platform)
    return None


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    args = list(sys.argv[1:] if argv is None else argv)
    if args == [TEMPLATE_ONLY]:
        return prepare_template()
    forwarder = SignalForwarder()
    connection_file = _connection_file(args)
    env = dict(os.environ)
    off = templates_enabled(env)
    directory = runtime_dir(env) if off is None else None
    if directory is None:
        off = off or KernelStart("cold", cold=Cold.NO_RUNTIME_DIR)
    else:
        request = KernelRequest.here(args, started)
        try:
            stamp = install_stamp()
            kernel, why = ask_templates(directory, request, stamp)
            if kernel is None:
                _start_template_if_needed(directory, env, stamp, why)
        except Exception as exc:  # the templates are a speed-up: whatever fails there, the kernel starts
            kernel, why = None, KernelStart("cold", cold=Cold.LOOKUP_FAILED, failure=Failure.of(exc))
        if kernel is None:
            kernel = start_cold_kernel(request)
        if kernel is not None:
            conn, pid, process, template = kernel
            why.seconds = time.time() - started
            write_start(connection_file, KernelStart("forked", why.seconds, template) if template else why)
            forwarder.forward_to(pid)
            return stand_in(conn, forwarder, process)
        off = KernelStart("cold", cold=Cold.KERNEL_SILENT)
    off.seconds = time.time() - started
    write_start(connection_file, off)
    forwarder.uninstall()
    for sig in forwarder.pending:  # arrived before the exec: as if sent to a kernel that had not started yet
        os.kill(os.getpid(), sig)
    command = [sys.executable, "-m", KERNEL_MODULE, *args]
    if os.name != "posix":  # no exec that keeps the pid there: run it as a child
        import subprocess

        return subprocess.call(command)
    os.execv(sys.executable, command)
    return 0  # not reached


def prepare_template() -> int:
    """`--template-only` (the Jupyter server extension, at server start): a template for this environment, started
    unless one fits or is warming up already; no kernel. The caller (the server) is its holder."""
    env = dict(os.environ)
    off = templates_enabled(env)
    directory = runtime_dir(env) if off is None else None
    if directory is None:
        return 0
    stamp = install_stamp()
    if any(info.mismatch(sys.executable, env, stamp) is None for info in templates(directory)):
        return 0
    _start_template_if_needed(directory, env, stamp, KernelStart("cold", cold=Cold.NONE_YET))
    return 0


Kernel = tuple[socket.socket, int, "subprocess.Popen | None", "int | None"]  # connection, pid, our child, template


def templates(directory: str) -> list[TemplateInfo]:
    """The ready templates in the folder, most recently used first; files of dead ones are removed."""
    found = []
    for name in os.listdir(directory):
        if not protocol.is_info_file(name):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as f:
                info = TemplateInfo.from_json(json.load(f))
            used = os.stat(path).st_mtime
        except (OSError, ValueError, TypeError):
            continue
        if not process_alive(info.pid):  # killed without its cleanup
            for stale in (path, info.socket):
                with contextlib.suppress(OSError):
                    os.unlink(stale)
            continue
        found.append((used, info))
    return [info for _, info in sorted(found, key=lambda x: -x[0])]


def warming_templates(directory: str) -> list[protocol.Warming]:
    """The templates still warming up in the folder, oldest first."""
    found = []
    for name in os.listdir(directory):
        if name.endswith(protocol.WARMING_SUFFIX):
            warming = protocol.Warming.read(os.path.join(directory, name))
            if warming is not None and process_alive(warming.pid):
                found.append(warming)
    return sorted(found, key=lambda warming: warming.since)


def ask_templates(directory: str, request: KernelRequest, stamp: str) -> tuple[Kernel | None, KernelStart]:
    """A kernel forked by the first template that fits and answers; else (None, why none did, as a cold start)."""
    refused: list[KernelStart] = []  # what the templates that fit said, which tells more than those that do not fit
    mismatches: list[KernelStart] = []
    for info in templates(directory):
        mismatch = info.mismatch(sys.executable, request.env, stamp)
        if mismatch is not None:
            mismatches.append(KernelStart("cold", cold=Cold.NO_FIT, problem=mismatch))
            continue
        for attempt in range(2):  # a connection reset while it was busy with another launch: once more
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.settimeout(ANSWER_TIMEOUT)
                conn.connect(info.socket)
                send_request(conn, request, _stdio())
                answer = read_answer(conn)
                if "pid" in answer:
                    return (conn, int(answer["pid"]), None, info.pid), KernelStart("forked")
                problem = TemplateProblem.from_json(answer.get("refused"))
                refused.append(KernelStart("cold", cold=Cold.REFUSED, problem=problem))
            except ConnectionError as exc:  # reset or closed under us: it may have retired meanwhile
                conn.close()
                if attempt == 0 and process_alive(info.pid) and os.path.exists(info.socket):
                    time.sleep(0.1)
                    continue
                refused.append(KernelStart("cold", cold=Cold.TEMPLATE_SILENT, detail=type(exc).__name__))
            except (OSError, ValueError, KeyError, TypeError) as exc:  # died, stopped, or not a template
                refused.append(KernelStart("cold", cold=Cold.TEMPLATE_SILENT, detail=type(exc).__name__))
            conn.close()
            break
    return None, (refused or mismatches or [KernelStart("cold", cold=Cold.NONE_YET)])[0]


def _start_template_if_needed(directory: str, env: dict[str, str], stamp: str, why: KernelStart) -> None:
    """Start a template for launches like this one unless one is being made; what happens next goes into WHY."""
    key = launch_key(sys.executable, env, stamp)
    if any(info.launch_key == key for info in templates(directory)):
        why.next = Next.KEPT  # this launch's own template refused this once (see why): it stays for the next
        return
    warming = protocol.Warming.read(protocol.warming_path(directory, key))
    if warming is not None and process_alive(warming.pid):
        why.next = Next.WARMING
        return
    failed = protocol.read_failure(directory, key, RETRY_FAILED_AFTER)
    if failed is not None:
        why.next, why.next_failure = Next.FAILED, failed  # the kernel's start line says it
        return
    retired = protocol.retired_path(directory, key)
    with contextlib.suppress(OSError):
        with contextlib.suppress(ValueError), open(retired, encoding="utf-8") as f:
            why.retired = TemplateProblem.from_json(json.load(f))
        os.unlink(retired)
    _make_room(directory, env)
    why.next = Next.NOT_STARTED if start_template(directory, env, key) is None else Next.STARTED


def _make_room(directory: str, env: dict[str, str]) -> None:
    """At most JUPYTER_COMPILE_CACHE_TEMPLATES templates per user: the least recently used go."""
    try:
        limit = max(1, int(env.get(MAX_TEMPLATES_ENV, DEFAULT_MAX_TEMPLATES)))
    except ValueError:
        limit = DEFAULT_MAX_TEMPLATES
    for info in templates(directory)[limit - 1 :]:
        with contextlib.suppress(OSError):
            os.kill(info.pid, signal.SIGTERM)


def start_template(directory: str, env: dict[str, str], key: str) -> int | None:
    """Start a template, detached: a double fork, its middle process exiting at once, so the template is nobody's
    child and leads a session of its own; the launch's environment less its per-launch variables, the runtime
    folder as its working directory (nothing there shadows a module). Its pid, or None if it could not start."""
    read_end, write_end = os.pipe()
    command = [sys.executable, "-m", protocol.TEMPLATE_MODULE, str(os.getppid()), key]
    try:
        middle = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if middle == 0:
        try:
            os.close(read_end)
            os.setsid()
            os.chdir(directory)
            template = os.fork()
            if template == 0:
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.closerange(3, 65536)  # the front end's pipes and sockets stay with the front end
                os.execve(sys.executable, command, template_env(env))
            os.write(write_end, str(template).encode())
        finally:
            os._exit(0)  # also the template's, should its exec fail
    os.close(write_end)
    try:
        pid_text = os.read(read_end, 32)
    finally:
        os.close(read_end)
        os.waitpid(middle, 0)
    return int(pid_text) if pid_text else None


def start_cold_kernel(request: KernelRequest) -> Kernel | None:
    """The kernel started cold in a child process, which this launcher stands in for as for a forked one (so it
    exits as quickly at the next restart). None if it did not answer."""
    import subprocess

    ours, theirs = socket.socketpair()
    command = [sys.executable, "-m", protocol.KERNEL_PROCESS_MODULE, str(theirs.fileno())]
    try:
        proc = subprocess.Popen(command, pass_fds=(theirs.fileno(),), start_new_session=True)
    except OSError:
        ours.close()
        return None
    finally:
        theirs.close()
    try:
        ours.settimeout(COLD_START_TIMEOUT)
        send_request(ours, request, _stdio())
        answer = read_answer(ours)
        return ours, int(answer["pid"]), proc, None
    except (OSError, ValueError, KeyError, TypeError):
        ours.close()
        proc.kill()
        proc.wait()
        return None


def stand_in(conn: socket.socket, forwarder: SignalForwarder, child: subprocess.Popen | None = None) -> int:
    """Wait for the kernel's exit code on the connection; a kernel that ends without one was killed."""
    ending = protocol.read_ending(conn)
    if ending.code is not None:  # said by the kernel, or by its template after `os._exit`
        return ending.code
    died_of = forwarder.termination  # the kernel died of the signal we passed on, or of what its exit says
    if ending.signal is not None:  # its template saw it killed
        died_of = ending.signal
    if child is not None:
        status = child.wait()
        if status >= 0:
            return status
        died_of = -status
    if died_of is not None:  # so do we
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(died_of, signal.SIG_DFL)
        os.kill(os.getpid(), died_of)
    print("jupyter_compile_cache launcher: the kernel process ended without an exit code", file=sys.stderr)
    return 1


def _stdio() -> list[int]:
    """fds 0-2 to hand over; one the front end left closed is handed over as /dev/null."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def _connection_file(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg in ("-f", "--f", "--ConnectionFileMixin.connection_file") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(("-f=", "--f=")):
            return arg.split("=", 1)[1]
    return None


if __name__ == "__main__":
    exit_code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(exit_code)  # the front end waits for this process: its interpreter's teardown serves no one
