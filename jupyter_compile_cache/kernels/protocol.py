"""The warm kernel's protocol: what a launcher, a template and a kernel process say to each other, the modules
each one runs, and the files templates keep in this user's runtime folder (runtime_dir.py).

A launch, over a Unix socket (a template's) or a socket pair (a cold kernel process's):

1. the launcher sends one `KernelRequest` (its length, then its JSON) with its stdin, stdout and stderr as file
   descriptors;
2. the other side answers one JSON line: `{"pid": N}` (N is the kernel), or `{"refused": PROBLEM}` (a
   `TemplateProblem`'s JSON);
3. the connection stays open while the kernel runs; its last line says how the kernel ended: `exit CODE` (said by
   the kernel once its exit handlers ran, or by its template after an `os._exit`) or `signal N` (its template saw
   it killed).

The runtime folder: each ready template has `<name>.json` (a `TemplateInfo`: what it fits) and `<name>.sock` (where
it listens); each launch key (one environment) may have `<key>.warming` (a `Warming`: the template warming up),
`<key>.failed` (why the last warm-up failed) and `<key>.retired` (why the last template went: a `TemplateProblem`'s
JSON); each installation (an install stamp) may have `<stamp>.headers`, the header checks its kernels made
(header_calls.py).

Only the standard library here: the launcher imports this module on every kernel start.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..failure import Failure

# The modules each process runs as `python -m MODULE`.
_PACKAGE = __name__.rpartition(".")[0]
LAUNCHER_MODULE = f"{_PACKAGE}.launcher"  # the kernel spec's argv (warm_kernel.py)
TEMPLATE_MODULE = f"{_PACKAGE}.template"  # HOLDER_PID LAUNCH_KEY
KERNEL_PROCESS_MODULE = f"{_PACKAGE}.kernel_process"  # FD: its end of a socket pair
KERNEL_MODULE = "ipykernel_launcher"  # what each of them becomes, as a plain kernel spec runs it

HEADER = struct.Struct("!I")  # the request's length, ahead of its JSON
ANSWER_LIMIT = 4096  # bytes an answer line may take: a peer that never ends its line is not a template


class TemplateTrouble(str, enum.Enum):
    """Why a template does not fork a launch, or why it retired (`TemplateProblem.detail` says more where noted)."""

    OTHER_PYTHON = "other_python"  # the launch runs another Python (detail: the template's)
    PACKAGES_CHANGED = "packages_changed"  # installed packages changed since the template started
    VARIABLE_DIFFERS = "variable_differs"  # an environment variable the template read differs (detail: its name)
    THREAD_RUNNING = "thread_running"  # a thread is running in the template
    THREADS_AFTER_IMPORT = "threads_after_import"  # threads started after torch's import (detail: which)
    CUDA_INITIALIZED = "cuda_initialized"  # CUDA was initialised in the template
    SHADOWED = "shadowed"  # a file in the kernel's folder would shadow a module the template imported (detail)
    FORK_FAILED = "fork_failed"  # detail: the error
    IDLE = "idle"  # no fork for the idle time
    HOLDERS_GONE = "holders_gone"  # the processes that launched kernels from it are gone
    FILE_REMOVED = "file_removed"  # its file in the runtime folder was removed


FIT_TROUBLES = frozenset(
    {TemplateTrouble.OTHER_PYTHON, TemplateTrouble.PACKAGES_CHANGED, TemplateTrouble.VARIABLE_DIFFERS}
)


@dataclass(frozen=True)
class TemplateProblem:
    """One trouble of a template, as it crosses the socket and the retired file; the front ends word it."""

    trouble: TemplateTrouble
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"trouble": self.trouble.value, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Any) -> TemplateProblem | None:
        """The problem DATA holds, or None where it holds none this version knows."""
        try:
            return cls(TemplateTrouble(data["trouble"]), str(data.get("detail", "")))
        except (TypeError, KeyError, ValueError, AttributeError):
            return None


@dataclass
class KernelRequest:
    """What a launcher asks for: the kernel's arguments and everything of its own process a kernel inherits."""

    args: list[str]
    env: dict[str, str]
    cwd: str
    umask: int
    nice: int
    holder: int  # the launcher's parent (the front end or server): a template lives as long as one of them
    started: float  # time.time() when the launcher started

    @classmethod
    def here(cls, args: list[str], started: float) -> KernelRequest:
        umask = os.umask(0)
        os.umask(umask)
        nice = os.nice(0) if hasattr(os, "nice") else 0
        return cls(list(args), dict(os.environ), os.getcwd(), umask, nice, os.getppid(), started)

    def encode(self) -> bytes:
        body = json.dumps(vars(self)).encode()
        return HEADER.pack(len(body)) + body

    @classmethod
    def decode(cls, body: bytes) -> KernelRequest:
        data = json.loads(body)
        request = cls(**{k: data[k] for k in cls.__dataclass_fields__})
        if not all(isinstance(a, str) for a in request.args) or not isinstance(request.env, dict):
            raise ValueError("malformed request")
        return request


def send_request(conn: socket.socket, request: KernelRequest, stdio: list[int]) -> None:
    """The launcher's side of step 1."""
    data = request.encode()
    sent = socket.send_fds(conn, [data[:32768]], stdio)
    conn.sendall(data[sent:])


def receive_request(conn: socket.socket) -> tuple[KernelRequest, list[int]] | None:
    """One launcher's request and its three standard streams; None for anything else (its descriptors closed).
    Only a process of this user is answered (Linux tells the peer's uid)."""
    fds: list[int] = []
    try:
        if hasattr(socket, "SO_PEERCRED"):
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)  # struct ucred: pid, uid, gid
            if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
                return None
        conn.settimeout(10)
        data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack(data[: HEADER.size])[0]:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("the launcher went away")
            data += chunk
        request = KernelRequest.decode(data[HEADER.size :])
        if len(fds) != 3:
            raise ValueError("no standard streams")
        return request, fds
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        return None


def answer(conn: socket.socket, message: dict[str, Any]) -> None:
    """Step 2: `{"pid": N}` or `{"refused": PROBLEM}`."""
    conn.sendall(json.dumps(message).encode() + b"\n")


def read_answer(conn: socket.socket) -> dict[str, Any]:
    """Step 2, the launcher's side. Reads byte-wise up to the newline: what follows on the connection (how the
    kernel ended) is read later by `read_ending`."""
    line = b""
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            raise ConnectionError("closed without an answer")
        line += byte
        if len(line) > ANSWER_LIMIT:
            raise ValueError("not an answer")
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("not an answer")
    return message


def exit_line(code: int) -> bytes:
    """Step 3: the kernel's exit code (as `sys.exit` gave it)."""
    return f"exit {code}\n".encode()


def signal_line(signum: int) -> bytes:
    """Step 3: the signal that killed the kernel (only its parent, the template, can tell)."""
    return f"signal {signum}\n".encode()


@dataclass(frozen=True)
class Ending:
    """How the kernel ended, as its last line said: an exit code, a signal, or neither (the line never came)."""

    code: int | None = None
    signal: int | None = None


def read_ending(conn: socket.socket) -> Ending:
    """Step 3, the launcher's side: waits for the last line (or for the connection to close without one)."""
    conn.settimeout(None)
    received = b""
    while not received.endswith(b"\n"):
        try:
            chunk = conn.recv(256)
        except OSError:
            chunk = b""
        if not chunk:
            break
        received += chunk
    word, _, number = received.decode(errors="replace").strip().partition(" ")
    if word == "exit" and number.lstrip("-").isdigit():
        return Ending(code=int(number))
    if word == "signal" and number.isdigit():
        return Ending(signal=int(number))
    return Ending()


# -- the runtime folder ---------------------------------------------------------------------------------------------
INFO_SUFFIX, SOCKET_SUFFIX = ".json", ".sock"


def template_name(launch_key: str, pid: int) -> str:
    return f"{launch_key}-{pid}"


def info_path(directory: str, name: str) -> str:
    """A ready template's `TemplateInfo`; the launcher lists these (`is_info_file`)."""
    return os.path.join(directory, name + INFO_SUFFIX)


def socket_path(directory: str, name: str) -> str:
    return os.path.join(directory, name + SOCKET_SUFFIX)


def is_info_file(filename: str) -> bool:
    return filename.endswith(INFO_SUFFIX)


def warming_path(directory: str, launch_key: str) -> str:
    """Holds the template warming up for this key (a `Warming`): no second one is started meanwhile."""
    return os.path.join(directory, launch_key + WARMING_SUFFIX)


WARMING_SUFFIX = ".warming"


class WarmingStep(str, enum.Enum):
    """Where a template warming up is."""

    QUIET = "quiet"  # waiting for a quiet machine (at most `Warming.quiet_wait` seconds), so as not to slow the kernel
    IMPORTING = "importing"  # importing torch and its compiler, on idle CPU time
    IMPORTING_BUSY = "importing_busy"  # the same at a low priority: the machine stayed busy through the wait


@dataclass
class Warming:
    """A template warming up: its pid, since when (time.time()), its step, and how long it waits for a quiet
    machine at most."""

    pid: int
    since: float = 0.0
    step: WarmingStep = WarmingStep.QUIET
    quiet_wait: float = 0.0

    def write(self, path: str) -> None:
        """Into PATH whole (a reader never sees half of it)."""
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"pid": self.pid, "since": self.since, "step": self.step.value, "quiet_wait": self.quiet_wait}, f)
        os.replace(path + ".tmp", path)

    @classmethod
    def read(cls, path: str) -> Warming | None:
        """What PATH holds (a bare pid, as an older template wrote it, too); None if it holds nothing readable."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.loads(f.read())
            if isinstance(data, int):
                return cls(data)
            return cls(int(data["pid"]), float(data["since"]), WarmingStep(data["step"]), float(data["quiet_wait"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def failure_path(directory: str, launch_key: str) -> str:
    """Why the last warm-up for this key failed: launches start cold and say so, until it is old enough to retry."""
    return os.path.join(directory, f"{launch_key}.failed")


def write_failure(directory: str, launch_key: str, failure: Failure) -> None:
    with contextlib.suppress(OSError), open(failure_path(directory, launch_key), "w", encoding="utf-8") as f:
        json.dump(failure.to_json(), f)


def read_failure(directory: str, launch_key: str, retry_after: float) -> Failure | None:
    """Why the last warm-up for this key failed, unless that is RETRY_AFTER seconds old (the file is then removed)."""
    path = failure_path(directory, launch_key)
    try:
        if time.time() - os.stat(path).st_mtime >= retry_after:
            os.unlink(path)
            return None
        with open(path, encoding="utf-8") as f:
            written = f.read()
    except OSError:
        return None
    with contextlib.suppress(ValueError):  # an older template wrote the text alone
        return Failure.from_json(json.loads(written))
    return Failure.from_json(written)


def retired_path(directory: str, launch_key: str) -> str:
    """Why the last template for this key retired: the next launch that starts cold says it once."""
    return os.path.join(directory, f"{launch_key}.retired")


def start_record_path(connection_file: str) -> str:
    """How the kernel of this connection file started (kernel_start.py), written by its launcher beside it."""
    return os.path.splitext(connection_file)[0] + "-start.json"


def header_calls_path(directory: str, stamp: str) -> str:
    """The header checks kernels of this installation made, for its templates to make before they fork."""
    return os.path.join(directory, f"{stamp}.headers")
