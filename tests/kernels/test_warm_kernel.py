"""The warm kernel as JupyterLab, Notebook 7 and nbclient start it: the spec a wheel installs, and the one the CLI
writes; real kernels
through jupyter_client's KernelManager (its plain local provisioner runs the launcher). Checked: a restart is forked
from the template and `%compile_cache status` says so; a kernel that started cold or plain says once, at
`%load_ext`, why and what to install; a spec installed by version 0.2 (naming its provisioner) still starts; torch's
C++ header check that a kernel's compiled cell made is made by the template, and a kernel forked after that finds
torch's answer when it compiles; a template outlives the notebook run that started it by its grace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from helpers.kernels import Kernel, process_gone
from helpers.warm_kernels import end_templates, wait_for_template

from jupyter_compile_cache.frontends import cli
from jupyter_compile_cache.kernels.runtime_dir import process_alive
from jupyter_compile_cache.kernels.template import DEFAULT_GRACE, GRACE_ENV

pytestmark = pytest.mark.slow
NAME = "python3-compile-cache"


def test_install_kernel_writes_a_spec_that_runs_the_launcher(tmp_path):
    assert cli.main(["install-kernel", "--prefix", str(tmp_path), "--name", "mine", "--display-name", "Mine"]) == 0
    with open(tmp_path / "share" / "jupyter" / "kernels" / "mine" / "kernel.json") as f:
        spec = json.load(f)
    assert spec["display_name"] == "Mine"
    assert spec["argv"] == [sys.executable, "-m", "jupyter_compile_cache.kernels.launcher", "-f", "{connection_file}"]
    assert "kernel_provisioner" not in spec["metadata"]  # the launcher does it all, for every front end


def test_a_wheel_installs_the_spec_install_kernel_writes_and_enables_the_server_extension(tmp_path):
    """What `pip install` puts beside the package (pyproject.toml's data-files): the spec the CLI writes, its argv's
    Python the server's own ("python": jupyter_client runs sys.executable), and the server extension enabled."""
    import zipfile

    from jupyter_compile_cache.kernels.warm_kernel import DEFAULT_KERNEL_NAME

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), root],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        data = {name.split(".data/data/", 1)[1]: z.read(name) for name in z.namelist() if ".data/data/" in name}
    installed = json.loads(data.pop(f"share/jupyter/kernels/{DEFAULT_KERNEL_NAME}/kernel.json"))
    config = json.loads(data.pop("etc/jupyter/jupyter_server_config.d/jupyter_compile_cache.json"))
    assert data == {} and config == {"ServerApp": {"jpserver_extensions": {"jupyter_compile_cache": True}}}
    assert cli.main(["install-kernel", "--prefix", str(tmp_path / "cli")]) == 0
    with open(tmp_path / "cli" / "share" / "jupyter" / "kernels" / DEFAULT_KERNEL_NAME / "kernel.json") as f:
        written = json.load(f)
    assert installed["argv"][0] == "python" and {**installed, "argv": written["argv"]} == written


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
    assert template.grace_seconds == DEFAULT_GRACE == 600  # a minute between two notebook runs is no cold start
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
    # restored: torch loads the model's C++ kernels, whose binaries are there, so no header check is asked for
    # (kernel_load_fixes.py); one that were would find the template's answer: no new check in this kernel either way
    k.run(CPU_CELL).check()
    after = k.value(HEADER_CHECK.format("_precompile_header"))
    assert after["misses"] == made["misses"], (made, after)


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


RUN_NOTEBOOK = """
import sys, nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(nb, kernel_name=sys.argv[2], timeout=300).execute()
print(nb.cells[-1].outputs[0]["text"], end="")
"""


def test_a_second_headless_run_within_the_grace_is_forked_and_the_template_ends_the_grace_after_it(warm_env, tmp_path):
    """A script that runs notebooks (nbclient, papermill, a CI job), twice, a while apart: the template the first
    run's launch started outlives that run's process by JUPYTER_COMPILE_CACHE_TEMPLATE_GRACE (default 10 min, held by
    the restart test; 20 s here), the second run's kernel is forked from it, and it ends that long after the second
    run's process."""
    import nbformat

    runtime = tmp_path / "runtime"  # a template of its own, whose only launchers are the two runs
    runtime.mkdir(mode=0o700)
    env = {**warm_env, "JUPYTER_COMPILE_CACHE_RUNTIME_DIR": str(runtime), GRACE_ENV: "20"}
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
        template = wait_for_template(str(runtime))  # warmed up in the background meanwhile
        assert template.grace_seconds == 20
        time.sleep(max(0.0, 10 - (time.monotonic() - ended)))
        second = run()
        ended = time.monotonic()
        assert "kernel: forked from a warm template" in second, second
        while process_alive(template.pid) and time.monotonic() - ended < 60:
            time.sleep(0.2)
        assert 19 <= time.monotonic() - ended < 60
    finally:
        end_templates(str(runtime))
