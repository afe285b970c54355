"""The warm-restart kernel for front ends that launch a kernel spec's `argv` themselves (VS Code, VSCodium).

`install-kernel` writes a spec whose argv is `python -m jupyter_compile_cache.kernels.launcher -f {connection_file}`.
jupyter_client front ends (JupyterLab, Notebook 7, nbclient) never run it: the spec's provisioner
(`warm_kernel.WarmSpareProvisioner`) reads the arguments and starts ipykernel in its own spares. A front end that
launches the argv "raw" runs this launcher, which:

- takes over a ready spare that fits (the same Python, environment and working directory; see spare.py) and then
  stands in for the kernel: it forwards SIGINT (the front end's interrupt), SIGTERM and SIGHUP to it, and exits with
  the kernel's exit code. If the front end kills the launcher, the kernel's process group is killed with it;
- or, with no spare ready, starts the kernel cold in a child process and stands in for it the same way (so that
  kernel too exits at once on the next restart, its interpreter's finalization left behind);
- either way first starts the next restart's spare, detached (no kernel's child: ipykernel terminates its children
  at shutdown, and a restart is a shutdown), JUPYTER_COMPILE_CACHE_SPARE_DELAY seconds later. It outlives this
  kernel by at most JUPYTER_COMPILE_CACHE_SPARE_LINGER seconds.

JUPYTER_COMPILE_CACHE_SPARE=0 in the kernel's environment makes the launcher become a plain ipykernel (`exec`, no
stand-in, no spare); so does Windows (no spares there: they need Unix sockets that carry file descriptors). This
module runs on every kernel start: it must stay light (no torch, no jupyter_client).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from types import FrameType
from typing import TYPE_CHECKING

from .spare import (
    process_alive,
    spare_delay,
    spare_dir,
    spare_info_path,
    spare_key,
    spares_enabled,
    take_failure,
)

if TYPE_CHECKING:
    import subprocess

KERNEL_MODULE = "ipykernel_launcher"
FORWARDED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
TAKE_OVER_TIMEOUT = 10.0  # seconds a spare has to answer; then the next one, or a cold start
COLD_START_TIMEOUT = 60.0  # seconds a cold kernel's process has to start Python and answer; then a plain exec


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


def main(argv: list[str] | None = None) -> int:
    forwarder = SignalForwarder()
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    directory = spare_dir() if spares_enabled(env) else None
    if directory is not None:
        key = spare_key(sys.executable, env, os.getcwd())
        failure = take_failure(directory, key)
        if failure is not None:  # to the front end's kernel log, where a kernel's own start-up errors go
            print(f"jupyter_compile_cache launcher: the last spare could not warm up ({failure})", file=sys.stderr)
        kernel = take_spare(directory, key, args) or start_cold_kernel(args)
        spare = start_spare(spare_delay(env))
        connection_file = _connection_file(args)
        if connection_file and spare is not None:
            with contextlib.suppress(OSError), open(spare_info_path(connection_file), "w", encoding="utf-8") as f:
                json.dump({"pid": spare}, f)
        if kernel is not None:
            conn, pid, process = kernel
            forwarder.forward_to(pid)
            return stand_in(conn, forwarder, process)
    forwarder.uninstall()
    for sig in forwarder.pending:  # arrived before the exec: as if sent to a kernel that had not started yet
        os.kill(os.getpid(), sig)
    command = [sys.executable, "-m", KERNEL_MODULE, *args]
    if os.name != "posix":  # no exec that keeps the pid there: run it as a child (no spares there either)
        import subprocess

        return subprocess.call(command)
    os.execv(sys.executable, command)
    return 0  # not reached


def take_spare(directory: str, key: str, args: list[str]) -> tuple[socket.socket, int, None] | None:
    """Hand this launcher's stdio and the kernel's arguments to a ready spare that fits; (connection, kernel pid,
    None: not our child), or None when none answers. Spares whose launcher is gone (left for a restart) go first."""
    candidates = []
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in names:
        path = os.path.join(directory, name)
        try:
            name_key, owner, spare = name.removesuffix(".sock").split("-")
            owner_alive, spare_alive = process_alive(int(owner)), process_alive(int(spare))
        except ValueError:
            continue
        if not spare_alive:  # killed without its cleanup: its file goes
            with contextlib.suppress(OSError):
                os.unlink(path)
        elif name_key == key:
            candidates.append((owner_alive, path))
    for _, path in sorted(candidates):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(TAKE_OVER_TIMEOUT)
            conn.connect(path)
            return conn, hand_over(conn, args), None
        except (OSError, ValueError, KeyError, TypeError):  # taken by another launcher, died, or not a spare
            conn.close()
    return None


def hand_over(conn: socket.socket, args: list[str]) -> int:
    """Send the kernel's command and our stdio to a spare; the pid of the kernel it becomes. Raises on no answer."""
    socket.send_fds(conn, [json.dumps({"module": KERNEL_MODULE, "args": args}).encode()], _stdio())
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = conn.recv(256)
        if not chunk:
            raise ConnectionError("the spare closed the connection")
        reply += chunk
    conn.settimeout(None)
    return int(json.loads(reply)["pid"])


def start_cold_kernel(args: list[str]) -> tuple[socket.socket, int, subprocess.Popen] | None:
    """No spare is ready: a kernel started cold in a child process, which this launcher stands in for as for a
    spare (so it exits as quickly at the next restart). (connection, pid, process), or None if it did not answer."""
    import subprocess

    ours, theirs = socket.socketpair()
    command = [sys.executable, "-m", "jupyter_compile_cache.kernels.spare", "--attached", str(theirs.fileno())]
    try:
        proc = subprocess.Popen(command, pass_fds=(theirs.fileno(),), start_new_session=True)
    except OSError:
        ours.close()
        return None
    finally:
        theirs.close()
    try:
        ours.settimeout(COLD_START_TIMEOUT)
        return ours, hand_over(ours, args), proc
    except (OSError, ValueError, KeyError, TypeError):
        ours.close()
        proc.kill()
        proc.wait()
        return None


def stand_in(conn: socket.socket, forwarder: SignalForwarder, child: subprocess.Popen | None = None) -> int:
    """Wait for the kernel's exit code on the connection; a kernel that ends without one was killed. The code comes
    once the kernel's exit handlers ran (its sockets are closed): its interpreter's finalization, a few tenths of a
    second more, is not waited for, as the provisioner does not wait for it (see spare.py)."""
    received = b""
    while not received.endswith(b"\n"):
        try:
            chunk = conn.recv(256)
        except OSError:
            chunk = b""
        if not chunk:
            break
        received += chunk
    word, _, code = received.decode(errors="replace").strip().partition(" ")
    if word == "exit" and code.lstrip("-").isdigit():
        return int(code)
    died_of = forwarder.termination  # the kernel died of the signal we passed on, or of what its exit says
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


def start_spare(delay: float) -> int | None:
    """Start the next restart's spare, detached: a double fork, its middle process exiting at once, so the spare is
    nobody's child and leads a session of its own. Its pid, or None if it could not start."""
    read_end, write_end = os.pipe()
    command = [sys.executable, "-m", "jupyter_compile_cache.kernels.spare", "--listen", str(os.getpid()), str(delay)]
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
            spare = os.fork()
            if spare == 0:
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.closerange(3, 65536)  # the front end's pipes and sockets stay with the front end
                os.execv(sys.executable, command)
            os.write(write_end, str(spare).encode())
        finally:
            os._exit(0)  # also the spare's, should its exec fail
    os.close(write_end)
    try:
        pid_text = os.read(read_end, 32)
    finally:
        os.close(read_end)
        os.waitpid(middle, 0)
    return int(pid_text) if pid_text else None


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
    raise SystemExit(main())
