"""When and where a warm template warms up: once the machine has been quiet for a moment (its use read from
/proc/stat), on CPU time no other process wants (a SCHED_IDLE thread), so that it never slows the kernel whose launch
started it. A machine still busy after the wait (a notebook's own training run on every core) would never give a
SCHED_IDLE thread a turn: there the warm-up runs at a low priority instead (nice 5), a quarter of a core's share
against each busy process (2 cores, both busy: torch's import 35 s, against 13 s at the normal priority and more
than 120 s at nice 19 or SCHED_IDLE)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

QUIET_WAIT_ENV = "JUPYTER_COMPILE_CACHE_TEMPLATE_QUIET_WAIT"  # seconds to wait for a quiet machine at most
QUIET_CORES = 0.3  # the machine's use, in cores, below which a small machine counts as quiet
QUIET_FOR = 1.0  # seconds it must stay quiet before a template warms up
QUIET_WAIT_MAX = 20.0  # seconds a template waits for that at most, then warms up anyway (at BUSY_NICE)
BUSY_NICE = 5  # the warm-up thread's nice value on a machine that stayed busy through the wait


def cpu_times() -> tuple[int, int] | None:
    """The machine's (busy, total) CPU time in clock ticks since boot, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def cores_used(previous: tuple[int, int], now: tuple[int, int]) -> float:
    """The machine's use, in cores, between two `cpu_times` readings (a later one with more total time)."""
    return (os.cpu_count() or 1) * (now[0] - previous[0]) / (now[1] - previous[1])


def quiet_below(quiet_cores: float = QUIET_CORES) -> float:
    """The use below which the machine counts as quiet: `quiet_cores`, or a whole core (two CPUs) to spare."""
    return max(quiet_cores, (os.cpu_count() or 1) / 2 - 1)


def wait_for_a_quiet_machine(
    quiet_cores: float = QUIET_CORES, quiet_for: float = QUIET_FOR, most: float = QUIET_WAIT_MAX
) -> float:
    """Seconds waited until the machine has used less than `quiet_cores` cores for `quiet_for` seconds (at most `most`).
    SCHED_IDLE alone is not enough where the CPUs are hyperthreads of one core: a warm-up on the "idle" sibling still
    slows the kernel that started it. A whole core (two CPUs) left over counts as quiet too."""
    start = time.monotonic()
    previous = cpu_times()
    quiet_cores = quiet_below(quiet_cores)
    quiet_since = None
    while previous is not None and time.monotonic() - start < most:
        time.sleep(0.25)
        now = cpu_times()
        if now is None or now[1] == previous[1]:
            break
        used = cores_used(previous, now)
        previous = now
        if used >= quiet_cores:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_for:
            break
    return time.monotonic() - start


def on_idle_cpu(work: Any, busy: bool = False) -> Any:
    """`work()` in a thread of the SCHED_IDLE policy (Linux; elsewhere a plain thread): it gets a CPU only when no
    other process wants it; on a BUSY machine (never quiet while we waited) at nice BUSY_NICE instead. The policy is
    the thread's own and ends with it: the main thread, which forks the kernels, keeps the policy the process started
    with (an unprivileged process could never take it back)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        with contextlib.suppress(AttributeError, OSError):  # neither here: at the normal priority
            if busy:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BUSY_NICE)  # this thread's nice value
            else:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread
        try:
            outcome["value"] = work()
        except BaseException as exc:  # raised again in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="jcc-template-warm-up")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
