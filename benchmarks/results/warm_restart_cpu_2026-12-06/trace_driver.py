"""The driver of trace.txt: restarts of a forked kernel through jupyter_client, each step's time appended to the
file JCC_TRACE names by the instrumentation of trace_instrumentation.patch (applied to a scratch clone only).

    python benchmarks/results/warm_restart_cpu_2026-12-06/trace_driver.py 8
"""

import os
import sys
import tempfile
import time
from queue import Empty

from jupyter_client import KernelManager

from benchmarks.warm_restart import environment, ready, run_cell, template_ready
from jupyter_compile_cache.kernels.warm_kernel import install_kernel_spec

CELL = "import torch\n%load_ext jupyter_compile_cache"


def main(rounds: int) -> None:
    work = tempfile.mkdtemp(prefix="restart-trace-")
    os.makedirs(os.path.join(work, "runtime"), mode=0o700)
    install_kernel_spec(prefix=os.path.join(work, "prefix"))
    os.environ["JUPYTER_PATH"] = os.path.join(work, "prefix", "share", "jupyter")
    env = environment("w", work)
    trace = env["JCC_TRACE"] = os.path.join(work, "trace")

    def mark(step: str) -> None:
        with open(trace, "a") as f:
            f.write(f"{step} {time.time():.4f}\n")

    km = KernelManager(kernel_name="python3-compile-cache")
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    ready(kc)
    run_cell(kc, CELL)
    waited = time.time()
    while not template_ready(env) and time.time() - waited < 120:
        time.sleep(0.1)
    time.sleep(3)
    open(trace, "w").close()

    def nudge() -> None:
        """As the server's nudge: kernel_info until a shell reply, and any IOPub message; each one marked."""
        replied = heard = False
        while not (replied and heard):
            kc.kernel_info()
            end = time.time() + 0.5
            while time.time() < end and not (replied and heard):
                try:
                    mark("c_shell_" + kc.get_shell_msg(timeout=0.005)["msg_type"])
                    replied = True
                except Empty:
                    pass
                try:
                    msg = kc.get_iopub_msg(timeout=0.005)
                    mark("c_iopub_" + msg["msg_type"] + "_" + str(msg["content"].get("execution_state", "")))
                    heard = True
                except Empty:
                    pass

    for _ in range(rounds):
        time.sleep(2)
        mark("ROUND_restart_request")
        km.shutdown_kernel(restart=True)
        mark("shutdown_done")
        km.start_kernel(**km._launch_args)
        mark("start_kernel_returned")
        nudge()
        mark("ready")
        run_cell(kc, CELL)
        mark("cell1_done")
        while True:
            try:
                kc.get_iopub_msg(timeout=0.1)
            except Empty:
                break
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    rows: list[list[tuple[str, float]]] = []
    start = 0.0
    with open(trace) as f:
        for line in f:
            step, at = line.split()
            if step.startswith("ROUND"):
                rows.append([])
                start = float(at)
            if rows:
                rows[-1].append((step, float(at) - start))
    for row in rows:
        print("  ".join(f"{step}={seconds * 1000:.0f}" for step, seconds in row))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
