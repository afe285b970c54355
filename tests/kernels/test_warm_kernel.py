"""The warm kernel as JupyterLab, Notebook 7 and nbclient start it: the spec installed by the CLI, real kernels
through jupyter_client's KernelManager (its plain local provisioner runs the launcher). Checked: a restart is forked
from the template and `%compile_cache status` says so; a kernel that started cold or plain says once, at
`%load_ext`, why and what to install; a spec installed by version 0.2 (naming its provisioner) still starts; a
kernel that used inductor's compile workers shuts down on its own; torch's C++ header check that a kernel's compiled
cell made is made by the template, and a kernel forked after that finds torch's answer when it compiles."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers.kernels import Kernel, process_gone
from helpers.warm_kernels import end_templates, wait_for_template

from jupyter_compile_cache.frontends import cli

pytestmark = pytest.mark.slow
NAME = "python3-compile-cache"


def test_install_kernel_writes_a_spec_that_runs_the_launcher(tmp_path):
    assert cli.main(["install-kernel", "--prefix", str(tmp_path), "--name", "mine", "--display-name", "Mine"]) == 0
    with open(tmp_path / "share" / "jupyter" / "kernels" / "mine" / "kernel.json") as f:
        spec = json.load(f)
    assert spec["display_name"] == "Mine"
    assert spec["argv"] == [sys.executable, "-m", "jupyter_compile_cache.kernels.launcher", "-f", "{connection_file}"]
    assert "kernel_provisioner" not in spec["metadata"]  # the launcher does it all, for every front end


@pytest.fixture
def warm_kernel(warm_env, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", warm_env["JUPYTER_PATH"])  # where KernelManager finds the spec
    started: list[Kernel] = []

    def start(kernel_name: str = NAME, **env: str) -> Kernel:
        kernel = Kernel({**warm_env, **env}, kernel_name=kernel_name)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.shutdown()


def test_a_restart_is_forked_and_says_so_a_cold_start_says_why(warm_kernel, warm_env):
    k = warm_kernel()
    loaded = k.run("import torch\n%load_ext jupyter_compile_cache").check().stdout
    template = wait_for_template(warm_env["JUPYTER_COMPILE_CACHE_RUNTIME_DIR"])
    if "started cold" in loaded:  # the first kernel of this environment in the test session
        assert "jupyter-compile-cache install-kernel" not in loaded, loaded
    first = k.value("__import__('os').getpid()")
    k.restart()
    kernel = k.value("__import__('os').getpid()")
    assert kernel != first and process_gone(first)
    assert k.km.provisioner.pid != kernel  # jupyter_client's process is the launcher, standing in
    loaded = k.run("%load_ext jupyter_compile_cache").check().stdout
    assert "compile_cache:" not in loaded, loaded  # a warm start has nothing to say
    status = "\n".join(k.run("%compile_cache status").check().results)
    assert f"kernel: forked from a warm template (pid {template.pid}) in" in status, status
    assert k.value("'torch._inductor.compile_fx' in __import__('sys').modules") is True

    k.km.interrupt_kernel()  # jupyter_client's interrupt and its kill reach the forked kernel through the launcher
    assert k.value("1 + 1") == 2
    k.km._kill_kernel()  # what shutdown_kernel(now=True) and a server do with a kernel that must go
    assert process_gone(kernel)


HEADER_CHECK = "__import__('torch._inductor.codecache', fromlist=['_']).{}.cache_info()._asdict()"
CPU_CELL = """%%compile_cache header-check --quiet
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
with torch.no_grad():
    y = torch.compile(model)(torch.ones(8, 16))
"""


def test_a_forked_kernel_finds_the_header_check_its_template_made(warm_kernel, warm_env):
    runtime = warm_env["JUPYTER_COMPILE_CACHE_RUNTIME_DIR"]
    k = warm_kernel()
    k.run("import torch\n%load_ext jupyter_compile_cache").check()
    wait_for_template(runtime)
    k.run(CPU_CELL).check()
    assert [n for n in os.listdir(runtime) if n.endswith(".headers")], os.listdir(runtime)
    deadline = time.time() + 120  # the template makes it once the machine is quiet for a second
    while True:
        k.restart()
        made = k.value(HEADER_CHECK.format("_precompile_header"))
        if made["currsize"] or time.time() > deadline:
            break
        time.sleep(2)
    assert made["currsize"] >= 1 and made["hits"] == 0, made  # made in the template, before this kernel's fork
    k.run("import torch\n%load_ext jupyter_compile_cache").check()
    k.run(CPU_CELL).check()  # restored: torch loads the model's C++ kernels, asking for the header check first
    after = k.value(HEADER_CHECK.format("_precompile_header"))
    assert after["hits"] >= 1 and after["misses"] == made["misses"], (made, after)


def test_a_plain_kernel_says_once_how_to_start_warm(kernel_factory):
    k = kernel_factory()
    loaded = k.run("%load_ext jupyter_compile_cache").check().stdout
    assert loaded.count("a plain kernel: torch's compiler loads now") == 1, loaded
    assert "`jupyter-compile-cache install-kernel` installs a kernel whose every start has it loaded" in loaded
    status = "\n".join(k.run("%compile_cache status").check().results)
    assert "kernel: a plain kernel (not the warm kernel spec)" in status, status


def test_a_spec_installed_by_version_0_2_still_starts(warm_kernel, warm_env):
    folder = os.path.join(warm_env["JUPYTER_PATH"], "kernels", "old-warm")
    os.makedirs(folder, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "jupyter_compile_cache.kernels.launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (compile cache, warm restart)",
        "language": "python",
        "metadata": {"debugger": True, "kernel_provisioner": {"provisioner_name": "compile-cache-warm"}},
    }
    with open(os.path.join(folder, "kernel.json"), "w") as f:
        json.dump(spec, f)
    k = warm_kernel("old-warm")
    assert k.value("6 * 7") == 42


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
    With the extension loaded, the workers are stopped first and the kernel exits by itself.

    jupyter_client sends SIGTERM at half its `shutdown_wait_time` (2.5 s by default): a loaded machine's interpreter
    teardown once took longer, and the kernel that would have exited by itself was terminated. The deadline here is 8 s:
    far above a teardown, far below the 14.4 s ipykernel spends signalling the zombie before it gives up."""
    codes = {}
    for extension in (False, True):
        k = Kernel({"TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")})
        try:
            if extension:
                k.run("%load_ext jupyter_compile_cache").check()
            k.run(START_COMPILE_WORKERS).check()
            kernel = k.km.provisioner.process
        finally:
            k.km.shutdown_wait_time = 16.0
            k.shutdown(now=False)
        codes[extension] = kernel.wait(10)
    assert codes == {False: -signal.SIGTERM, True: 0}


RUN_NOTEBOOK = """
import sys, nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, kernel_name=sys.argv[2], timeout=300).execute()
print(nb.cells[-1].outputs[0]["text"], end="")
"""


def test_a_second_headless_run_a_minute_after_the_first_is_forked(warm_env, tmp_path):
    """A script that runs notebooks (nbclient, papermill, a CI job), twice, a minute apart: the template the first
    run's launch started outlives that run's process (JUPYTER_COMPILE_CACHE_TEMPLATE_GRACE, default 10 min), and the
    second run's kernel is forked from it."""
    import nbformat

    runtime = tmp_path / "runtime"  # a template of its own, whose only launchers are the two runs
    runtime.mkdir(mode=0o700)
    env = {**warm_env, "JUPYTER_COMPILE_CACHE_RUNTIME_DIR": str(runtime)}
    notebook = tmp_path / "quick.ipynb"
    cells = ["%load_ext jupyter_compile_cache", "_status = %compile_cache status\nprint(_status)"]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), notebook)

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", RUN_NOTEBOOK, str(notebook), NAME], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    try:
        first = run()
        ended = time.monotonic()
        assert "kernel: started cold" in first, first
        wait_for_template(str(runtime))  # warmed up in the background meanwhile
        time.sleep(max(0.0, 60 - (time.monotonic() - ended)))
        second = run()
        assert "kernel: forked from a warm template" in second, second
    finally:
        end_templates(str(runtime))
