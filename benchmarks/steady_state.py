"""Steady state: does restored code run as fast as torch's own, call after call? A gate that can see 2 %.

Two kernels running the same code differ by more than 2 % (CPU frequency, allocator state, which kernel ran
first), so one pair shows nothing. For each workload this runs `--pairs` pairs of new kernels, alternating which
of the two goes first:

  torch   a plain kernel on torch's warm cache dir (a cold plain kernel filled it first)
  ours    `%%compile_cache` restoring the workload's bundle into an EMPTY cache dir (a cold `%%compile_cache`
          kernel saved it first): restored precompile entries, with our identity checks

Each kernel builds the model, runs the compiled cell, then, in later cells as a user would, calls the compiled
code `--warmup` times untimed and `--calls` times timed (synchronised on a GPU). A pair's ratio is ours' median call
over torch's; the table shows the median of the pairs' ratios and their spread (min-max), and the gate passes when
the median is at most `--gate` (1.02). With `--rounds N` both kernels of a pair stay alive and their timed batches
take turns, N batches each, once no background thread of ours is left in either: a slow spell of the machine then
falls on both kinds alike. Each kernel's torch miss counters after the timed calls are kept: a recompile during the
calls would show there. Both kinds' answers must be equal to the bit.

  python -m benchmarks steady_state --size tiny --out benchmarks/results/steady_state_cpu.json
  python -m benchmarks steady_state --size real --device cuda --out benchmarks/results/steady_state_gpu.json

Workloads (real_work.py's model code): generate (HF static-cache generate), decode (the explicit recipe), train (a
compiled forward, backward and a compiled AdamW step), flex (a FlexAttention block), vision (ViT) and encoder (a
BERT encoder's forward, from a small config).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from benchmarks.harness import Job, option
from benchmarks.real_work import BUILD, CELLS, SETUP, SIZES
from jupyter_compile_cache.kernels.kernel_runner import KernelRunner

BUILD = {
    **BUILD,
    "encoder": """
ecfg = T.BertConfig(vocab_size=S["vocab"] * 4, hidden_size=max(64, S["hidden"] // 2),
                    num_hidden_layers=max(2, S["layers"] // 2), num_attention_heads=4,
                    intermediate_size=max(128, S["inter"] // 2))
encoder = T.BertModel(ecfg).to(DEVICE).eval()
tokens = torch.randint(0, ecfg.vocab_size, (S["batch"], 64), device=DEVICE)
""",
}
CELLS = {
    **{name: CELLS[name] for name in ("generate", "decode", "train", "flex", "vision")},
    "encoder": (
        "encoder",
        """
run_encoder = maybe_compile(encoder)
with torch.no_grad():
    hidden = run_encoder(input_ids=tokens).last_hidden_state
sync()
print("RESULT", round(float(hidden.float().abs().mean()), 4))
""",
    ),
}
# One call of each workload's compiled code, as a later cell makes it; the last value is printed to compare answers.
STEP = {
    "generate": (
        "out = model.generate(prompt, max_new_tokens=S['new'], do_sample=False, **kwargs)\nlast = out[0, -4:].tolist()"
    ),
    "decode": "last = decode(prompt, S['new'])[-4:]",
    "train": (
        "loss = torch.nn.functional.mse_loss(fwd(x), y)\nloss.backward()\nopt_step()\nopt.zero_grad()\n"
        "last = round(float(loss), 6)"
    ),
    "flex": (
        "with torch.no_grad():\n    out = maybe_compile(block)(xb)\nlast = round(float(out.float().abs().mean()), 6)"
    ),
    "vision": (
        "with torch.no_grad():\n    logits = maybe_compile(vit)(pixel_values=pixels).logits\n"
        "last = round(float(logits.float().abs().mean()), 6)"
    ),
    "encoder": (
        "with torch.no_grad():\n    hidden = run_encoder(input_ids=tokens).last_hidden_state\n"
        "last = round(float(hidden.float().abs().mean()), 6)"
    ),
}
TIMED = """
import json as _json, time as _time, textwrap as _tw, threading as _th
from torch._dynamo.utils import counters as _c
_threads = sorted(t.name for t in _th.enumerate())  # a thread of ours still at work would share the GIL with the calls
import sys as _sys, traceback as _tb
_frames = _sys._current_frames()
_busy = {{t.name: [l.strip() for l in _tb.format_stack(_frames[t.ident])[-2:]] for t in _th.enumerate()
          if t.ident in _frames and t.name.startswith(("jupyter_compile_cache", "ThreadPool"))}}
def _call():
{step}
    return last
for _ in range({warmup}):
    _call()
import gc as _gc
_gc_time, _gc_runs, _gc_start = [0.0], [0, 0, 0], [0.0]
def _gc_timer(phase, info):  # how long the calls spent collecting, per generation: a bigger heap costs there
    if phase == "start":
        _gc_start[0] = _time.perf_counter()
    else:
        _gc_time[0] += _time.perf_counter() - _gc_start[0]
        _gc_runs[info["generation"]] += 1
_gc.callbacks.append(_gc_timer)
_times = []
for _ in range({calls}):
    sync()
    _t = _time.perf_counter()
    _last = _call()
    sync()
    _times.append(_time.perf_counter() - _t)
_gc.callbacks.remove(_gc_timer)
_keep = ("fxgraph_cache_miss", "autograd_cache_miss", "dynamo_cache_miss", "unique_graphs")
print("STEADY=" + _json.dumps({{"times": _times, "last": _last, "threads": _threads, "busy": _busy,
    "gc_ms": round(_gc_time[0] * 1000, 3), "gc_runs": _gc_runs, "tracked_objects": len(_gc.get_objects()),
    "autotuned": globals().get("_tuned", []),
    "counters": {{n: v for g in _c.values() for n, v in g.items() if (n in _keep or "cudagraph" in n) and v}}}}))
"""
# On a GPU, before the compiled cell: which Triton kernels benchmark their configs at run time (an autotune-cache
# miss), and whether the `.best_config` torch looked for was there.
AUTOTUNE_TRACE = """
import os as _os
_tuned = []
try:
    from torch._inductor.runtime import triton_heuristics as _trh
    from torch._inductor.runtime.autotune_cache import AutotuneCache as _ATC
except ImportError:
    _trh = None
if _trh is not None:
    _bac = _trh.CachingAutotuner.benchmark_all_configs
    def _traced(self, *a, **k):
        _fn = self.filename or ""
        try:
            _c = _ATC.create(self.inductor_meta, _fn, _trh.hash_configs([l.config for l in self.launchers]))
            _best = _c.local_cache[1] if _c and _c.local_cache else None
        except Exception as _e:
            _best = repr(_e)
        _tuned.append({"kernel": getattr(getattr(self, "fn", None), "__name__", "?"), "file": _fn,
            "file_exists": _os.path.exists(_fn), "configs": len(self.launchers),
            "info": {_k: str(_v) for _k, _v in (getattr(self, "autotune_cache_info", None) or {}).items()},
            "best_config": _best, "best_config_exists": bool(_best) and _os.path.exists(str(_best))})
        return _bac(self, *a, **k)
    _trh.CachingAutotuner.benchmark_all_configs = _traced
"""
# With --profile: where a call's time goes (torch's profiler over the same calls, the top rows by self CPU time,
# with their device time), and for ours where the restored cell's time goes (cProfile, the top rows by cumulative time).
PROFILED_CALLS = """
import json as _json
from torch.profiler import profile as _profile, ProfilerActivity as _PA
_acts = [_PA.CPU] + ([_PA.CUDA] if DEVICE == "cuda" else [])
def _call():
{step}
    return last
with _profile(activities=_acts) as _prof:
    for _ in range({calls}):
        _call()
    sync()
_rows = sorted(_prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:30]
print("PROFILE=" + _json.dumps([[e.key[:90], e.count, round(e.self_cpu_time_total / {calls}, 1),
    round(getattr(e, "self_device_time_total", 0) / {calls}, 1)] for e in _rows]))
"""
PROFILED_CELL = """
import cProfile as _cp, pstats as _ps, io as _io
_pr = _cp.Profile()
_pr.runcall(get_ipython().run_cell_magic, "compile_cache", {name!r}, {cell!r})
_buf = _io.StringIO()
_ps.Stats(_pr, stream=_buf).sort_stats("cumulative").print_stats(45)
print("CELLPROFILE<<" + _buf.getvalue() + ">>CELLPROFILE")
"""
KINDS = ("torch", "ours")


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


OUR_THREADS = """
import threading as _th
print("OURS", sorted(t.name for t in _th.enumerate() if t.name.startswith("jupyter_compile_cache")))
"""


class Kernel:
    """One new kernel of `kind`, built and past its compiled cell; `timed()` runs a batch of timed calls in it."""

    def __init__(
        self, kind: str, workload: str, size: str, device: str, dirs: dict[str, str], args: argparse.Namespace
    ) -> None:
        build, cell = CELLS[workload]
        self.workload, self.args, self.dirs = workload, args, dirs
        ours = kind in ("ours", "ours_cold")
        self.cache_dir = dirs["torch"] if kind in ("torch", "torch_cold") else tempfile.mkdtemp(dir=dirs["root"])
        env = {"TORCHINDUCTOR_CACHE_DIR": self.cache_dir, "JUPYTER_COMPILE_CACHE_DIR": dirs["store"]}
        self.k = KernelRunner(env, args.timeout)
        try:
            if ours:
                self.k.run("%load_ext jupyter_compile_cache")
            if args.pause:
                self.k.run(f"import time\ntime.sleep({args.pause})")
            self.k.run(SETUP.format(size=SIZES[size], device=device, compile_=True) + BUILD[build])
            if device == "cuda":
                self.k.run(AUTOTUNE_TRACE)
            if args.profile and kind == "ours":
                seconds, said = self.k.run(PROFILED_CELL.format(name=f"steady-{workload}", cell=cell))
            else:
                seconds, said = self.k.run(f"%%compile_cache steady-{workload}\n{cell}" if ours else cell)
        except BaseException:
            self.close()
            raise
        self.found: dict = {"cell_s": round(seconds, 3)}
        self.found["said"] = [line for line in said.splitlines() if "compile_cache" in line]
        if "CELLPROFILE<<" in said:
            self.found["cell_profile"] = said.split("CELLPROFILE<<")[1].split(">>CELLPROFILE")[0]

    def timed(self, warmup: int) -> dict:
        """`--calls` timed calls after `warmup` untimed ones: what the STEADY line says."""
        code = TIMED.format(step=_indent(STEP[self.workload]), warmup=warmup, calls=self.args.calls)
        _, out = self.k.run(code)
        return json.loads(next(x for x in out.splitlines() if x.startswith("STEADY="))[len("STEADY=") :])

    def wait_for_our_threads(self, limit: float = 120.0) -> float:
        """Until no background thread of ours is left: one still at work in an idle kernel would share the CPU with
        the other kernel's timed calls. Polled by short cells with idle time between them: our prewarm thread waits
        for the kernel to be idle."""
        start = time.perf_counter()
        while time.perf_counter() - start < limit:
            _, out = self.k.run(OUR_THREADS)
            if next(x for x in out.splitlines() if x.startswith("OURS")) == "OURS []":
                break
            time.sleep(1.0)
        return round(time.perf_counter() - start, 2)

    def finish(self) -> dict:
        """The settled and profiled calls, if asked for: the kernel's whole record."""
        args = self.args
        if args.settle:  # the same calls again once background work of either kind has surely ended
            self.k.run(f"import time\ntime.sleep({args.settle})")
            later = self.timed(warmup=1)
            self.found["settled_times"], self.found["settled_threads"] = later["times"], later["threads"]
        if args.profile:
            _, out = self.k.run(PROFILED_CALLS.format(step=_indent(STEP[self.workload]), calls=args.calls))
            self.found["profile"] = json.loads(next(x for x in out.splitlines() if x.startswith("PROFILE="))[8:])
        return self.found

    def close(self) -> None:
        self.k.close()
        if self.cache_dir != self.dirs["torch"]:
            shutil.rmtree(self.cache_dir, ignore_errors=True)


def kernel(kind: str, workload: str, size: str, device: str, dirs: dict[str, str], args: argparse.Namespace) -> dict:
    """One new kernel of `kind`: build, the compiled cell, the timed calls. Returns what the STEADY line says."""
    k = Kernel(kind, workload, size, device, dirs, args)
    try:
        k.found.update(k.timed(args.warmup))
        return k.finish()
    finally:
        k.close()


def interleaved_pair(
    order: tuple[str, ...], workload: str, size: str, device: str, dirs: dict[str, str], args: argparse.Namespace
) -> dict[str, dict]:
    """Both kernels of a pair alive at once, their timed batches taking turns (`--rounds`), the first of each round
    turning: a slow spell of the machine (its clocks, a neighbour) falls on both kinds alike. Each kernel's `times`
    are all its rounds' calls; ours' `round_ratios` holds each round's ratio, ours' median over torch's."""
    kernels: dict[str, Kernel] = {}
    try:
        for kind in order:
            kernels[kind] = Kernel(kind, workload, size, device, dirs, args)
        for k in kernels.values():
            k.found["waited_s"] = k.wait_for_our_threads()
            k.found["times"], k.found["round_ratios"] = [], []
        for r in range(args.rounds):
            batch = {}
            for kind in order if r % 2 == 0 else order[::-1]:
                batch[kind] = kernels[kind].timed(args.warmup if r == 0 else 1)
                found = kernels[kind].found
                times = found["times"] + batch[kind]["times"]
                gc_ms = found.get("gc_ms", 0.0) + batch[kind].get("gc_ms", 0.0)
                found.update(batch[kind])
                found["times"], found["gc_ms"] = times, round(gc_ms, 3)  # over all its rounds
            kernels["ours"].found["round_ratios"].append(
                round(statistics.median(batch["ours"]["times"]) / statistics.median(batch["torch"]["times"]), 4)
            )
        return {kind: kernels[kind].finish() for kind in order}
    finally:
        for k in kernels.values():
            k.close()


def run_workload(
    workload: str, size: str, device: str, work: str, args: argparse.Namespace, keep: Callable[[dict], None]
) -> dict:
    """The workload's row; `keep(row)` after each pair, so that a run cut short keeps the pairs it measured."""
    root = os.path.join(work, workload)
    dirs = {"root": root, "torch": os.path.join(root, "torch"), "store": os.path.join(root, "store")}
    for path in dirs.values():
        os.makedirs(path, exist_ok=True)
    row: dict = {"workload": workload, "torch_ms": [], "ours_ms": [], "ratios": [], "first": [], "kernels": []}
    # The caches both kinds read: torch's warm dir, and our bundle (saved from another empty dir).
    for kind in ("torch_cold", "ours_cold"):
        kernel(kind, workload, size, device, dirs, args)
        print(f"{workload:9s} {kind} done", file=sys.stderr, flush=True)
    for i in range(args.pairs):
        order = KINDS if i % 2 == 0 else KINDS[::-1]
        if args.rounds > 1:
            pair = interleaved_pair(order, workload, size, device, dirs, args)
        else:
            pair = {kind: kernel(kind, workload, size, device, dirs, args) for kind in order}
        medians = {kind: statistics.median(pair[kind]["times"]) * 1000 for kind in KINDS}
        row["torch_ms"].append(round(medians["torch"], 4))
        row["ours_ms"].append(round(medians["ours"], 4))
        row["ratios"].append(round(medians["ours"] / medians["torch"], 4))
        row["first"].append(order[0])
        row["kernels"].append(pair)
        row.setdefault("same_answers", True)
        row["same_answers"] &= pair["ours"]["last"] == pair["torch"]["last"]
        print(
            f"{workload:9s} pair {i + 1}/{args.pairs} ({order[0]} first): torch {medians['torch']:.3f} ms, "
            f"ours {medians['ours']:.3f} ms, {row['ratios'][-1]:.3f}x; kernels autotuned at run time: torch "
            f"{len(pair['torch'].get('autotuned', []))}, ours {len(pair['ours'].get('autotuned', []))}"
            + (f"; rounds {pair['ours']['round_ratios']}" if "round_ratios" in pair["ours"] else ""),
            file=sys.stderr,
            flush=True,
        )
        row["median_ratio"] = round(statistics.median(row["ratios"]), 4)
        keep(row)
    return row


def fastest_decile(times: list[float]) -> float:
    """The call a tenth of the calls beat: the kernel's speed outside the machine's slow spells, which fall on
    either kind for seconds at a time (benchmarks/results/steady_state_2026-11-28c/)."""
    return sorted(times)[int(0.1 * (len(times) - 1))]


def table(rows: list[dict], gate: float) -> tuple[list[str], list[list[object]]]:
    headers = [
        "workload", "torch warm, ms/call (median of pairs)", "ours restored", "ours / torch, median",
        "spread (min-max)", "fastest decile, ours / torch (median; spread)", "pairs", "same answers",
        "counters during calls, ours beyond torch's", "run-time autotunes, torch / ours", f"gate <= {gate}",
    ]  # fmt: skip
    lines = []
    for r in rows:
        if not r.get("ratios"):
            lines.append([r["workload"], f"failed: {r.get('error', '')[:80]}", *[""] * 9])
            continue
        tuned = {kind: sum(len(p[kind].get("autotuned", [])) for p in r["kernels"]) for kind in KINDS}
        beyond = sorted(
            {
                f"{n}={v}"
                for p in r["kernels"]
                for n, v in p["ours"]["counters"].items()
                if n != "unique_graphs" and v > p["torch"]["counters"].get(n, 0)
            }
        )
        fast = [fastest_decile(p["ours"]["times"]) / fastest_decile(p["torch"]["times"]) for p in r["kernels"]]
        lines.append([
            r["workload"], f"{statistics.median(r['torch_ms']):.3f}", f"{statistics.median(r['ours_ms']):.3f}",
            f"**{r['median_ratio']:.3f}x**", f"{min(r['ratios']):.3f}-{max(r['ratios']):.3f}",
            f"{statistics.median(fast):.3f}x; {min(fast):.3f}-{max(fast):.3f}", len(r["ratios"]),
            "yes" if r["same_answers"] else "NO", ", ".join(beyond) or "none",
            f"{tuned['torch']} / {tuned['ours']}", "pass" if r["median_ratio"] <= gate else "FAIL",
        ])  # fmt: skip
    return headers, lines


OPTIONS = [
    option("--size", choices=sorted(SIZES), default="tiny"),
    option("--device", default="cpu"),
    option("--workloads", default=",".join(CELLS), help=f"comma-separated, of {', '.join(CELLS)}"),
    option("--pairs", type=int, default=5),
    option("--calls", type=int, default=20, help="timed calls per kernel"),
    option("--warmup", type=int, default=3, help="untimed calls per kernel before them"),
    option(
        "--rounds",
        type=int,
        default=1,
        help="N > 1: both kernels of a pair alive at once, N batches of --calls each, taking turns",
    ),  # fmt: skip
    option("--gate", type=float, default=1.02),
    option("--timeout", type=float, default=600.0, help="seconds one cell may take"),
    option("--settle", type=float, default=0.0, help="then SECONDS idle and the calls again (kept, not in the ratio)"),
    option("--pause", type=float, default=0.0, help="SECONDS idle in every kernel before its model is built"),
    option("--profile", action="store_true", help="also profile each kernel's calls, and ours' restored cell (kept)"),
    option("--render", nargs="+", metavar="JSON", help="only print the table of earlier result files"),
]


def run(job: Job) -> None:
    args = job.args
    if args.render:
        for path in args.render:
            with open(path) as f:
                result = json.load(f)
            machine = result.get("meta") or result["machine"]
            title = f"{path} ({machine.get('gpu') or machine.get('cpu')})"
            job.table(*table(result["rows"], result["args"]["gate"]), title=title)
        return
    job.meta["device"] = args.device
    rows: list[dict] = []

    def keep(*current: dict) -> None:
        """What is measured so far, written out: a run cut short keeps it."""
        job.keep(args=vars(args), rows=[*rows, *current])

    with tempfile.TemporaryDirectory(prefix="jcc-steady-") as work:
        for workload in args.workloads.split(","):
            try:
                rows.append(run_workload(workload, args.size, args.device, work, args, keep))
            except (TimeoutError, RuntimeError) as exc:  # one workload failing leaves the others to measure
                rows.append({"workload": workload, "error": str(exc)[:2000]})
                job.say(f"{workload:9s} FAILED: {str(exc).splitlines()[0]}")
            keep()
    job.table(*table(rows, args.gate))
