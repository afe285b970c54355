"""A warm kernel template as the Jupyter server starts one (`--template-only`), seen from the outside while it warms
up (kernels/template.py): `config` shows it with its step, never "none running"."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

from jupyter_compile_cache.kernels.idle_cpu import QUIET_WAIT_ENV
from jupyter_compile_cache.kernels.protocol import LAUNCHER_MODULE, Warming, WarmingStep, warming_path
from jupyter_compile_cache.kernels.runtime_dir import RUNTIME_DIR_ENV, process_alive


def test_config_shows_a_template_warming_up_with_its_step_and_memory(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        RUNTIME_DIR_ENV: str(runtime),
        QUIET_WAIT_ENV: "45",
        "JUPYTER_COMPILE_CACHE_DIR": str(tmp_path / "store"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    subprocess.run([sys.executable, "-m", LAUNCHER_MODULE, "--template-only"], env=env, check=True, timeout=60)
    warming, deadline = None, time.time() + 30
    while warming is None and time.time() < deadline:
        found = glob.glob(warming_path(str(runtime), "*"))
        warming = Warming.read(found[0]) if found else None
        time.sleep(0.05)
    assert warming is not None, os.listdir(runtime)
    os.kill(warming.pid, signal.SIGSTOP)  # held where it is: waiting for a quiet machine, or importing torch
    try:
        warming = Warming.read(found[0])  # its step when it stopped
        assert warming is not None
        config = subprocess.run([sys.executable, "-m", "jupyter_compile_cache", "config"], env=env,
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert config.returncode == 0, config.stderr
        line = next(x for x in config.stdout.splitlines() if x.startswith("warm kernel template"))
        assert line.startswith(f"warm kernel template warming up: pid {warming.pid}, "), config.stdout
        step = {
            WarmingStep.QUIET: "waiting for a quiet machine (at most 45 s), then importing torch and its compiler",
            WarmingStep.IMPORTING: "importing torch and its compiler on idle CPU time",
            WarmingStep.IMPORTING_BUSY: "importing torch and its compiler at a low priority (the machine stayed busy)",
        }[warming.step]
        assert step in line and "B, for " in line and "none running" not in config.stdout, line
    finally:
        os.kill(warming.pid, signal.SIGCONT)
        os.kill(warming.pid, signal.SIGTERM)
        deadline = time.time() + 20
        while process_alive(warming.pid) and time.time() < deadline:
            time.sleep(0.1)


def test_what_a_warming_file_holds_reads_back_and_an_older_bare_pid_too(tmp_path):
    path = warming_path(str(tmp_path), "key")
    state = Warming(1234, 1700000000.5, WarmingStep.IMPORTING, 60.0)
    state.write(path)
    assert Warming.read(path) == state and os.listdir(tmp_path) == ["key.warming"]
    with open(path, "w") as f:
        f.write("4321")  # as a template of an earlier version wrote it
    assert Warming.read(path) == Warming(4321)
    for junk in ("", "{", '{"pid": "x"}', '{"pid": 1, "since": 0, "step": "later", "quiet_wait": 0}'):
        with open(path, "w") as f:
            f.write(junk)
        assert Warming.read(path) is None, junk
    assert Warming.read(str(tmp_path / "none.warming")) is None
