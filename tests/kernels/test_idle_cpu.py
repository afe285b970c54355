"""idle_cpu.py: the template's warm-up runs on idle CPU only (its thread has the SCHED_IDLE policy, the forking thread
keeps its own: a kernel forked from the template runs at the priority a fresh one would), once the machine is quiet;
on a machine that stays busy, at a low priority that still gets a share of the CPUs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from jupyter_compile_cache.kernels.idle_cpu import BUSY_NICE, QUIET_CORES, on_idle_cpu, wait_for_a_quiet_machine

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")


def test_the_warm_up_runs_under_sched_idle_and_the_forking_thread_keeps_its_policy():
    before = os.sched_getscheduler(0)
    policy, name = on_idle_cpu(lambda: (os.sched_getscheduler(0), threading.current_thread().name))
    assert policy == os.SCHED_IDLE
    assert name != threading.main_thread().name
    assert os.sched_getscheduler(0) == before  # the main thread, which forks the kernels


def test_on_a_machine_that_stayed_busy_the_warm_up_runs_at_a_low_priority_and_gets_its_share():
    """With every CPU kept busy at the normal priority, SCHED_IDLE work would wait for them to end; the busy form
    (nice BUSY_NICE, the forking thread's own untouched) gets through a fixed piece of work while they still run."""
    nice_before = os.getpriority(os.PRIO_PROCESS, 0)

    def work() -> tuple[int, int]:
        total = sum(i * i for i in range(2_000_000))  # about 0.2 s of one CPU
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), total

    busy = _spin(60, os.cpu_count() or 1)
    try:
        nice, _total = on_idle_cpu(work, busy=True)
        assert all(process.poll() is None for process in busy)  # done while every CPU was still busy
    finally:
        _end(busy)
    assert nice == min(19, nice_before + BUSY_NICE)
    assert os.getpriority(os.PRIO_PROCESS, 0) == nice_before  # the main thread's, as a forked kernel inherits it


def test_a_failing_warm_up_raises_in_the_caller():
    def fails() -> None:
        raise RuntimeError("no torch here")

    with pytest.raises(RuntimeError, match="no torch here"):
        on_idle_cpu(fails)


def _spin(seconds: float, count: int | None = None) -> list[subprocess.Popen]:
    """Processes that keep CPUs busy for `seconds`: by default enough that the machine is not quiet (one on 2 CPUs;
    on more, more than half of them)."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass"
    if count is None:
        count = int(max(QUIET_CORES, (os.cpu_count() or 1) / 2 - 1)) + 1  # above the template's quiet line
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def _end(busy: list[subprocess.Popen]) -> None:
    for process in busy:
        process.kill()
        process.wait()


def test_a_template_waits_while_other_processes_keep_the_cpus_busy_and_not_longer():
    """The warm-up waits for the machine to settle (its kernel's first cells), and at most `most` seconds. Where the
    line between busy and quiet matters here, it is drawn from this machine's CPUs: a template an earlier test left
    warming up on idle CPU (one CPU's worth) must not decide the test."""
    cpus = os.cpu_count() or 1
    busy = _spin(3, cpus)
    try:
        waited = wait_for_a_quiet_machine(quiet_cores=cpus - 0.5, quiet_for=0.5, most=30)
    finally:
        _end(busy)
    assert 2.5 <= waited < 30  # the whole spin, then half a second of quiet
    assert wait_for_a_quiet_machine(quiet_cores=cpus + 1, quiet_for=0.5, most=30) < 5  # under the line: at once
    busy = _spin(30)
    try:
        assert 2 <= wait_for_a_quiet_machine(quiet_for=0.5, most=2) < 3  # never quiet: `most`, then warm up anyway
    finally:
        _end(busy)
