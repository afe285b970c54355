"""The warm-restart kernel: a real kernel spec installed by the CLI, real kernels through jupyter_client, real
spare processes. Checked: a restart takes over the spare and is a fresh kernel; a spare that does not fit, is not
ready or is turned off means a plain start; no spare outlives its kernel (shutdown, restart, a killed parent)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers.kernels import Kernel, process_gone

from jupyter_compile_cache.frontends import cli

pytestmark = pytest.mark.slow
NAME = "python3-compile-cache"


@pytest.fixture
def warm_kernels(tmp_path, monkeypatch):
    """Installs the kernel spec with the CLI into a private prefix, and starts kernels of it."""
    prefix = tmp_path / "prefix"
    assert cli.main(["install-kernel", "--prefix", str(prefix)]) == 0
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    started: list[Kernel] = []

    def start(**env: str) -> Kernel:
        env.setdefault("JUPYTER_COMPILE_CACHE_SPARE_DELAY", "0")  # the spare starts with its kernel
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
        env.setdefault("JUPYTER_COMPILE_CACHE_DIR", str(tmp_path / "store"))
        kernel = Kernel({k: str(v) for k, v in env.items()}, kernel_name=NAME)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.shutdown()


def _wait_ready(kernel: Kernel, timeout: float = 120) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        spare = kernel.km.provisioner.spare
        if spare is not None and spare.ready():
            return spare.pid
        time.sleep(0.1)
    raise AssertionError("the spare did not get ready")


def _spares_of_this_process(*kernels: Kernel) -> list[int]:
    """Spare processes we started that are not (yet) kernels (a spare that took over keeps its command line)."""
    kernel_pids = {k.km.provisioner.pid for k in kernels}
    spares = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.status() == psutil.STATUS_ZOMBIE or process.pid in kernel_pids:
                continue
            if "jupyter_compile_cache.kernels.spare" in " ".join(process.cmdline()):
                spares.append(process.pid)
        except psutil.Error:  # ended while we looked
            continue
    return spares


def test_install_kernel_writes_a_spec_with_our_provisioner(tmp_path):
    assert cli.main(["install-kernel", "--prefix", str(tmp_path), "--name", "mine", "--display-name", "Mine"]) == 0
    with open(tmp_path / "share" / "jupyter" / "kernels" / "mine" / "kernel.json") as f:
        spec = json.load(f)
    assert spec["display_name"] == "Mine"
    assert spec["argv"][:3] == [sys.executable, "-m", "jupyter_compile_cache.kernels.launcher"]
    assert spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "compile-cache-warm"


def test_a_restart_takes_over_the_spare_and_is_a_fresh_kernel(warm_kernels, tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "usermod.py").write_text("X = 1\n")
    path = os.pathsep.join(p for p in (str(tmp_path / "work"), os.environ.get("PYTHONPATH")) if p)
    k = warm_kernels(PYTHONPATH=path, MY_SETTING="launch-env", TORCHINDUCTOR_COMPILE_THREADS="2")
    first = k.km.provisioner.pid
    k.run("import usermod, torch\nstate = 41\n%load_ext jupyter_compile_cache").check()
    spare = _wait_ready(k)
    assert _spares_of_this_process(k) == [spare]  # one spare per kernel
    status = k.run("%compile_cache status").check()
    assert f"warm spare: pid {spare}" in repr(status.results) + status.stdout

    k.restart()
    assert k.km.provisioner.pid == spare  # the spare became the kernel
    assert process_gone(first)
    seen = k.value(
        "{'pid': __import__('os').getpid(), 'env': __import__('os').environ.get('MY_SETTING'),"
        " 'cwd': __import__('os').getcwd(), 'state': 'state' in globals(),"
        " 'usermod': 'usermod' in __import__('sys').modules,"
        " 'extension': 'jupyter_compile_cache' in __import__('sys').modules,"
        " 'magic': get_ipython().find_cell_magic('compile_cache') is not None,"
        " 'torch_ready': 'torch._inductor.compile_fx' in __import__('sys').modules,"
        " 'cuda': __import__('torch').cuda.is_initialized()}"
    )
    assert seen == {
        "pid": spare,
        "env": "launch-env",
        "cwd": os.getcwd(),
        "state": False,
        "usermod": False,
        "extension": False,
        "magic": False,
        "torch_ready": True,  # what the spare is for
        "cuda": False,
    }
    next_spare = _wait_ready(k)
    assert next_spare != spare and _spares_of_this_process(k) == [next_spare]

    k.run(START_COMPILE_WORKERS).check()  # the extension is not loaded: the spare itself stops them at shutdown
    kernel = k.km.provisioner.process
    k.shutdown(now=False)
    assert kernel.wait(10) == 0  # it exited on its own, not terminated by jupyter_client
    assert process_gone(next_spare) and process_gone(spare)
    assert _spares_of_this_process() == []


# What torch.compile does where Triton is installed (the GPU case): start inductor's compile-worker sidecar and its
# workers. Kernels that run it need TORCHINDUCTOR_COMPILE_THREADS > 1 (this 2-core machine would use one).
START_COMPILE_WORKERS = (
    "import torch\n"
    "from torch._inductor.async_compile import AsyncCompile\n"
    "AsyncCompile.warm_pool(); AsyncCompile.wakeup(); AsyncCompile.wait_pool_ready()\n"
    "assert __import__('psutil').Process().children()  # the sidecar"
)


def test_a_kernel_with_compile_workers_shuts_down_on_its_own(tmp_path):
    """ipykernel signals its children at shutdown until none is left; inductor's sidecar stays a zombie until torch's
    exit handler reaps it, so a plain kernel is still stopping when jupyter_client terminates it (the control).
    With the extension loaded, the workers are stopped first and the kernel exits by itself."""
    codes = {}
    for extension in (False, True):
        k = Kernel({"TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
        try:
            if extension:
                k.run("%load_ext jupyter_compile_cache").check()
            k.run(START_COMPILE_WORKERS).check()
            kernel = k.km.provisioner.process
        finally:
            k.shutdown(now=False)
        codes[extension] = kernel.wait(10)
    assert codes == {False: -signal.SIGTERM, True: 0}


def test_a_spare_that_does_not_fit_is_not_ready_or_is_off_means_a_plain_start(warm_kernels):
    k = warm_kernels()
    spare = _wait_ready(k)
    k.restart(same_process_env={"MY_SETTING": "changed"})  # the new kernel's env differs from the spare's
    assert k.km.provisioner.pid != spare and process_gone(spare)
    assert k.value("__import__('os').environ['MY_SETTING']") == "changed"

    not_ready = k.km.provisioner.spare.pid  # restart before the new spare is warm (no delay: it has started)
    k.restart()
    assert k.km.provisioner.pid != not_ready and process_gone(not_ready)
    assert k.value("1 + 1") == 2

    off = warm_kernels(JUPYTER_COMPILE_CACHE_SPARE="0")
    assert off.km.provisioner.spare is None and off.km.provisioner._pending is None
    assert off.value("1 + 1") == 2


def test_spares_die_with_a_killed_server(tmp_path):
    """The process holding the kernel (a Jupyter server) is killed: its spare exits (its stdin closes)."""
    prefix = tmp_path / "prefix"
    assert cli.main(["install-kernel", "--prefix", str(prefix)]) == 0
    holder = (
        "import sys, time\n"
        "from jupyter_client import KernelManager\n"
        f"km = KernelManager(kernel_name={NAME!r})\n"
        "km.start_kernel()\n"
        "while not km.provisioner.spare.ready(): time.sleep(0.1)\n"
        "print(km.provisioner.pid, km.provisioner.spare.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = dict(os.environ, JUPYTER_PATH=str(prefix / "share" / "jupyter"), JUPYTER_COMPILE_CACHE_SPARE_DELAY="0")
    proc = subprocess.Popen([sys.executable, "-c", holder], env=env, stdout=subprocess.PIPE, text=True)
    try:
        kernel, spare = (int(x) for x in proc.stdout.readline().split())
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert process_gone(spare)
    finally:
        proc.kill()
        for pid in (locals().get("kernel"), locals().get("spare")):
            if pid and psutil.pid_exists(pid):
                os.killpg(pid, signal.SIGKILL)
