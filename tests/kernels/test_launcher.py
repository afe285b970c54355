"""The launcher, launched as a raw front end (VS Code) launches a kernel: the installed spec's argv run with a
connection file, a plain `BlockingKernelClient` connected to it, a restart as shutdown and kill plus a new launch.
Real processes throughout. Checked: a restart takes over the spare and is a fresh kernel; interrupt, termination and
exit codes pass through the launcher (to a spare's kernel and to a cold one); a killed launcher takes its kernel
with it; a spare that is not ready or does not fit means a cold start; spares turned off start none; a spare left
with no taker goes away."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers.kernels import process_gone
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.connect import write_connection_file

from jupyter_compile_cache.frontends import cli
from jupyter_compile_cache.kernels.spare import spare_dir, spare_key, take_failure

pytestmark = pytest.mark.slow


class RawFrontEnd:
    """What a raw front end does with a kernel spec: a connection file, the argv with its env, a client."""

    def __init__(self, argv: list[str], env: dict[str, str], tmp_path) -> None:
        self.argv, self.env, self.tmp_path = argv, env, tmp_path
        self.launches = 0
        self.proc: subprocess.Popen | None = None
        self.client: BlockingKernelClient | None = None

    def launch(self, **extra_env: str) -> None:
        self.launches += 1
        self.connection_file = str(self.tmp_path / f"kernel-{self.launches}.json")
        write_connection_file(self.connection_file)  # new ports on each launch, as VS Code picks them
        argv = [a.replace("{connection_file}", self.connection_file) for a in self.argv]
        self.proc = subprocess.Popen(argv, env={**self.env, **extra_env}, stdin=subprocess.PIPE)
        self.client = BlockingKernelClient(connection_file=self.connection_file)
        self.client.load_connection_file()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def value(self, expression: str, timeout: float = 60):
        reply = self.client.execute_interactive(f"print(repr({expression}))", timeout=timeout, output_hook=self._hook)
        assert reply["content"]["status"] == "ok", reply["content"]
        return eval(self._out.pop())  # noqa: S307  (our own repr)

    def run(self, code: str, timeout: float = 120) -> str:
        """A cell's printed and displayed text."""
        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=self._hook)
        assert reply["content"]["status"] == "ok", reply["content"]
        text = "".join(self._out)
        self._out.clear()
        return text

    _out: list[str] = []

    def _hook(self, msg: dict) -> None:
        if msg["msg_type"] == "stream":
            self._out.append(msg["content"]["text"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            self._out.append(msg["content"]["data"].get("text/plain", ""))

    def kernel_pid(self) -> int:
        return self.value("__import__('os').getpid()")

    def shutdown(self, restart: bool = False) -> int:
        """Ask the kernel to stop, kill the launched process if it lingers (as front ends do); its exit code."""
        self.client.shutdown(restart=restart)
        try:
            code = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        self.client.stop_channels()
        return code

    def restart(self, **extra_env: str) -> None:
        self.shutdown(restart=True)
        self.launch(**extra_env)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.client is not None:
            self.client.stop_channels()


@pytest.fixture
def front_end(tmp_path):
    """The spec installed by the CLI, launched raw; each test's spares are its own (a working directory of its own
    is part of what a spare fits), and none may be left when it ends."""
    prefix = tmp_path / "prefix"
    assert cli.main(["install-kernel", "--prefix", str(prefix)]) == 0
    with open(prefix / "share" / "jupyter" / "kernels" / "python3-compile-cache" / "kernel.json") as f:
        argv = json.load(f)["argv"]
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PWD": str(work),
        "JUPYTER_COMPILE_CACHE_SPARE_DELAY": "0",
        "JUPYTER_COMPILE_CACHE_SPARE_LINGER": "60",
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    cwd = os.getcwd()
    os.chdir(work)  # the launcher runs where the front end is, as VS Code runs it in the notebook's folder
    started: list[RawFrontEnd] = []

    def make(**extra_env: str) -> RawFrontEnd:
        fe = RawFrontEnd(argv, {**env, **extra_env}, tmp_path)
        started.append(fe)
        return fe

    try:
        yield make
    finally:
        os.chdir(cwd)
        for fe in started:
            fe.close()
        for pid in _spares_in(str(work)):
            psutil.Process(pid).kill()


def _spares_in(cwd: str) -> list[int]:
    """Listening spares of this user started in `cwd` (alive, not yet a kernel)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or ())
            if "jupyter_compile_cache.kernels.spare --listen" in cmdline and process.cwd() == cwd:
                if process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process.pid)
        except psutil.Error:
            continue
    return found


def _ready_spare(owner: int, timeout: float = 120) -> int:
    """The pid of the spare that `owner` started, once it listens."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for path in glob.glob(os.path.join(spare_dir(), f"*-{owner}-*.sock")):
            return int(path.rsplit("-", 1)[1].split(".")[0])
        time.sleep(0.1)
    raise AssertionError(f"no spare of {owner} got ready")


def _cold(fe: RawFrontEnd) -> bool:
    """The kernel was started cold, in a child of the launcher (a spare's kernel is nobody's child)."""
    kernel = fe.kernel_pid()
    return kernel != fe.proc.pid and psutil.Process(kernel).ppid() == fe.proc.pid


def test_the_installed_spec_launches_the_launcher_and_keeps_the_provisioner(tmp_path):
    assert cli.main(["install-kernel", "--prefix", str(tmp_path)]) == 0
    with open(tmp_path / "share" / "jupyter" / "kernels" / "python3-compile-cache" / "kernel.json") as f:
        spec = json.load(f)
    assert spec["argv"] == [sys.executable, "-m", "jupyter_compile_cache.kernels.launcher", "-f", "{connection_file}"]
    assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "compile-cache-warm"


def test_a_raw_restart_takes_over_the_spare_and_signals_pass_through(front_end, tmp_path):
    fe = front_end(MY_SETTING="launch-env")
    fe.launch()
    first = fe.proc.pid
    assert _cold(fe)  # no spare yet
    fe.value("exec('import torch; state = 41')")
    spare = _ready_spare(first)
    assert _spares_in(os.getcwd()) == [spare]  # one spare per kernel

    assert fe.shutdown(restart=True) == 0
    fe.launch()
    assert fe.proc.pid != spare and fe.kernel_pid() == spare  # the spare became the kernel; the launcher stands in
    seen = fe.value(
        "{'env': __import__('os').environ.get('MY_SETTING'), 'cwd': __import__('os').getcwd(),"
        " 'parent_pid_env': 'JPY_PARENT_PID' in __import__('os').environ,"
        " 'state': 'state' in globals(), 'extension': 'jupyter_compile_cache' in __import__('sys').modules,"
        " 'torch_ready': 'torch._inductor.compile_fx' in __import__('sys').modules,"
        " 'spare_file': __import__('json').load(open(__import__('ipykernel.connect').connect.get_connection_file()"
        "[:-5] + '-spare.json'))['pid']}"
    )
    next_spare = _ready_spare(fe.proc.pid)
    assert seen == {
        "env": "launch-env",
        "cwd": os.getcwd(),
        "parent_pid_env": False,
        "state": False,  # a fresh kernel
        "extension": False,
        "torch_ready": True,  # what the spare is for
        "spare_file": next_spare,  # what `%compile_cache status` shows
    }
    assert [pid for pid in _spares_in(os.getcwd()) if pid != spare] == [next_spare]  # spare: the kernel now
    assert f"warm spare: pid {next_spare}" in fe.run("%load_ext jupyter_compile_cache\n%compile_cache status")

    # The front end's interrupt goes to the process it launched: the launcher passes it on.
    fe.client.execute("import time; time.sleep(60)")
    time.sleep(1)
    started = time.time()
    fe.proc.send_signal(signal.SIGINT)
    reply = fe.client.get_shell_msg(timeout=20)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    assert time.time() - started < 10 and fe.value("1 + 1") == 2

    # Termination too, and the launcher ends as the kernel did.
    fe.proc.send_signal(signal.SIGTERM)
    assert fe.proc.wait(20) == -signal.SIGTERM
    assert process_gone(spare)

    # The front end kills the launcher outright: the kernel goes with it, no orphan.
    fe.launch()
    assert fe.kernel_pid() == next_spare
    fe.proc.kill()
    fe.proc.wait(10)
    assert process_gone(next_spare)


def test_a_raw_launch_starts_cold_when_the_spare_is_not_ready_does_not_fit_or_is_off(front_end):
    late = front_end(JUPYTER_COMPILE_CACHE_SPARE_DELAY="600", JUPYTER_COMPILE_CACHE_SPARE_LINGER="1")
    late.launch()
    assert _cold(late)
    waiting = _spares_in(os.getcwd())
    assert len(waiting) == 1  # started, still in its delay: not ready
    assert late.shutdown(restart=True) == 0
    late.launch()
    assert _cold(late) and late.value("1 + 1") == 2  # not ready: a cold start, a working kernel
    os.kill(late.kernel_pid(), signal.SIGKILL)  # a kernel that dies: the launcher ends as it did
    assert late.proc.wait(20) == -signal.SIGKILL

    fe = front_end(JUPYTER_COMPILE_CACHE_SPARE_LINGER="1")
    fe.launch()
    spare = _ready_spare(fe.proc.pid)
    assert fe.shutdown(restart=True) == 0
    fe.launch(MY_SETTING="changed")  # the new launch's environment differs from the spare's
    assert _cold(fe) and fe.value("__import__('os').environ['MY_SETTING']") == "changed"
    assert process_gone(spare, timeout=15)  # its launcher is gone and nobody took it within the linger: it exits
    assert fe.shutdown() == 0

    off = front_end(JUPYTER_COMPILE_CACHE_SPARE="0")
    off.launch()
    assert off.kernel_pid() == off.proc.pid and off.value("1 + 1") == 2  # the launcher became ipykernel (exec)
    assert off.shutdown() == 0
    time.sleep(1)
    assert [pid for pid in _spares_in(os.getcwd()) if not process_gone(pid, timeout=20)] == []


def test_a_spare_that_cannot_warm_up_leaves_its_reason_for_the_next_launch_once(tmp_path):
    """A notebook folder with a module that shadows one a kernel imports (here sqlite3, for IPython's history):
    the detached spare's warm-up fails where nobody sees its stderr, so the next launch tells why."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "sqlite3.py").write_text("raise ImportError('a sqlite3.py of the notebook folder')\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    spare = subprocess.run(
        [sys.executable, "-m", "jupyter_compile_cache.kernels.spare", "--listen", str(os.getpid()), "0"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert spare.returncode == 1
    directory = os.path.join(str(tmp_path), f"jupyter_compile_cache-spares-{os.getuid()}")
    key = spare_key(sys.executable, env, str(work))
    assert take_failure(directory, key) == "ImportError: a sqlite3.py of the notebook folder"
    assert take_failure(directory, key) is None  # told once
    assert not [name for name in os.listdir(directory) if name.endswith(".sock")]  # it never listened
