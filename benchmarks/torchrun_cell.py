"""A `%%compile_cache` cell that starts torchrun's ranks, restored in a new kernel, against torch's own warm cache,
as a notebook user runs it: in a plain kernel and in the warm kernel.

| case | the kernel (its first cell: `import torch`, and ours `%load_ext jupyter_compile_cache`) | the cell timed |
|---|---|---|
| `cold` | a plain kernel, an empty cache dir and store | `%%compile_cache ddp` over `!torchrun ...`: compiles, saves |
| `torch_warm` | a plain kernel without the extension, on the cold cell's cache dir | `!torchrun ...` |
| `ours_plain` | a new plain kernel, an empty cache dir, the cold cell's store | the `%%compile_cache` cell: restored |
| `ours_warm` | the same, its kernel forked by the warm kernel's template | the same |

The job is benchmarks/worker_processes.py's DDP training script (2 ranks, gloo on the CPU, NCCL on a GPU). Each
round runs `torch_warm`, `ours_plain` and `ours_warm` in a turning order, each on a new kernel (and ours on a new
empty cache dir); a row says the cell's seconds (sent to idle), its ratio to torch's warm cell of the same round,
each rank's FX-graph misses, whether every rank's losses equal the cold cell's, and what our cell's line said.
torch's first run on its warm cache runs once before the rounds, uncounted: it still writes files the later runs
find (its ranks' backend phase took 2 s more than in the runs after it).

    python -m benchmarks torchrun_cell --rounds 3 --out benchmarks/results/torchrun_cell_cpu.json
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks.harness import Job, option
from benchmarks.warm_restart import template_ready
from benchmarks.worker_processes import TRAIN
from jupyter_compile_cache.kernels.kernel_runner import KernelRunner

LAUNCHER = [sys.executable, "-m", "jupyter_compile_cache.kernels.launcher", "-f", "{connection_file}"]


STARTED = "\nfrom jupyter_compile_cache.kernels.kernel_start import this_kernel_start as _s\nprint('STARTED', _s().how)"


def cell_case(env: dict[str, str], setup: str, cell: str, warm: bool = False) -> tuple[float, str]:
    """A new kernel (forked by the warm kernel's template where `warm`, which it must be): SETUP, then CELL, timed."""
    runner = KernelRunner(env, kernel_cmd=LAUNCHER if warm else None)
    try:
        _, said = runner.run(setup + (STARTED if warm else ""))
        if warm and "STARTED forked" not in said:
            raise RuntimeError(f"the warm kernel was not forked: {said[-600:]}")
        return runner.run(cell)
    finally:
        runner.close()


def ranks(output: str) -> dict[int, tuple[str, int]]:
    found = re.findall(r"RANK (\d+) LOSSES (\[.*?\]) MISSES (\d+)", output)
    return {int(r): (losses, int(m)) for r, losses, m in found}


OPTIONS = [
    option("--rounds", type=int, default=3),
    option("--ranks", type=int, default=2),
    option("--width", type=int, default=256),
]


def run(job: Job) -> None:
    args = job.args
    work = tempfile.mkdtemp(prefix="jcc-torchrun-cell-")
    script = os.path.join(work, "train.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(TRAIN)
    torchrun = f"!{sys.executable} -m torch.distributed.run --standalone --nproc_per_node {args.ranks} {script} 2>&1"
    runtime = os.path.join(work, "runtime")
    os.makedirs(runtime, mode=0o700)
    base = {
        "BENCH_WIDTH": str(args.width), "BENCH_MODE": "", "BENCH_LAYERS": "4", "BENCH_COMPILE_STEP": "0",
        "BENCH_DDP": "1", "OMP_NUM_THREADS": "1", "JUPYTER_COMPILE_CACHE_DIR": os.path.join(work, "store"),
        "JUPYTER_COMPILE_CACHE_RUNTIME_DIR": runtime, "JUPYTER_COMPILE_CACHE_HUB": "",
    }  # fmt: skip

    def env(cache: str) -> dict[str, str]:
        return dict(base, TORCHINDUCTOR_CACHE_DIR=os.path.join(work, f"cache-{cache}"))

    ours_setup, torch_setup = "import torch\n%load_ext jupyter_compile_cache", "import torch"
    ours_cell = f"%%compile_cache ddp\n{torchrun}"
    cold_seconds, cold_out = cell_case(env("torch"), ours_setup, ours_cell)
    cold = ranks(cold_out)
    job.say(f"cold: {cold_seconds:.2f} s, FX misses {[m for _, m in cold.values()]}")
    # torch's first run on its warm cache still writes what the cold run left to later runs (2 s more, by the
    # ranks' backend phase): its steady state is the run after it, the one compared.
    job.say(f"torch's first warm run: {cell_case(env('torch'), torch_setup, torchrun)[0]:.2f} s (not compared)")
    # The template reads TORCHINDUCTOR_CACHE_DIR: its kernels share one dir, emptied before each of them.
    warm_cache = env("warm")["TORCHINDUCTOR_CACHE_DIR"]
    runner = KernelRunner(env("warm"), kernel_cmd=LAUNCHER)  # starts the warm kernel's template
    runner.close()
    deadline = time.monotonic() + 300
    while not template_ready(dict(os.environ, **env("warm"))) and time.monotonic() < deadline:
        time.sleep(1)
    cases = ["torch_warm", "ours_plain", "ours_warm"]
    rows, results = [], []
    for i in range(args.rounds):
        order = cases[i % len(cases) :] + cases[: i % len(cases)]
        took = {}
        for case in order:
            if case == "torch_warm":
                seconds, out = cell_case(env("torch"), torch_setup, torchrun)
            elif case == "ours_plain":
                seconds, out = cell_case(env(f"{case}-{i}"), ours_setup, ours_cell)
            else:
                shutil.rmtree(warm_cache, ignore_errors=True)
                seconds, out = cell_case(env("warm"), ours_setup, ours_cell, warm=True)
            per_rank = ranks(out)
            line = next((x.strip() for x in out.splitlines() if "'ddp' ran in" in x), "")
            took[case] = {
                "seconds": seconds,
                "fx_misses": {r: m for r, (_, m) in sorted(per_rank.items())},
                "same_losses": {r: losses for r, (losses, _) in per_rank.items()}
                == {r: losses for r, (losses, _) in cold.items()},
                "line": line,
            }
            job.say(f"round {i + 1} {case}: {seconds:.2f} s {line}")
            for rank, phases in sorted(re.findall(r"RANK (\d+) PHASES (.*)", out)):  # where a difference lies
                job.say(f"    rank {rank} (s): {phases}")
        results.append(took)
        job.keep(cold_seconds=cold_seconds, rounds=results)
        for case in cases:
            ratio = took[case]["seconds"] / took["torch_warm"]["seconds"]
            misses = "/".join(str(m) for m in took[case]["fx_misses"].values())
            rows.append([i + 1, case, f"{took[case]['seconds']:.2f}", f"{ratio:.2f}x", misses,
                         took[case]["same_losses"], took[case]["line"][:90]])  # fmt: skip
    headers = ["round", "case", "cell s", "vs torch_warm", "FX misses per rank", "same losses", "our line"]
    title = f"cold cell: {cold_seconds:.2f} s ({args.ranks} ranks, width {args.width})"
    job.table(headers, rows, title=title, align="rlrrrll")
    for case in cases[1:]:
        ratios = [r[case]["seconds"] / r["torch_warm"]["seconds"] for r in results]
        job.note(f"{case}: median {statistics.median(ratios):.2f}x torch's warm cell, {sum(x <= 1.0 for x in ratios)} "
                 f"of {len(ratios)} rounds at or under 1.0x")  # fmt: skip
