"""What a recorded cell leaves behind in the kernel: each audited event (every `id()`, every class a pickle loads,
every `open`) after one cell was recorded, against a process where none was, side by side in one run.

A recorder built on `sys.addaudithook` would stay for the process's life, and CPython would call it at every event;
torch_adapter/open_recorder.py wraps the opening functions for the cell's length only, and this shows what is left.
Each case is a fresh process, the cases taking turns over `--rounds` rounds; the table shows each case's fastest
round:

  none      torch imported, no cell recorded
  ours      torch imported, then one cell recorded (`capture.CellCapture`: start, an open, collect), idle as
            between cells

Measured per case: `id()` (one event), and torch's config copy that `torch.compile` makes at each call (a deepcopy:
one `id()` per object). To compare two versions of the package, run it once with each on PYTHONPATH.

  python -m benchmarks audit_hook --rounds 5 --out benchmarks/results/audit_hook_cpu.json
"""

from __future__ import annotations

import json
import subprocess
import sys

from benchmarks.harness import Job, option

OPTIONS = [option("--rounds", type=int, default=3)]

CHILD = r"""
import json, os, sys, time
import torch
if sys.argv[1] == "ours":
    import tempfile
    from jupyter_compile_cache.torch_adapter import capture
    root = tempfile.mkdtemp()
    watcher = capture.CellCapture({"inductor": root})
    watcher.start()
    os.makedirs(root + "/fxgraph/aa")
    open(root + "/fxgraph/aa/graph", "w").close()
    assert list(watcher.collect().files) == ["inductor/fxgraph/aa/graph"]
def best(fn, n, repeat=5):
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out = min(out, (time.perf_counter() - t) / n)
    return out
x = object()
import jupyter_compile_cache
print("RESULT=" + json.dumps({
    "id_ns": best(lambda: id(x), 100_000) * 1e9,
    "config_copy_us": best(torch._inductor.config.get_config_copy, 200) * 1e6,
    "recorded": sys.argv[1] == "ours",
    "package": jupyter_compile_cache.__file__,
}))
"""
CASES = ("none", "ours")
METRICS = (("id_ns", "id(), ns"), ("config_copy_us", "torch's config copy, us"))


def measure(case: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT="))[len("RESULT=") :])


def run(job: Job) -> None:
    args = job.args
    runs: dict[str, list[dict]] = {case: [] for case in CASES}
    for i in range(args.rounds):
        for case in CASES if i % 2 == 0 else CASES[::-1]:
            runs[case].append(measure(case))
            job.say(f"round {i + 1}/{args.rounds} {case}: {runs[case][-1]}")
    best = {case: {key: min(r[key] for r in runs[case]) for key, _ in METRICS} for case in CASES}
    rows = [
        [label, f"{best['none'][key]:.1f}", f"{best['ours'][key]:.1f}", f"{best['ours'][key] / best['none'][key]:.2f}x"]
        for key, label in METRICS
    ]
    job.keep(runs=runs, best=best)
    headers = ["per call (fastest round)", "no cell recorded", "ours, after a cell", "ours / none"]
    job.table(headers, rows, title=f"package: {runs['ours'][0]['package']}")
