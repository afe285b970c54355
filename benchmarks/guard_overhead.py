"""What our guards cost per call, in steady state: plain torch.compile vs `%%compile_cache`, one run, side by side.

A restored precompile entry carries one extra guard (the identity checks torch dropped, see precompile.py); an entry
compiled cold under the magic has torch's full guards, as plain torch.compile. The model calls a global helper and a
callable attribute, so the restored entry really has dropped guards to check. Each case is a fresh process:

  plain      torch.compile, no extension
  ours_cold  compiled inside `session.cell` (precompile on), then called outside it
  ours       a new process restores that bundle into an empty cache dir, then calls

  python -m benchmarks guard_overhead --device cpu --out benchmarks/results/guard_overhead_cpu.json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks.harness import Job, option

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time, torch
from torch._dynamo.utils import counters
mode, device, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
def helper(t):
    return t.sin()
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(64, 64)
        self.l2 = torch.nn.Linear(64, 64)
        self.act = torch.relu
    def forward(self, t):
        return self.l2(helper(self.act(self.l1(t))))
torch.manual_seed(0)
model = Net().to(device)
x = torch.randn(16, 64, device=device)
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
with torch.no_grad():
    if mode == "plain":
        compiled = torch.compile(model)
        compiled(x)
    else:
        from jupyter_compile_cache.core.session import CompileCacheSession
        session = CompileCacheSession(store_dir=os.environ["JUPYTER_COMPILE_CACHE_DIR"])
        with session.cell("overhead", ) as report:
            compiled = torch.compile(model)
            compiled(x)
    for _ in range(200):
        compiled(x)
    sync()
    samples = []
    for _ in range(calls // 100):
        start = time.perf_counter()
        for _ in range(100):
            compiled(x)
        sync()
        samples.append((time.perf_counter() - start) / 100 * 1e6)
print("RESULT " + json.dumps({"case": mode, "us_per_call": samples,
      "dynamo_cache_hit": counters["dynamo_cache"]["dynamo_cache_hit"],
      "recompiles": sum(counters["recompiles"].values())}))
"""


def run_case(case: str, device: str, calls: int, cache: str, store: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, JUPYTER_COMPILE_CACHE_DIR=store, PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    mode = "ours" if case.startswith("ours") else "plain"
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, device, str(calls)], env=env, capture_output=True, text=True
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{case} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    row = json.loads(line[len("RESULT ") :])
    row["case"] = case
    row["median_us"] = statistics.median(row["us_per_call"])
    return row


OPTIONS = [
    option("--device", default="cpu"),
    option("--calls", type=int, default=5000),
    option("--repeat", type=int, default=3, help="rounds of the three cases (the order alternates)"),
]


def run(job: Job) -> None:
    args = job.args
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.repeat):
            store = os.path.join(work, f"store-{r}")  # ours_cold compiles cold; ours restores its bundle
            for case in ("plain", "ours_cold", "ours"):
                cache = os.path.join(work, f"{case}-{r}")  # each case: an empty cache dir
                rows.append(dict(run_case(case, args.device, args.calls, cache, store), round=r))
                job.say(f"  round {r} {case:10s} {rows[-1]['median_us']:8.1f} us/call")
    medians = {
        c: statistics.median(x["median_us"] for x in rows if x["case"] == c) for c in ("plain", "ours_cold", "ours")
    }
    job.meta |= {"device": args.device, "calls": args.calls}
    job.keep(medians_us=medians, rows=rows)
    table = [[case, f"{us:.1f}", f"{us / medians['plain']:.3f}x"] for case, us in medians.items()]
    job.table(["case", "us per call (median)", "vs plain torch.compile"], table, align="lrr")
