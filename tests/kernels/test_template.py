"""The template's warm-up runs on idle CPU only: its thread has the SCHED_IDLE policy, the forking thread keeps its
own (a kernel forked from the template runs at the priority a fresh one would)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from jupyter_compile_cache.kernels.template import on_idle_cpu

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SCHED_IDLE is Linux's")


def test_the_warm_up_runs_under_sched_idle_and_the_forking_thread_keeps_its_policy():
    before = os.sched_getscheduler(0)
    policy, name = on_idle_cpu(lambda: (os.sched_getscheduler(0), threading.current_thread().name))
    assert policy == os.SCHED_IDLE
    assert name != threading.main_thread().name
    assert os.sched_getscheduler(0) == before  # the main thread, which forks the kernels


def test_a_failing_warm_up_raises_in_the_caller():
    def fails() -> None:
        raise RuntimeError("no torch here")

    with pytest.raises(RuntimeError, match="no torch here"):
        on_idle_cpu(fails)
