"""The launcher and its warm templates, launched as a raw front end (VS Code) launches a kernel: the installed spec's
argv run with a connection file, a plain client, a restart as a shutdown and a new launch. Real processes
throughout, one template per environment shared by the tests of this module (they run in order). Checked: the first
start is cold and makes a template; every later start is forked from it and is a fresh kernel in every way a cell
can look at; signals and exit codes pass through; kernels started at once are all forked; a launch no template fits
starts cold with its own settings and gets its own template; every fault ends in a working kernel."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.kernels import process_gone
from helpers.warm_kernels import RawFrontEnd, end_templates, tiny_wheel, wait_for_template

import jupyter_compile_cache
from jupyter_compile_cache.kernels import protocol
from jupyter_compile_cache.kernels.launcher import templates
from jupyter_compile_cache.kernels.protocol import warming_path
from jupyter_compile_cache.kernels.runtime_dir import process_alive
from jupyter_compile_cache.kernels.template_fit import TemplateInfo, install_stamp

pytestmark = pytest.mark.slow


def _alive(warming: str) -> bool:
    """The template that wrote this warming file (its pid) is still running."""
    try:
        with open(warming, encoding="utf-8") as f:
            os.kill(int(f.read()), 0)
    except (OSError, ValueError):
        return False
    return True


@pytest.fixture(scope="module")
def warm(warm_env, tmp_path_factory):
    """Front ends of the installed spec, started in a notebook folder, with the session's runtime folder."""
    root = tmp_path_factory.mktemp("raw")
    work = root / "work"
    work.mkdir()
    with open(os.path.join(warm_env["JUPYTER_PATH"], "kernels", "python3-compile-cache", "kernel.json")) as f:
        argv = json.load(f)["argv"]
    env = warm_env
    runtime = env["JUPYTER_COMPILE_CACHE_RUNTIME_DIR"]
    started: list[RawFrontEnd] = []

    class Warm:
        directory = str(runtime)
        folder = str(work)

        def front_end(self, **extra_env: str) -> RawFrontEnd:
            fe = RawFrontEnd(argv, {**env, **extra_env}, str(root))
            started.append(fe)
            return fe

        def launch(self, cwd: str | None = None, **extra_env: str) -> RawFrontEnd:
            return self.front_end(**extra_env).launch(cwd=cwd or self.folder)

        def template(self) -> TemplateInfo:
            """The template of this module's environment, once ready (a launch starts it if none is there)."""
            fitting = [t for t in templates(self.directory) if t.mismatch(sys.executable, env, install_stamp()) is None]
            if not fitting and not glob.glob(warming_path(self.directory, "*")):
                fe = self.launch()
                assert fe.shutdown() == 0
            deadline = time.time() + 180
            while time.time() < deadline:
                # and none other still warming up (an earlier test's, waiting for a quiet machine): once ready, it
                # could retire this one under the test's launch
                settled = not any(map(_alive, glob.glob(warming_path(self.directory, "*"))))
                for info in templates(self.directory):
                    if settled and info.mismatch(sys.executable, env, install_stamp()) is None:
                        return info
                time.sleep(0.2)
            raise AssertionError("no template of this module's environment got ready")

    yield Warm()
    for fe in started:
        fe.close()


def test_the_first_start_is_cold_then_every_start_is_forked_and_is_a_fresh_kernel(warm):
    end_templates(warm.directory)  # a first start: no template yet
    front_end = {"JPY_PARENT_PID": str(os.getpid())}  # as jupyter_client sets it: ipykernel reads it when imported
    fe = warm.launch(MY_SETTING="launch-env", **front_end)
    record = fe.start_record()
    assert (record["how"], record["next"]) == ("cold", "started"), record  # one is warming up for the next kernel
    fe.run("state = 41")
    cold = fe.observe()
    template = warm.template()
    assert "MY_SETTING" not in template.selecting and "TORCHINDUCTOR_CACHE_DIR" in template.selecting

    assert fe.shutdown(restart=True) == 0
    fe.launch(cwd=warm.folder, **front_end)
    record = fe.start_record()
    assert record["how"] == "forked" and record["template_pid"] == template.pid and record["seconds"] < 2, record
    forked = fe.observe()
    assert forked["parent_handle"] == os.getpid()
    other = warm.launch(MY_SETTING="launch-env").observe()  # a second kernel at the same time

    assert forked["compiler"] and forked["pid"] not in (template.pid, cold["pid"], other["pid"])
    assert forked["pgid"] == forked["pid"]  # a process group of its own, as jupyter_client gives a kernel
    assert forked["argv"][1:] == ["-f", fe.connection_file] and cold["user"] and not forked["user"]
    # imported ahead by the template: torch's compiler, and the extension's modules that %load_ext imports
    drawn = ("pid", "pgid", "random", "numpy", "torch_seed", "torch_rand", "compiler", "extension", "argv", "user")
    assert {k: v for k, v in forked.items() if k not in drawn} == {k: v for k, v in cold.items() if k not in drawn}
    for key in ("random", "numpy", "torch_seed", "torch_rand"):  # random states are drawn anew in each kernel
        assert len({cold[key], forked[key], other[key]}) == 3, key
    assert forked["env"]["MY_SETTING"] == "launch-env" and not forked["user"] and not cold["extension"]
    assert forked["extension"] and forked["compiler"]
    assert forked["counters"] == {} and not forked["cuda"]

    ours = "sorted(m for m in sys.modules if m.startswith('jupyter_compile_cache'))"
    before = fe.value(ours, "import sys\n")
    fe.run("%load_ext jupyter_compile_cache")
    assert fe.value(ours) == before  # the template imported what %load_ext imports (EXTENSION_IMPORTS)
    status = fe.run("%compile_cache status")
    assert f"kernel: forked from a warm template (pid {template.pid}) in" in status, status
    # A compiled function in the forked kernel gives eager's answer (C++ build, compile workers, the ISA probe's
    # result inherited from the template).
    same = fe.value(
        "bool(torch.equal(torch.compile(f)(x), f(x)))",
        "import torch\ndef f(x): return torch.relu(x) * 2 + 1\nx = torch.randn(16, 16)\n",
    )
    assert same is True


def test_signals_and_exit_codes_pass_through_the_launcher(warm):
    template = warm.template()
    fe = warm.launch()
    assert fe.start_record()["template_pid"] == template.pid
    kernel = fe.kernel_pid()

    # the front end's interrupt goes to the launcher, once the cell is in its sleep
    fe.client.execute("import time; print('SLEEPING', flush=True); time.sleep(60)")
    while True:
        message = fe.client.get_iopub_msg(timeout=20)
        if message["msg_type"] == "stream" and "SLEEPING" in message["content"]["text"]:
            break
    started = time.time()
    fe.proc.send_signal(signal.SIGINT)
    reply = fe.client.get_shell_msg(timeout=20)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
    assert time.time() - started < 10 and fe.value("1 + 1") == 2

    fe.proc.send_signal(signal.SIGTERM)  # termination too, and the launcher ends as the kernel did
    assert fe.proc.wait(20) == -signal.SIGTERM
    assert process_gone(kernel)

    fe.launch(cwd=warm.folder)  # the front end kills the launcher outright: the kernel goes with it
    kernel = fe.kernel_pid()
    fe.proc.kill()
    fe.proc.wait(10)
    assert process_gone(kernel)

    fe.launch(cwd=warm.folder)  # a shutdown request: exit code 0, the launcher gone at once
    assert fe.shutdown() == 0

    # Ends that skip the kernel's exit handlers: its parent, the template, tells the launcher, which ends as a plain
    # kernel's process would (with that code, or of that signal), at once, while a kernel forked after it lives on.
    for code, expected in (("os._exit(3)", 3), ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL)):
        fe.launch(cwd=warm.folder)
        later = warm.launch()
        assert fe.start_record()["template_pid"] == later.start_record()["template_pid"] == template.pid
        fe.client.execute(f"import os, signal; {code}")
        assert fe.proc.wait(10) == expected, code
        assert later.value("1 + 1") == 2 and later.shutdown() == 0
    assert process_alive(template.pid)  # kernels come and go; the template stays


def test_kernels_started_at_once_are_all_forked_and_right(warm):
    template = warm.template()
    front_ends = [warm.front_end(KERNEL_NUMBER=str(i)) for i in range(4)]
    with ThreadPoolExecutor(len(front_ends)) as pool:
        launches = [pool.submit(fe.launch, cwd=warm.folder) for fe in front_ends]
        for launch in launches:
            launch.result(timeout=150)  # a launch's failure, raised here
    records = [fe.start_record() for fe in front_ends]
    assert [r["how"] for r in records] == ["forked"] * 4 and {r["template_pid"] for r in records} == {template.pid}
    expression = "(os.environ['KERNEL_NUMBER'], sum(range(10)), os.getpid())"
    answers = [fe.value(expression, "import os\n") for fe in front_ends]
    assert [a[:2] for a in answers] == [(str(i), 45) for i in range(4)]
    assert len({a[2] for a in answers}) == 4
    assert all(fe.shutdown() == 0 for fe in front_ends)


def test_a_launch_no_template_fits_starts_cold_with_its_own_settings_then_gets_its_own(warm):
    main = warm.template()
    one = warm.launch(OMP_NUM_THREADS="1", JUPYTER_COMPILE_CACHE_TEMPLATE_IDLE="4")
    record = one.start_record()
    assert (record["how"], record["cold"]) == ("cold", "no_fit"), record
    assert record["problem"] == {"trouble": "variable_differs", "detail": "OMP_NUM_THREADS"}, record
    assert one.value("torch.get_num_threads()", "import torch\n") == 1
    own = wait_for_template(warm.directory, exclude=(main.pid,))
    assert own.selecting["OMP_NUM_THREADS"] == "1"
    assert one.shutdown(restart=True) == 0
    one.launch(cwd=warm.folder)
    assert one.start_record()["template_pid"] == own.pid
    assert one.value("torch.get_num_threads()", "import torch\n") == 1  # forked, with that launch's threads
    assert one.shutdown() == 0
    assert process_gone(own.pid, timeout=20)  # idle for its 4 s: it exits
    with open(protocol.retired_path(warm.directory, own.launch_key), encoding="utf-8") as f:
        assert json.load(f) == {"trouble": "idle", "detail": ""}  # the next launch of its key says why it went

    logs = warm.launch(TORCH_LOGS="+dynamo", JUPYTER_COMPILE_CACHE_TEMPLATE_IDLE="1")  # its template: not needed
    record = logs.start_record()
    assert (record["how"], record["cold"]) == ("cold", "no_fit") and record["problem"]["detail"] == "TORCH_LOGS", record
    level = logs.value("logging.getLogger('torch._dynamo').getEffectiveLevel()", "import logging, torch._dynamo\n")
    assert level == 10  # DEBUG, as in a fresh kernel with that environment
    assert logs.shutdown() == 0


def test_a_module_in_the_kernels_folder_that_would_shadow_an_import_means_a_cold_start(warm, tmp_path):
    warm.template()
    (tmp_path / "sympy.py").write_text("SHADOW = True\n")
    fe = warm.launch(cwd=str(tmp_path))
    record = fe.start_record()
    assert record["how"] == "cold" and record["cold"] == "refused", record
    assert record["problem"] == {"trouble": "shadowed", "detail": "sympy.py"}, (
        record,
        os.listdir(warm.directory),
    )
    assert fe.value("getattr(__import__('sympy'), 'SHADOW', False)") is True  # as in a fresh kernel there
    assert fe.shutdown() == 0

    # Our own package, which the template imported ahead of %load_ext: another copy in the folder is a shadow; the
    # checkout the template imported it from is not.
    other = tmp_path / "other"
    (other / "jupyter_compile_cache").mkdir(parents=True)
    (other / "jupyter_compile_cache" / "__init__.py").write_text("SHADOW = True\n")
    fe = warm.launch(cwd=str(other))
    assert fe.start_record()["problem"] == {"trouble": "shadowed", "detail": "jupyter_compile_cache"}
    assert fe.value("getattr(__import__('jupyter_compile_cache'), 'SHADOW', False)") is True
    assert fe.shutdown() == 0
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(jupyter_compile_cache.__file__)))
    fe = warm.launch(cwd=checkout)
    assert fe.start_record()["how"] == "forked"
    assert fe.shutdown() == 0


@pytest.mark.skipif(os.getuid() != 0, reason="acting as a second user needs root")
def test_another_user_cannot_reach_a_template(warm):
    template = warm.template()
    probe = (
        "import os, socket, sys\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    print('refused by the folder')\n"
        "else:\n    s.settimeout(10)\n    try:\n        s.sendall(b'x' * 8)\n"
        "        print('answered' if s.recv(100) else 'closed')\n"
        "    except ConnectionError:\n        print('closed')\n"
    )
    run = [sys.executable, "-c", probe, template.socket]
    assert subprocess.run(run, capture_output=True, text=True, timeout=60).stdout.strip() == "refused by the folder"
    # Even through a path anyone can reach, the template answers no other user.
    import tempfile

    with tempfile.TemporaryDirectory() as open_dir:
        os.chmod(open_dir, 0o755)
        link = os.path.join(open_dir, "template.sock")
        os.link(template.socket, link)
        os.chmod(link, 0o777)
        run[-1] = link
        assert subprocess.run(run, capture_output=True, text=True, timeout=60).stdout.strip() == "closed"
    fe = warm.launch()
    assert fe.start_record()["template_pid"] == template.pid and fe.shutdown() == 0


def test_a_retired_template_stays_for_its_kernels_and_tells_how_they_end(warm):
    template = warm.template()
    fe = warm.launch()
    assert fe.start_record()["template_pid"] == template.pid
    os.kill(template.pid, signal.SIGTERM)  # retired, as when a newer one replaces it: it forks no more...
    deadline = time.time() + 10
    while any(info.pid == template.pid for info in templates(warm.directory)):
        assert time.time() < deadline, "the retired template still offers itself"
        time.sleep(0.1)
    assert process_alive(template.pid) and fe.value("6 * 7") == 42  # ...but stays, the parent of its kernel
    kernel = fe.kernel_pid()
    fe.client.execute("import os; os._exit(7)")
    assert fe.proc.wait(10) == 7  # told by the retired template
    with open(f"/proc/{template.pid}/task/{template.pid}/children") as f:
        others = [int(pid) for pid in f.read().split() if int(pid) != kernel]  # earlier tests' kernels, still up
    for pid in others:
        os.kill(pid, signal.SIGKILL)
    assert process_gone(template.pid, timeout=10)  # once its kernels are gone, it goes


def test_a_template_killed_while_asked_or_between_starts_means_a_cold_start(warm):
    template = warm.template()
    os.kill(template.pid, signal.SIGSTOP)  # it takes the launcher's request but never answers...

    def kill_it() -> None:
        time.sleep(2)
        os.kill(template.pid, signal.SIGKILL)  # ...and is killed meanwhile

    fe = warm.front_end().launch(cwd=warm.folder, meanwhile=kill_it)
    record = fe.start_record()
    assert (record["how"], record["cold"]) == ("cold", "template_silent"), record  # it did not answer
    assert fe.value("6 * 7") == 42

    second = warm.launch()  # its files are left behind: the next launch removes them and starts cold
    record = second.start_record()
    assert record["how"] == "cold", record
    assert second.value("6 * 7") == 42
    assert all(info.pid != template.pid for info in templates(warm.directory))
    assert fe.shutdown() == 0 and second.shutdown() == 0


def test_an_install_retires_the_template(warm, tmp_path):
    """torch upgraded while a template lives, in small: any distribution installed in the environment changes what
    a fresh kernel could import. The template retires; the next launch is cold."""
    template = warm.template()
    wheel = tiny_wheel(str(tmp_path))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "--no-deps", "--no-index", wheel], check=True, timeout=120)
    try:
        assert process_gone(template.pid, timeout=20)
        fe = warm.launch()
        assert fe.start_record()["how"] == "cold" and fe.value("1 + 1") == 2 and fe.shutdown() == 0
    finally:
        subprocess.run([*pip, "uninstall", "-y", "jcc_upgrade_probe"], check=True, timeout=120)
