"""The first magics of a fresh kernel, side by side: how long each waits right after `%load_ext`, while torch's
compiler is still loading in the background.

Each round starts a real kernel through jupyter_client, runs `import torch` + `%load_ext jupyter_compile_cache`
in one cell, then one magic, timed from request to reply. `--code DIR` runs the same with the package of another
checkout (a `git worktree` of an older commit, say), so before and after print in one table.

    python -m benchmarks first_magics --out benchmarks/results/first_magics_cpu.json
    python -m benchmarks first_magics --code before=/tmp/before --out benchmarks/results/first_magics_cpu.json
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from benchmarks.harness import CODE_OPTION, Job, checkouts, option

MAGICS = {
    "status": "%compile_cache status",
    "list": "%compile_cache list",
    "explain": "%compile_cache explain toy",
    "usage error": "%compile_cache --bogus",
    "%config": "%config CompileCache",
    "compiling cell": "%%compile_cache toy\nf = torch.compile(lambda x: x.sin() + 1)\nf(torch.ones(4))",
}


def first_magic(code_dir: str, magic: str, work: str) -> float:
    from jupyter_client import KernelManager

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in (code_dir, os.environ.get("PYTHONPATH", "")) if p),
        JUPYTER_COMPILE_CACHE_DIR=os.path.join(work, "store"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "cache"),
    )
    km = KernelManager(kernel_name="python3")  # this Python's ipykernel
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        kc.execute_interactive("import torch\n%load_ext jupyter_compile_cache", timeout=120, output_hook=lambda m: None)
        start = time.perf_counter()
        kc.execute_interactive(magic, timeout=300, output_hook=lambda m: None)  # a usage error replies 'error'
        return time.perf_counter() - start
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


OPTIONS = [CODE_OPTION, option("--rounds", type=int, default=3)]


def run(job: Job) -> None:
    args = job.args
    codes = checkouts(args.code)
    results: dict[str, dict[str, list[float]]] = {label: {} for label in codes}
    with tempfile.TemporaryDirectory() as work:
        for label, code_dir in codes.items():
            for name, magic in MAGICS.items():
                times = []
                for i in range(args.rounds):
                    times.append(first_magic(code_dir, magic, os.path.join(work, f"{label}-{name}-{i}")))
                    job.say(f"{label:>14}  {name:<15} round {i + 1}: {times[-1]:.2f} s")
                results[label][name] = times
                job.keep(codes=codes, seconds=results)
    labels = list(codes)
    rows = [[name] + [f"{statistics.median(results[label][name]):.2f}" for label in labels] for name in MAGICS]
    title = f"first magic after %load_ext in a fresh kernel, median of {args.rounds}, seconds"
    job.table(["magic", *labels], rows, title=title, align="l" + "r" * len(labels))
