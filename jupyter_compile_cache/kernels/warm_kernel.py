"""A kernel that restarts warm: each restart takes over a spare process that has torch's compiler stack imported.

Install the kernel spec once, then pick "Python 3 (compile cache, warm restart)" in JupyterLab, Notebook 7 or VS
Code::

    python -m jupyter_compile_cache install-kernel [--name NAME] [--display-name TEXT]
        [--user | --sys-prefix | --prefix DIR]

The spec names a kernel provisioner (`WarmSpareProvisioner`, entry point `compile-cache-warm`), which front ends
that start kernels through jupyter_client use; its argv, `python -m jupyter_compile_cache.kernels.launcher`, is for
front ends that run the argv themselves and ignore provisioners (VS Code): see launcher.py. The provisioner reads the
argv as `python -m ipykernel_launcher ARGS`, the default kernel's command. After it starts a kernel, the
provisioner starts one spare process (`spare.py`) with the kernel's Python, environment and working directory;
the spare imports torch, torch's compiler and ipykernel and probes the CPU, and never touches CUDA.
When the kernel is restarted, the spare becomes the new kernel process: a fresh kernel (new process, no variables,
no CUDA context, the extension not loaded), only without the seconds of imports. A spare that is not ready yet,
was started with another environment or working directory, or died means a cold start, never a broken kernel.

The old kernel's exit is the other half of a restart: after torch.compile, its interpreter takes 1-3 s to
finalize once everything a user can see has ended (its exit handlers, the user's included, and its sockets). The
new kernel does not wait for that part; the old process finishes it alongside (spare.py says when it starts).

Cost: one spare per kernel, idle, holding what torch's import holds (about 0.5-1 GB resident; `%compile_cache
status` shows it). It dies with its kernel: on shutdown, and when the process holding the kernel (the Jupyter
server) goes away, since it exits when its stdin closes. It starts JUPYTER_COMPILE_CACHE_SPARE_DELAY seconds
(default 3) after its kernel, so the kernel's first cells have the CPU to themselves. Set
JUPYTER_COMPILE_CACHE_SPARE=0 in the kernel's environment (or pick the plain kernel) to turn spares off.

This module runs inside the Jupyter server: it must not import torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from .spare import KERNEL_MODULES, spare_delay, spare_info_path, spares_enabled

PROVISIONER_NAME = "compile-cache-warm"
DEFAULT_KERNEL_NAME = "python3-compile-cache"
DEFAULT_DISPLAY_NAME = "Python 3 (compile cache, warm restart)"
LAUNCHER_MODULE = "jupyter_compile_cache.kernels.launcher"  # the spec's argv, for front ends that launch it raw


class Spare:
    """One spare process and its pipes: "ready" comes back on one, the takeover goes out on its stdin, and "done"
    comes back on the last once the kernel it became has run its exit handlers (see spare.py)."""

    def __init__(self, python: str, env: dict[str, str], cwd: str, cold: bool = False) -> None:
        self.python, self.env, self.cwd = python, dict(env), cwd
        ready_read, ready_write = os.pipe()
        done_read, done_write = os.pipe()
        command = [python, "-m", "jupyter_compile_cache.kernels.spare", str(ready_write), str(done_write)]
        try:
            self.proc = subprocess.Popen(
                command + (["--cold"] if cold else []),
                stdin=subprocess.PIPE,
                env=self.env,
                cwd=cwd,
                start_new_session=True,  # its own process group, as jupyter_client gives a kernel
                pass_fds=(ready_write, done_write),
            )
        except BaseException:
            os.close(ready_read)
            os.close(done_read)
            raise
        finally:
            os.close(ready_write)
            os.close(done_write)
        self._ready_read: int | None = ready_read
        self.done_read: int | None = done_read
        self._ready = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ready(self, timeout: float = 0) -> bool:
        """Warmed up and waiting (waits at most `timeout` seconds)."""
        if not self._ready and self._ready_read is not None and self.proc.poll() is None:
            self._ready = _read_word(self._ready_read, timeout) == b"ready"
        return self._ready and self.proc.poll() is None

    def fits(self, python: str, env: dict[str, str], cwd: str) -> bool:
        return (python, env, os.path.abspath(cwd)) == (self.python, self.env, os.path.abspath(self.cwd))

    def take_over(self, module: str, args: list[str]) -> subprocess.Popen:
        """Make the spare run `python -m module args`; returns its process, now the kernel's."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"module": module, "args": args}).encode() + b"\n")
        self.proc.stdin.close()  # as jupyter_client does for a kernel; also the spare's one message
        self._close_ready()
        return self.proc

    def kill(self) -> None:
        if self.done_read is not None:
            os.close(self.done_read)
            self.done_read = None
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self._close_ready()

    def _close_ready(self) -> None:
        if self._ready_read is not None:
            os.close(self._ready_read)
            self._ready_read = None


def _read_word(fd: int, timeout: float = 0) -> bytes | None:
    """The word the spare wrote on a pipe ("ready", "done"); b"" once it closed the pipe; None if nothing yet."""
    readable, _, _ = select.select([fd], [], [], timeout)
    return os.read(fd, 16).strip() if readable else None


def kernel_module(cmd: list[str]) -> tuple[str, str, list[str]] | None:
    """(python, module, args) for `python -m ipykernel_launcher ARGS`, the command a spare can take over. The
    launcher's command (our spec's argv) means the same kernel: here the provisioner does the launcher's job."""
    if len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] in (*KERNEL_MODULES, LAUNCHER_MODULE):
        return cmd[0], cmd[2] if cmd[2] != LAUNCHER_MODULE else KERNEL_MODULES[0], list(cmd[3:])
    return None


class WarmSpareProvisioner(LocalProvisioner):
    """LocalProvisioner whose kernels run in spare processes: the first one cold, each restart a warm one started
    after the previous launch. Whatever goes wrong with a spare, the kernel starts the plain way."""

    spare: Spare | None = None
    _done_read: int | None = None  # the running kernel's "done" pipe (kernels started through a spare)
    _finished = False  # that kernel said "done": only its interpreter's finalization is left
    _pending: threading.Timer | None = None  # the next spare's start

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lock = threading.Lock()  # the timer thread and the launching thread both set `spare`

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        env = dict(kwargs.get("env") or os.environ)
        env["JPY_PARENT_PID"] = str(os.getpid())  # what jupyter_client's launcher sets for a kernel
        cwd = str(kwargs.get("cwd") or os.getcwd())
        target = kernel_module(cmd)
        enabled = target is not None and spares_enabled(env)
        self._cancel_pending()
        with self._lock:
            spare, self.spare = self.spare, None
        if spare is not None and not (target is not None and spare.ready() and spare.fits(target[0], env, cwd)):
            self.log.info("kernel %s: the spare is not ready or was started elsewhere; cold start", self.kernel_id)
            spare.kill()
            spare = None
        if spare is None and enabled:
            assert target is not None
            spare = self._cold_spare(target[0], env, cwd)
        self._close_done()  # the previous kernel's, if it ended without our wait()
        self._finished = False
        if not (spare is not None and target is not None and self._take_over(spare, target, cwd)):
            if target is not None:  # ipykernel itself, not the launcher: its spares are for raw front ends
                cmd = [target[0], "-m", target[1], *target[2]]
            await super().launch_kernel(cmd, **kwargs)
        self._write_spare_info()
        if enabled:
            assert target is not None
            # The next restart's spare, once the kernel has started and its first cells had the CPU to themselves.
            # A timer thread: a synchronous KernelManager runs no event loop between calls.
            self._cancel_pending()
            timer = threading.Timer(spare_delay(env), self._start_spare, (target[0], env, cwd))
            timer.daemon = True
            with self._lock:
                self._pending = timer
            timer.start()
        return self.connection_info

    def _start_spare(self, python: str, env: dict[str, str], cwd: str) -> None:
        with self._lock:
            if self._pending is None or self.spare is not None or self.process is None:
                return  # cancelled, or the kernel went meanwhile
            self._pending = None
            try:
                self.spare = Spare(python, env, cwd)
            except OSError as exc:
                self.log.warning("kernel %s: no spare (%s)", self.kernel_id, exc)
            self._write_spare_info()

    def _cancel_pending(self) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending.cancel()
                self._pending = None

    def _cold_spare(self, python: str, env: dict[str, str], cwd: str) -> Spare | None:
        """A spare that skips the warm-up: the kernel then has the "done" pipe too (see poll)."""
        try:
            spare = Spare(python, env, cwd, cold=True)
        except OSError:
            return None
        if spare.ready(timeout=30):
            return spare
        spare.kill()
        return None

    def _take_over(self, spare: Spare, target: tuple[str, str, list[str]], cwd: str) -> bool:
        try:
            self.process = spare.take_over(target[1], target[2])
        except OSError as exc:  # it died just now: start the plain way
            self.log.warning("kernel %s: the spare could not take over (%s)", self.kernel_id, exc)
            spare.kill()
            return False
        self.pid, self.cwd = self.process.pid, cwd
        self.pgid = os.getpgid(self.pid)
        self._done_read, spare.done_read = spare.done_read, None
        self.log.info("kernel %s: started in a spare process (pid %s)", self.kernel_id, self.pid)
        return True

    def _kernel_finished(self) -> bool:
        """The kernel ran its exit handlers (its sockets are closed) and only finalizes: it counts as gone."""
        if not self._finished and self._done_read is not None:
            word = _read_word(self._done_read)
            self._finished = word == b"done"
            if word == b"":  # end of file: it exited without finishing; poll() sees the exit
                self._close_done()
        return self._finished

    def _close_done(self) -> None:
        if self._done_read is not None:
            os.close(self._done_read)
            self._done_read = None

    async def poll(self) -> int | None:
        ret = await super().poll()
        if ret is None and self._kernel_finished():
            return 0
        return ret

    async def wait(self) -> int | None:
        process = self.process
        if process is not None and self._kernel_finished() and process.poll() is None:
            # Its interpreter's finalization (seconds after torch.compile) goes on without us: the next kernel
            # starts now, and a thread reaps this one when it ends.
            threading.Thread(target=process.wait, name="jupyter_compile_cache-reap", daemon=True).start()
            self.process = None
            self._close_done()
            return 0
        ret = await super().wait()
        self._close_done()
        return ret

    async def cleanup(self, restart: bool = False) -> None:
        # Not in kill(): jupyter_client kills with restart=False during a forced restart too.
        await super().cleanup(restart=restart)
        if not restart:
            self._drop_spare()

    def _drop_spare(self) -> None:
        self._cancel_pending()
        with self._lock:
            spare, self.spare = self.spare, None
        if spare is not None:
            spare.kill()
        with contextlib.suppress(OSError, TypeError):
            os.unlink(spare_info_path(self._connection_file()))

    def _connection_file(self) -> str:
        return str(getattr(self.parent, "connection_file", "") or "")

    def _write_spare_info(self) -> None:
        """Where the kernel finds its spare, for `%compile_cache status`: next to its connection file."""
        connection_file = self._connection_file()
        if not connection_file:
            return
        path = spare_info_path(connection_file)
        with contextlib.suppress(OSError):
            if self.spare is None:
                os.unlink(path)
            else:
                with open(path, "w", encoding="utf-8") as f:
                    json.dump({"pid": self.spare.pid}, f)


def install_kernel_spec(
    name: str = DEFAULT_KERNEL_NAME,
    display_name: str = DEFAULT_DISPLAY_NAME,
    user: bool = False,
    prefix: str | None = None,
) -> str:
    """Write the kernel spec (this Python, ipykernel, our provisioner); returns the directory it went to."""
    import tempfile

    from jupyter_client.kernelspec import KernelSpecManager

    spec = {
        "argv": [sys.executable, "-m", LAUNCHER_MODULE, "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "metadata": {"debugger": True, "kernel_provisioner": {"provisioner_name": PROVISIONER_NAME}},
    }
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=1)
        return KernelSpecManager().install_kernel_spec(tmp, kernel_name=name, user=user, prefix=prefix)
