"""prewarm.py: the background start of torch's compiler stack, in this process. What failed in it is told once, by
the next cell, which runs as it would without the prewarm."""

from __future__ import annotations

import threading
import time

from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.kernels.prewarm import Prewarm


def _unreadable_toolchain() -> None:
    raise PermissionError("[Errno 13] Permission denied: 'toolchain'")


def test_a_failure_in_the_background_is_kept_for_the_next_cell_once():
    prewarm = Prewarm()
    prewarm.before_probe = _unreadable_toolchain
    prewarm.run_here(gpu=False)  # the probe first, as without a GPU (with one, it waits for an idle moment)
    assert prewarm.imported.is_set()  # the imports were done before it failed: cells need not wait
    assert prewarm.take_error() == Failure("PermissionError", "[Errno 13] Permission denied: 'toolchain'")
    assert prewarm.take_error() is None


def test_the_next_cell_tells_it_once_and_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    from jupyter_compile_cache.frontends.reporter import TextReporter

    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter())
    try:
        session.prewarm.before_probe = _unreadable_toolchain
        session.prewarm.run_here(gpu=False)
        ran = []
        for _ in range(2):
            with session.cell("plain", CellOptions(save=False)):
                ran.append(True)
        err = capsys.readouterr().err
        assert ran == [True, True]
        assert err.count("preparing torch's compiler in the background stopped (PermissionError") == 1, err
    finally:
        session.close()


def test_the_first_magics_answer_while_the_compiler_loads_and_a_compiling_cell_waits(tmp_path):
    """In a fresh kernel the compiler loads in the background for a second or more: a `%%compile_cache` cell that
    compiles nothing and has nothing to restore, `status`, `list`, `explain` and a usage error answer meanwhile
    without touching it (status says what is still loading); a `%%compile_cache` cell that compiles waits for it
    and runs."""
    from helpers.kernels import Kernel

    kernel = Kernel(
        {"JUPYTER_COMPILE_CACHE_DIR": str(tmp_path / "store"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    )
    try:
        kernel.run("import torch\n%load_ext jupyter_compile_cache").check()
        prewarm = "__import__('jupyter_compile_cache').get_session().prewarm"
        # A new user's first cell, right after %load_ext (the compiler takes seconds to load on any machine)
        hello = kernel.run(f"%%compile_cache hello\n_during = {prewarm}.imported.is_set()\nprint('hi')").check()
        assert kernel.value("_during") is False
        assert "hi" in hello.output and "'hello' ran in" in hello.output, hello.output
        assert "waited" not in hello.output and kernel.value(f"{prewarm}.waited") == 0.0, hello.output
        # Whether the import still ran before and after `status`, read in the same cell: a fast machine may finish
        # it before the cell, so the test asserts what status said against the state it saw, never the clock.
        kernel.run(
            f"_before = {prewarm}.imported.is_set()\n_s = %compile_cache status\n_after = {prewarm}.imported.is_set()"
        ).check()
        before, after, status = kernel.value("[_before, _after, repr(_s)]")
        if not after:
            assert "torch's compiler: still loading in the background" in status, status
        elif before:
            assert "still loading" not in status, status
        assert kernel.run("%compile_cache --bogus").usage_error
        assert "no bundles" in "".join(kernel.run("%compile_cache list").check().results)
        assert "no bundle named 'toy'" in kernel.run("%compile_cache explain toy").output
        # none of them imported the compiler in the kernel's own thread, nor waited for the background import
        waited = kernel.value("__import__('jupyter_compile_cache').get_session().prewarm.waited")
        assert waited == 0.0, waited
        cell = kernel.run("%%compile_cache toy\nf = torch.compile(lambda x: x.sin() + 1)\nf(torch.ones(4))").check()
        assert "ran in" in cell.output, cell.output
        status = "\n".join(kernel.run("%compile_cache status").check().results)
        assert "still loading" not in status and "on (this kernel)" in status, status
        # On a machine without a GPU no cell waits for the hashes of torch's files: they are taken once no cell has
        # run for a moment, never beside a running one (on 2 cores that made restored code several times slower).
        if not kernel.value("__import__('torch').cuda.is_available()"):
            busy = "import time as _time\n_t = _time.perf_counter()\nwhile _time.perf_counter() - _t < 1.5: pass\n"
            kernel.run(busy + f"_hashed_during = {prewarm}.hashed.is_set()").check()
            assert kernel.value("_hashed_during") is False
            # The kernel idles (the user reads), asked now and then: the hashes start 0.5 s into a pause.
            deadline = time.monotonic() + 60
            while not kernel.value(f"{prewarm}.hashed.is_set()") and time.monotonic() < deadline:
                time.sleep(1)
            assert kernel.value(f"{prewarm}.hashed.is_set()") is True
    finally:
        kernel.shutdown()


def test_a_cell_that_starts_a_process_never_waits_for_the_compiler_and_a_compile_out_of_sight_waits_at_it(tmp_path):
    """A restored `%%compile_cache` cell whose body starts a process (which imports the compiler for itself), right
    after %load_ext, starts at once, restored and watched, and the kernel's own import of the compiler waits until
    the kernel idles, leaving the CPU to the process; when the same body then compiles through code out of its sight
    (a module's `torch.compile`), it says so and gives plain torch.compile's answer."""
    from helpers.kernels import Kernel

    env = {"JUPYTER_COMPILE_CACHE_DIR": str(tmp_path / "store"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cold")}
    (tmp_path / "helper_module.py").write_text(
        "import torch\n\ndef run():\n    return torch.compile(lambda x: x.cos() + 1)(torch.ones(3))\n"
    )
    prewarm = "__import__('jupyter_compile_cache').get_session().prewarm"
    first = Kernel(env)
    try:
        first.run("import torch\n%load_ext jupyter_compile_cache").check()
        first.run("%%compile_cache job\nf = torch.compile(lambda x: x.sin() + 1)\nf(torch.ones(4))").check()
    finally:
        first.shutdown()
    kernel = Kernel(dict(env, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "restarted")))
    try:
        kernel.run(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n%load_ext jupyter_compile_cache").check()
        body = f"_waited = {prewarm}.waited\n!echo started\n_after = {prewarm}.imported.is_set()\n"
        job = kernel.run(f"%%compile_cache job\n{body}import helper_module\ny = helper_module.run()").check()
        assert "started" in job.output and "restored 'job'" in job.output, job.output
        assert kernel.value("y.tolist()") == [1.5403022766113281] * 3, job.output  # cos(1) + 1, as torch.compile
        assert kernel.value("_waited") == 0.0  # nothing waited for the compiler before the body
        # What the state seen in the body says, never the clock (a fast machine may end the import first).
        if not kernel.value("_after"):  # the module's compile came while it still loaded: told once
            said = "'job' compiled while torch's compiler was still loading in the background, so it compiled as plain"
            assert said in job.output, job.output
        # A compiling cell right after it waits for what the background work held back, which goes on for it.
        then = kernel.run("%%compile_cache then\nimport torch\nz = torch.compile(lambda x: x * 3)(torch.ones(2))")
        assert then.check() and kernel.value("z.tolist()") == [3.0, 3.0], then.output
        deadline = time.monotonic() + 120  # the kernel idles: the background import goes on, and ends
        while not kernel.value(f"{prewarm}.imported.is_set()") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert kernel.value(f"{prewarm}.imported.is_set()") is True
        assert kernel.value(f"{prewarm}.stood_back") is True
    finally:
        kernel.shutdown()


def test_a_compile_while_the_compiler_loads_waits_at_torch_compile_and_the_gate_goes_with_the_import():
    """The gate `first_compile_gate` puts on `torch.compile` while the prewarm thread imports: a compile in another
    thread waits for the import to end, is counted as waited, and compiles as torch.compile does; once the import is
    done, `torch.compile` is torch's own again."""
    import torch

    from jupyter_compile_cache.torch_adapter import compiler

    original = torch.compile
    prewarm = Prewarm()
    prewarm.thread = threading.Thread(target=lambda: None)  # the import runs "elsewhere", ended by hand below
    gate = compiler.first_compile_gate(prewarm._wait_at_compile)
    assert torch.compile is not original
    threading.Timer(0.3, prewarm.imported.set).start()
    start = time.perf_counter()
    f = torch.compile(lambda x: x * 2 + 1)
    assert time.perf_counter() - start >= 0.25 and prewarm.take_waited() >= 0.25
    assert torch.equal(f(torch.arange(3.0)), torch.tensor([1.0, 3.0, 5.0]))
    gate.undo()
    assert torch.compile is original


def test_work_no_cell_waits_for_starts_only_once_no_cell_has_run_for_a_moment():
    prewarm = Prewarm()
    prewarm.before_cell(None)  # a cell runs
    done = threading.Event()
    waiting = threading.Thread(target=lambda: (prewarm._wait_for_idle(quiet=0.3), done.set()), daemon=True)
    waiting.start()
    assert not done.wait(0.5)  # not while the cell runs
    prewarm.after_cell()
    prewarm.before_cell(None)  # Run All: the next cell starts at once
    assert not done.wait(0.5)
    ended = time.perf_counter()  # before after_cell starts the idle clock: the wait is measured from no later
    prewarm.after_cell()
    assert done.wait(10)
    assert time.perf_counter() - ended >= 0.3  # the kernel had been idle for `quiet` seconds


def test_on_a_gpu_machine_the_cpu_probe_waits_until_no_cell_has_run_for_a_moment():
    """A GPU model never needs the CPU ISA probe, whose test processes each import torch: run beside a cell's
    launches of restored GPU code they took its CPU (1.3x per call on an H200). The hashes a GPU cell needs do not
    wait."""
    prewarm = Prewarm()
    probed = []
    prewarm.before_probe = lambda: probed.append(True)
    prewarm.before_cell(None)  # a cell runs
    thread = threading.Thread(target=prewarm.run_here, kwargs={"gpu": True}, daemon=True)
    thread.start()
    assert prewarm.hashed.wait(120)
    assert not prewarm.probed.wait(1.0) and probed == []
    prewarm.after_cell()
    assert prewarm.probed.wait(120)
    thread.join(120)
    assert prewarm.take_error() is None


def test_in_a_script_the_work_no_cell_waits_for_is_left_to_torch():
    """Without IPython no moment is known to be idle: the hashes (on a CPU machine) or the probe (on a GPU one) would
    run beside the script's own calls (restored code ran several percent slower beside them). torch does each when a
    compile needs it."""
    for gpu in (False, True):
        prewarm = Prewarm()
        probed, hashed = [], []
        prewarm.before_probe = lambda probed=probed: probed.append(True)
        prewarm._hash = lambda hashed=hashed: hashed.append(True)
        prewarm.run_here(gpu=gpu)
        assert (probed, hashed) == (([True], []) if not gpu else ([], [True])), gpu
        assert prewarm.take_error() is None and prewarm.hashed.is_set() and prewarm.probed.is_set()

    template = Prewarm()  # a warm template does all of it before any kernel is forked
    template._hash = lambda: template.hashed.set()
    template.run_here(gpu=False, idle_work=True)
    assert template.hashed.is_set() and template.probed.is_set()
