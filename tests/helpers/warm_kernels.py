"""The warm kernel's real processes for tests: a raw front end that runs the spec's argv as VS Code does, and a
private runtime folder whose templates a test can wait for and end."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import threading
import time
import zipfile
from collections.abc import Callable

from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import LocalPortCache, write_connection_file

from jupyter_compile_cache.kernels.launcher import templates
from jupyter_compile_cache.kernels.protocol import Warming, start_record_path, warming_path
from jupyter_compile_cache.kernels.runtime_dir import process_alive
from jupyter_compile_cache.kernels.template_fit import TemplateInfo

# What a test compares between two kernels: everything of a process a user can look at from a cell.
OBSERVED = (
    "{'pid': os.getpid(), 'pgid': os.getpgid(0), 'env': dict(os.environ), 'cwd': os.getcwd(), 'argv': sys.argv,"
    " 'path': sys.path, 'umask': os.umask(os.umask(0)), 'nice': os.nice(0), 'flags': list(sys.flags),"
    " 'stdio': [(s.encoding, s.line_buffering) for s in (sys.__stdout__, sys.__stderr__)],"
    " 'threads': torch.get_num_threads(), 'interop': torch.get_num_interop_threads(),"
    " 'cuda': torch.cuda.is_initialized(), 'counters': {k: dict(v) for k, v in counters.items()},"
    " 'random': random.random(), 'numpy': float(numpy.random.rand()), 'torch_seed': torch.initial_seed(),"
    " 'torch_rand': torch.rand(1).item(), 'extension': 'jupyter_compile_cache' in sys.modules,"
    " 'compiler': 'torch._inductor.compile_fx' in sys.modules, 'user': 'state' in globals(),"
    " 'parent_handle': __import__('ipykernel.kernelapp').kernelapp.IPKernelApp.instance().parent_handle}"
)
# A cold kernel imports what the template imported before it is looked at: what imports do (sys.path entries
# setuptools adds) is no difference.
OBSERVE_IMPORTS = (
    "import os, sys, random, numpy, torch, torch._inductor.compile_fx, torch.utils.cpp_extension\n"
    "from torch._dynamo.utils import counters\n"
)


class RawFrontEnd:
    """What a raw front end does with a kernel spec's argv: a connection file with new ports, the argv run with the
    launch's environment, a plain client; a restart is a shutdown request, the process's exit and a new launch."""

    def __init__(self, argv: list[str], env: dict[str, str], folder: str) -> None:
        self.argv, self.env, self.folder = argv, env, folder
        self.launches = 0
        self.proc: subprocess.Popen | None = None
        self.client: BlockingKernelClient | None = None
        self._out: list[str] = []

    def launch(
        self, cwd: str | None = None, meanwhile: Callable[[], object] | None = None, **extra_env: str
    ) -> RawFrontEnd:
        """Run the argv and connect; `meanwhile` runs between the two (the client's heartbeat would take a launch
        that is held up on purpose for a dead kernel)."""
        self.launches += 1
        if self.client is not None:  # the last launch's client: stopped before a new one (zmq's context waits)
            self.client.stop_channels()
        self.connection_file = os.path.join(self.folder, f"kernel-{id(self)}-{self.launches}.json")
        new_connection_file(self.connection_file)
        argv = [a.replace("{connection_file}", self.connection_file) for a in self.argv]
        self.proc = subprocess.Popen(argv, env={**self.env, **extra_env}, cwd=cwd, stdin=subprocess.DEVNULL)
        if meanwhile is not None:
            meanwhile()
        self.client = BlockingKernelClient(connection_file=self.connection_file)
        self.client.load_connection_file()
        self.client.start_channels(hb=False)  # a cold start on a busy machine outlasts the heartbeat's 1 s
        self._wait_for_ready(timeout=120)
        return self

    def _wait_for_ready(self, timeout: float) -> None:
        """jupyter_client's wait, in steps: a launcher that exits before its kernel answers (a kernel that could
        not start) fails the launch at once, with its exit code, instead of after `timeout`."""
        assert self.client is not None and self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client.wait_for_ready(timeout=5)
                return
            except RuntimeError:
                code = self.proc.poll()
                if code is not None:
                    raise AssertionError(f"the launcher exited ({code}) before its kernel answered") from None
                if time.monotonic() > deadline:
                    raise

    def start_record(self) -> dict:
        with open(start_record_path(self.connection_file)) as f:
            return json.load(f)

    def run(self, code: str, timeout: float = 120) -> str:
        """A cell's printed and displayed text; the cell must succeed."""
        assert self.client is not None
        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=self._hook)
        assert reply["content"]["status"] == "ok", (reply["content"], self._out)
        text = "".join(self._out)
        self._out.clear()
        return text

    def value(self, expression: str, setup: str = "") -> object:
        out = self.run(f"{setup}print('VALUE=' + repr({expression}))")
        return eval(out.split("VALUE=")[-1])  # noqa: S307  (our own repr)

    def observe(self) -> dict:
        return self.value(OBSERVED, OBSERVE_IMPORTS)  # type: ignore[return-value]

    def _hook(self, msg: dict) -> None:
        if msg["msg_type"] == "stream":
            self._out.append(msg["content"]["text"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            self._out.append(msg["content"]["data"].get("text/plain", ""))

    def kernel_pid(self) -> int:
        return self.value("__import__('os').getpid()")  # type: ignore[return-value]

    def shutdown(self, restart: bool = False) -> int:
        """Ask the kernel to stop, kill the launched process if it lingers (as front ends do); its exit code."""
        assert self.client is not None and self.proc is not None
        self.client.shutdown(restart=restart)
        try:
            code = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self.client.stop_channels()
        return code

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.client is not None:
            self.client.stop_channels()


_PORTS = threading.Lock()


def new_connection_file(path: str) -> None:
    """A connection file with ports no other launch of this process was given, as a Jupyter server gives its
    kernels (jupyter_client's LocalPortCache): `write_connection_file` alone draws free ports and frees them again,
    so front ends launching at once could draw the same one, and one kernel could not bind it (jupyter_client#487)."""
    with _PORTS:
        cache = LocalPortCache.instance()
        names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
        ports = {name: cache.find_available_port("127.0.0.1") for name in names}
    write_connection_file(path, ip="127.0.0.1", **ports)


def wait_for_template(directory: str, timeout: float = 180, exclude: tuple[int, ...] = ()) -> TemplateInfo:
    """The first ready template in the folder not in `exclude`, once it listens."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for info in templates(directory):
            if info.pid not in exclude:
                return info
        time.sleep(0.2)
    raise AssertionError(f"no template got ready in {directory}: {os.listdir(directory)}")


def end_templates(directory: str) -> None:
    """SIGTERM every template of the folder, ready or warming, and wait for them."""
    pids = [info.pid for info in templates(directory)]
    for path in glob.glob(warming_path(directory, "*")):
        warming = Warming.read(path)
        if warming is not None:
            pids.append(warming.pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.time() + 20
    while any(process_alive(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.1)


def tiny_wheel(folder: str, name: str = "jcc_upgrade_probe", version: str = "1.0") -> str:
    """A real wheel of an empty package, as pip installs it (no build step)."""
    dist = f"{name}-{version}.dist-info"
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    files = {
        f"{name}/__init__.py": "",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as whl:
        for p, text in {**files, f"{dist}/RECORD": record}.items():
            whl.writestr(p, text)
    return path
