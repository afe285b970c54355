"""A job whose compiled work runs in worker processes (torchrun's ranks), with 1, 2 and 4 ranks, side by side:

| column | what runs |
|---|---|
| `cold` | `torchrun ... train.py` on an empty torch cache dir |
| `torch_warm` | the same again, on the cold run's cache dir (torch's own warm cache) |
| `ours_cold` | `jupyter-compile-cache run NAME -- torchrun ...` on an empty cache dir and store: compiles, saves |
| `ours` | the same on ANOTHER empty cache dir, restoring from the store (a restarted kernel, another node) |

Each row also says every rank's FX-graph misses and whether its losses equal the cold run's. The script is the
DDP training job of tests/end_to_end/test_worker_processes.py, wider (`--width`), on the GPU with NCCL when there
is one (each rank its own GPU, or all sharing the one), else on the CPU with gloo; `--mode max-autotune` makes the
compile most of the job's time, as it is for a real model on a GPU. `--layers N` gives the model N layers of
distinct widths (each its own matmul shapes, tuned apart under max-autotune) and `--compile-step` compiles the
AdamW step too: a job with more to compile, whose process start, `import torch` and NCCL set-up weigh less.

    python -m benchmarks worker_processes --ranks 1 2 4 --out benchmarks/results/worker_processes_cpu.json

`--repeat N` runs N rounds of `torch_warm` and `ours` (each on a new empty dir, the order turning) and prints the
median ratio with its spread: one round cannot tell the two apart. `--precompile-processes` adds `ours_carried` to
each round: ours with precompile carried into the ranks (`--precompile-processes`), from a bundle it saved itself.
`--no-ddp` has each rank train its compiled model alone: torch packages no precompile entry for a model inside DDP.
Each rank prints its seconds to its first step and in its steps, so a difference shows whether it lies in the
ranks' start or in the compiled work, and its phases: `import torch`, the process group, the model and DDP, the
seconds Dynamo spent on its frames (of which the backend's: the restored graphs and kernels loaded), the most that
carrying precompiled entries into the ranks can save, and the precompile entries it loaded.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

from benchmarks.harness import Job, option
from jupyter_compile_cache.storage.store import LocalStore

TRAIN = """
import time
started = time.perf_counter()
import os, torch, torch.distributed as dist
from torch._dynamo.utils import compilation_time_metrics, counters
imported = time.perf_counter()
cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
grouped = time.perf_counter()
rank = dist.get_rank()
device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
torch.manual_seed(0)
W = int(os.environ["BENCH_WIDTH"])
LAYERS = int(os.environ["BENCH_LAYERS"])
widths = [W] * (LAYERS + 1) if LAYERS == 4 else [W + 64 * i for i in range(LAYERS)] + [W]
layers = [m for i in range(LAYERS) for m in (torch.nn.Linear(widths[i], widths[i + 1]), torch.nn.GELU())]
class Net(torch.nn.Module):  # the script's own class: torch packages its forward for precompile
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
model = Net().to(device)
compiled = torch.compile(model, mode=os.environ["BENCH_MODE"] or None)
ddp = torch.nn.parallel.DistributedDataParallel(compiled) if os.environ["BENCH_DDP"] == "1" else compiled
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = torch.compile(opt.step) if os.environ["BENCH_COMPILE_STEP"] == "1" else opt.step
losses = []
ready = time.perf_counter()
for _ in range(3):
    x = torch.randn(32, widths[0], device=device)
    loss = ddp(x).pow(2).mean()
    loss.backward()
    step()
    opt.zero_grad()
    losses.append(round(loss.item(), 5))
print(f"RANK {rank} LOSSES {losses} MISSES {counters['inductor']['fxgraph_cache_miss']}", flush=True)
print(f"RANK {rank} SECONDS start {ready - started:.2f} steps {time.perf_counter() - ready:.2f}", flush=True)
dynamo = sum(compilation_time_metrics.get("_compile.compile_inner", []))
backend = sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))
print(
    f"RANK {rank} PHASES import {imported - started:.2f} group {grouped - imported:.2f} "
    f"model {ready - grouped:.2f} dynamo {dynamo:.2f} backend {backend:.2f} "
    f"precompile_hits {counters['dynamo_cache']['dynamo_cache_hit']}",
    flush=True,
)
dist.destroy_process_group()
"""


def run_command(
    command: list[str], env: dict[str, str], label: str = ""
) -> tuple[float, dict[int, tuple[str, int]], str]:
    """COMMAND's wall time, each rank's (losses, FX-graph misses), and its stderr; with LABEL the time is printed, and
    the ranks' own seconds (to their first step, and the steps) beside it."""
    start = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])}... exited {out.returncode}:\n{out.stderr[-2000:]}")
    ranks = {
        int(r): (losses, int(m)) for r, losses, m in re.findall(r"RANK (\d+) LOSSES (\[.*?\]) MISSES (\d+)", out.stdout)
    }
    if label:  # as each case ends: a run cut short still says what it measured
        per_rank = re.findall(r"RANK (\d+) SECONDS start ([\d.]+) steps ([\d.]+)", out.stdout)
        ranks_said = ", ".join(f"rank {r}: {a} s to its first step, {b} s of steps" for r, a, b in per_rank)
        phases = re.findall(r"RANK (\d+) PHASES (.*)", out.stdout)
        ranks_said += "".join(f"\n    rank {r} phases (s): {p}" for r, p in sorted(phases))
        ours = [line.strip() for line in out.stderr.splitlines() if line.startswith("compile_cache:")]
        print(f"  {label}: {seconds:.2f} s ({ranks_said})" + "".join(f"\n    {line}" for line in ours), flush=True)
    return seconds, ranks, out.stderr


def _files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names}


def row(
    ranks: int,
    work: str,
    width: int,
    mode: str,
    again: bool = False,
    layers: int = 4,
    compile_step: bool = False,
    repeat: int = 1,
    carried: bool = False,
    ddp: bool = True,
) -> dict:
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(TRAIN)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), script]
    ours = [sys.executable, "-m", "jupyter_compile_cache", "run", "bench", "--no-hub", "--store"]
    # `ours_carried`: the same with precompile carried into the ranks, from a bundle of its own
    carry = [sys.executable, "-m", "jupyter_compile_cache", "run", "bench", "--no-hub", "--precompile-processes"]
    base = dict(
        os.environ,
        BENCH_WIDTH=str(width),
        BENCH_MODE=mode,
        BENCH_LAYERS=str(layers),
        BENCH_COMPILE_STEP="1" if compile_step else "0",
        BENCH_DDP="1" if ddp else "0",
        PYTHONWARNINGS="ignore",
        OMP_NUM_THREADS="1",
    )

    def env(name: str) -> dict[str, str]:
        return dict(base, TORCHINDUCTOR_CACHE_DIR=os.path.join(work, f"cache-{ranks}-{mode}-{name}"))

    out = {}
    out["cold"] = run_command(torchrun, env("torch"), f"{ranks} rank(s) cold")
    torch_files = [_files(env("torch")["TORCHINDUCTOR_CACHE_DIR"])]
    out["torch_warm"] = run_command(torchrun, env("torch"), f"{ranks} rank(s) torch_warm")
    torch_files.append(_files(env("torch")["TORCHINDUCTOR_CACHE_DIR"]))
    store = os.path.join(work, f"store-{ranks}-{mode}")
    out["ours_cold"] = run_command([*ours, store, "--", *torchrun], env("ours-a"), f"{ranks} rank(s) ours_cold")
    out["ours"] = run_command([*ours, store, "--", *torchrun], env("ours-b"), f"{ranks} rank(s) ours")
    versions_after_ours = len(LocalStore(store).versions("bench"))
    carried_store = os.path.join(work, f"store-{ranks}-{mode}-carried")

    def command(case: str, i: int) -> tuple[list[str], dict[str, str]]:
        if case == "torch_warm":
            return torchrun, env("torch")
        if case == "ours":
            return [*ours, store, "--", *torchrun], env(f"ours-r{i}")
        return [*carry, "--store", carried_store, "--", *torchrun], env(f"carried-r{i}")

    cases = ["torch_warm", "ours"]
    if carried:
        cases.append("ours_carried")
        out["ours_carried_cold"] = run_command(*command("ours_carried", -1), f"{ranks} rank(s) ours_carried_cold")
        out["ours_carried"] = run_command(*command("ours_carried", 0), f"{ranks} rank(s) ours_carried")
    # More rounds of torch's warm run and ours restored (each on a new empty dir), the order turning each round:
    # they differ by less than one torchrun's spread from run to run, so one round shows nothing.
    rounds = [{case: out[case][0] for case in cases}]
    for i in range(1, repeat):
        order = cases[i % len(cases) :] + cases[: i % len(cases)]
        took = {
            case: run_command(*command(case, i), f"{ranks} rank(s) {case}, round {i + 1}/{repeat}") for case in order
        }
        rounds.append({case: took[case][0] for case in cases})
        assert all(m == 0 for case in cases[1:] for _, m in took[case][1].values()), took  # every rank restored
    if again:  # once more on another empty dir: does a restored torchrun's saving end after one time?
        out["ours_again"] = run_command([*ours, store, "--", *torchrun], env("ours-c"), f"{ranks} rank(s) ours_again")
    # What a restored job saved anew, if it did: the members of the newest version that the one before lacks.
    versions = LocalStore(store).versions("bench")
    new_members = (
        sorted({(m.name, m.sha256) for m in versions[0].members} - {(m.name, m.sha256) for m in versions[1].members})
        if len(versions) > 1
        else []
    )
    cold_losses = {r: losses for r, (losses, _) in out["cold"][1].items()}
    result = {}
    for name, (seconds, per_rank, stderr) in out.items():
        result[name] = {
            "seconds": seconds,
            "fx_misses": {r: m for r, (_, m) in sorted(per_rank.items())},
            "same_losses": {r: losses for r, (losses, _) in per_rank.items()} == cold_losses,
            "line": next((line for line in stderr.splitlines() if "ran in" in line), ""),
        }
        print(f"  {ranks} rank(s) {name}: {seconds:.2f} s, FX misses {result[name]['fx_misses']}", flush=True)
    result["pairs"] = [
        {**took, "ratio": took["ours"] / took["torch_warm"]}
        | ({"carried_ratio": took["ours_carried"] / took["torch_warm"]} if carried else {})
        for took in rounds
    ]
    result["torch_warm_wrote"] = sorted(torch_files[1] - torch_files[0])[:40]
    # What the first restored run built that its cold run had not (torch's run-time tuning: new Triton variants),
    # set against what torch's first warm run built: which kernels each rebuilt, and how many times.
    ours_wrote = _files(env("ours-b")["TORCHINDUCTOR_CACHE_DIR"]) - _files(env("ours-a")["TORCHINDUCTOR_CACHE_DIR"])
    result["rebuilt_kernels"] = {
        case: dict(Counter(os.path.basename(p)[: -len(".cubin")] for p in files if p.endswith(".cubin")))
        for case, files in (("torch_warm", torch_files[1] - torch_files[0]), ("ours", ours_wrote))
    }
    for case, kernels in result["rebuilt_kernels"].items():
        print(f"  {ranks} rank(s) {case}: Triton kernels built at run time, not in its cold run: {kernels}", flush=True)
    result["restored_saved"] = {
        "versions_after_ours": versions_after_ours,
        "versions": len(versions),
        "new_members": [name for name, _ in new_members],
    }
    if new_members:
        names = result["restored_saved"]["new_members"]
        print(f"  the restored job saved {len(names)} new files, e.g. {names[:12]}", flush=True)
    return result


OPTIONS = [
    option("--ranks", type=int, nargs="+", default=[1, 2, 4]),
    option("--width", type=int, default=256),
    option("--mode", default="", help="torch.compile's mode (max-autotune: a job whose compile is most of its time)"),
    option("--layers", type=int, default=4, help="layers; other than 4, each of a distinct width"),
    option("--compile-step", action="store_true", help="compile the AdamW step too"),
    option("--again", action="store_true", help="restore once more, on another empty dir"),
    option(
        "--precompile-processes",
        action="store_true",
        help="one more case, ours_carried: ours with --precompile-processes (the ranks load precompile entries too)",
    ),
    option("--no-ddp", action="store_true", help="each rank trains its compiled model alone, no DDP"),
    option("--repeat", type=int, default=1, help="rounds of torch warm and ours restored, the order turning"),
]


def run(job: Job) -> None:
    args = job.args
    import torch

    job.meta |= {"device": "cuda" if torch.cuda.is_available() else "cpu", "gpus": torch.cuda.device_count()}
    job.meta |= {"width": args.width, "mode": args.mode, "layers": args.layers, "compile_step": args.compile_step}
    job.meta |= {"precompile_processes": args.precompile_processes, "ddp": not args.no_ddp}
    results: dict = {"rows": {}}
    with tempfile.TemporaryDirectory(prefix="worker-processes-") as work:
        for n in args.ranks:
            results["rows"][n] = row(
                n, work, args.width, args.mode, args.again, args.layers, args.compile_step, args.repeat,
                args.precompile_processes, not args.no_ddp,
            )  # fmt: skip
            job.keep(**results)
    carried = args.precompile_processes
    headers = [
        "ranks", "cold s", "torch warm s", "ours cold s", "ours restored s", "ours / torch warm", "ours / cold",
        "FX misses per rank (ours)", "losses equal",
    ]  # fmt: skip
    headers += ["ours carried s", "carried / torch warm", "carried / cold"] if carried else []
    rows = []
    for n, r in results["rows"].items():
        ours, warm, cold = r["ours"]["seconds"], r["torch_warm"]["seconds"], r["cold"]["seconds"]
        cases = ("cold", "torch_warm", "ours_cold", "ours") + (("ours_carried_cold", "ours_carried") if carried else ())
        same = all(r[case]["same_losses"] for case in cases)
        rows.append([
            n, f"{cold:.2f}", f"{warm:.2f}", f"{r['ours_cold']['seconds']:.2f}", f"{ours:.2f}", f"{ours / warm:.2f}x",
            f"{ours / cold:.2f}x", r["ours"]["fx_misses"], same,
        ])  # fmt: skip
        if carried:
            mine = r["ours_carried"]["seconds"]
            rows[-1] += [f"{mine:.2f}", f"{mine / warm:.2f}x", f"{mine / cold:.2f}x"]
    job.table(headers, rows)
    if args.repeat > 1:
        paired = []
        for n, r in results["rows"].items():
            for case, key in (("ours", "ratio"), ("ours_carried", "carried_ratio"))[: 2 if carried else 1]:
                ratios = [p[key] for p in r["pairs"]]
                paired.append([
                    n, case, len(ratios), f"{statistics.median(p['torch_warm'] for p in r['pairs']):.2f}",
                    f"{statistics.median(p[case] for p in r['pairs']):.2f}", ", ".join(f"{x:.3f}" for x in ratios),
                    f"**{statistics.median(ratios):.3f}x**", f"{min(ratios):.3f}-{max(ratios):.3f}",
                ])  # fmt: skip
        headers = ["ranks", "case", "rounds", "torch warm s (median)", "restored s (median)", "/ torch warm, per round"]
        job.table([*headers, "median", "spread (min-max)"], paired)
