"""The model zoo, timed: real third-party models, first compiled call, eager vs torch vs ours, side by side.

The zoo: HF transformers models from tiny configs (random weights, no download) and, where timm is installed, timm
models (no weights). tests/end_to_end/test_model_zoo.py runs the same models in real kernels; this script times them.

Five fresh processes, each runs every model once, in this order:

  eager      the first eager call of each model
  cold       plain torch.compile on an empty cache dir
  torch_warm plain torch.compile again on cold's cache dir: what a restarted kernel gets from torch's own caches
  ours_cold  `%%compile_cache` (the script API) on an empty cache dir and store
  ours       `%%compile_cache` restoring from that store into an empty cache dir

Per model: the first call in seconds (the compile included; our restore, which comes before it, is timed on its own,
as in bench.py), restored / eager, and whether the restore ran a precompiled entry (a Dynamo cache hit) or the plain
path (AOTAutograd and FX graph hits). The compiler stack's import is paid once per process, before the first model,
and not timed: it is per-process work that no bundle carries (see the README's limitations).

  python -m benchmarks zoo --device cuda --out benchmarks/results/zoo_gpu.json
  ZOO_MODELS=gpt2,timm_vit_tiny ZOO_PROFILE=DIR python -m benchmarks zoo ...   # some models; profile the restores
  ZOO_VERBOSE=1 python -m benchmarks zoo ...   # also print what each cell says (restores, fallbacks, with tracebacks)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.harness import Job, option
from jupyter_compile_cache.torch_adapter.layers import layer_of
from tests.helpers.zoo_models import first_tensor, zoo_models  # the models of tests/end_to_end/test_model_zoo.py

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = ("eager", "cold", "torch_warm", "ours_cold", "ours")


# -- one process: every model, one case ------------------------------------------------------------------------------


def run_case(case: str, device: str) -> list[dict]:
    import torch
    from torch._dynamo.utils import counters

    namespace = {"torch": torch}
    import transformers

    namespace["T"] = transformers
    if importlib.util.find_spec("timm") is not None:
        import timm

        namespace["timm"] = timm
    session = None
    if case != "eager":
        import torch._dynamo  # noqa: F401  the compiler stack's import: once per process, not timed
        import torch._inductor.compile_fx  # noqa: F401
    if case.startswith("ours"):
        import jupyter_compile_cache as jcc
        from jupyter_compile_cache.core.options import CellOptions

        session = jcc.get_session()
        if os.environ.get("ZOO_VERBOSE"):  # a fallback's whole traceback, for the bug report
            import logging

            from jupyter_compile_cache.torch_adapter.precompile_troubles import LOGGER

            logging.basicConfig()
            logging.getLogger(LOGGER).setLevel(logging.DEBUG)
        # What `%load_ext` starts in the background while a notebook's first cells run (imports, Triton's hash, the
        # CPU ISA probe): per-process work, done before the first model, not timed, like the imports above.
        session.prewarm.start()
        session.prewarm.join(hashes=True, probe=True)
    if device.startswith("cuda"):
        torch.zeros(1, device=device)  # a GPU notebook has CUDA up before its compile cell

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    rows = []
    only = os.environ.get("ZOO_MODELS", "").split(",") if os.environ.get("ZOO_MODELS") else None
    for name, (build, inputs) in zoo_models().items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        model = eval(build, namespace).eval().to(device)
        args = {k: v.to(device) for k, v in eval(inputs, namespace).items()}
        graphs_before = counters["stats"]["unique_graphs"]
        report = context = None
        if session is not None:
            quiet = not os.environ.get("ZOO_VERBOSE")  # ZOO_VERBOSE=1: our lines (restore, fallbacks) on stderr
            context = session.cell(f"zoo-{name}", CellOptions(quiet=quiet, no_hub=True))
            report = context.__enter__()  # the restore: timed on its own (restore_s), as bench.py does

        def first_call(model: Any = model, args: dict = args) -> Any:
            # torch.compile loads and installs a restored precompile entry: part of the first call
            fn = model if case == "eager" else torch.compile(model)
            with torch.no_grad():
                return first_tensor(fn(**args))

        cache_before = cache_files()
        phases_before = torch_phase_seconds()
        t = time.perf_counter()
        if os.environ.get("ZOO_PROFILE") and case == "ours":  # where a restored first call's time goes
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            got = profiler.runcall(first_call)
            with open(os.path.join(os.environ["ZOO_PROFILE"], f"{name}.txt"), "w") as f:
                pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(60)
        else:
            got = first_call()
        sync()
        first_call_s = time.perf_counter() - t
        phases = {k: v - phases_before.get(k, 0.0) for k, v in torch_phase_seconds().items()}
        # files the first call wrote: on a restore, work done again (a compiled kernel the bundle did not bring);
        # torch's locks and build aids are no work a bundle could save
        written = sorted(p for p in set(cache_files()) - set(cache_before) if layer_of(p) is not None)
        if context is not None:
            context.__exit__(None, None, None)
        with torch.no_grad():
            want = first_tensor(model(**args))
        row = {"model": name, "case": case, "first_call_s": first_call_s}
        row["graphs_traced"] = counters["stats"]["unique_graphs"] - graphs_before  # traced afresh (a restored one: 0)
        # torch's own timings of the first call's phases (dynamo_timed: guards, graph and kernel loads), >= 5 ms
        row["torch_phases_s"] = {k: round(v, 4) for k, v in sorted(phases.items(), key=lambda kv: -kv[1]) if v >= 0.005}
        row["matches_eager"] = bool(torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-3))
        row["files_written_by_call"] = written
        if case == "ours_cold":  # which of them the bundle holds
            from jupyter_compile_cache.storage.store import LocalStore

            members = {
                m.name
                for v in LocalStore(os.environ["JUPYTER_COMPILE_CACHE_DIR"]).versions(f"zoo-{name}")
                for m in v.members
            }
            row["not_in_bundle"] = [p for p in written if "inductor/" + p not in members]
        if report is not None:
            row["restored"] = bool(report.restore and report.restore.restored)
            row["restore_s"] = report.restore.seconds if report.restore else 0.0
            row["layers"] = {k: report.layers.get(k, {}) for k in ("dynamo_precompile", "aot_autograd", "fx_graph")}
            row["precompile_fallbacks"] = report.precompile_fallbacks
        rows.append(row)
        print(f"  {case:9} {name:20} {first_call_s:8.3f} s", file=sys.stderr, flush=True)
    return rows


def cache_files() -> list[str]:
    """Files under torch's cache dir (TORCHINDUCTOR_CACHE_DIR), relative, as bundle members name them after
    `inductor/`."""
    root = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    return [
        os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/") for d, _, names in os.walk(root) for n in names
    ]


def torch_phase_seconds() -> dict[str, float]:
    """Seconds per phase that torch times itself (torch._dynamo.utils.compilation_time_metrics), summed."""
    from torch._dynamo import utils

    return {k: sum(v) for k, v in getattr(utils, "compilation_time_metrics", {}).items()}


# -- the driver -------------------------------------------------------------------------------------------------------


def restore_path(row: dict) -> str:
    """How a restored model ran: all precompiled, partly (torch would not package some functions), or the plain
    path after a precompile failure; the AOTAutograd / FX graph hits and misses after it."""
    precompile, aot, fx = (row["layers"][k] for k in ("dynamo_precompile", "aot_autograd", "fx_graph"))
    if row["precompile_fallbacks"]:
        path = "fallback"
    elif not precompile.get("hits"):
        path = "plain (no entry saved)"
    elif precompile.get("bypasses"):
        path = "precompile + bypass"
    else:
        path = "precompile"
    hits, misses = aot.get("hits", 0) + fx.get("hits", 0), aot.get("misses", 0) + fx.get("misses", 0)
    return f"{path}; {row['graphs_traced']} graphs traced (AOT/FX {hits} hit, {misses} miss)"


def table(job: Job, rows: list[dict]) -> None:
    by = {(r["model"], r["case"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    heads = ["model", "eager s", "torch cold s", "torch warm s", "ours cold s", "ours restored s", "restore s"]
    heads.append("restored / eager")
    heads.append("restore used")
    heads.append("same answer")
    cells = []
    for m in models:
        eager, cold, warm, ours_cold, ours = (by.get((m, c)) for c in CASES)
        if ours is None or eager is None:
            continue
        used = restore_path(ours)
        same = all(by[(m, c)]["matches_eager"] for c in CASES[1:] if (m, c) in by)
        cells.append([
            m, *(f"{case['first_call_s']:.3f}" for case in (eager, cold, warm, ours_cold, ours)),
            f"{ours['restore_s']:.3f}", f"{ours['first_call_s'] / eager['first_call_s']:.2f}x", used, same,
        ])  # fmt: skip
    job.table(heads, cells)
    lines = ["Files a restored first call wrote (work done again), and whether the cold cell's bundle lacked them:"]
    for m in models:
        ours, cold = by.get((m, "ours")), by.get((m, "ours_cold"))
        if ours and ours.get("files_written_by_call"):
            lacking = set(cold.get("not_in_bundle", [])) if cold else set()
            written = ours["files_written_by_call"]
            kernels = sorted({p.split("/")[-1].rsplit(".", 1)[0] for p in written if p.endswith(".cubin")})
            lines.append(
                f"  {m}: {len(written)} files, {len(set(written) & lacking)} of them written by the cold call but"
                f" not in its bundle; compiled kernels: {', '.join(kernels) or 'none'}"
            )
    job.note("\n".join(lines))
    lines = ["Where a restored first call goes (torch's own phase timings, nested phases overlap):"]
    for m in models:
        ours = by.get((m, "ours"))
        if ours and ours.get("torch_phases_s"):
            top = list(ours["torch_phases_s"].items())[:6]
            lines.append(f"  {m}: " + ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in top))
    job.note("\n".join(lines))


OPTIONS = [
    option("--device", default="cpu"),
    option("--case", help=argparse.SUPPRESS),  # internal: run one case in this process
]


def run(job: Job) -> None:
    args = job.args
    if args.case:
        print("RESULT " + json.dumps(run_case(args.case, args.device)))
        return

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="jcc-zoo-") as tmp:
        store = os.path.join(tmp, "store")
        for case in CASES:
            cache_dir = "cold" if case == "torch_warm" else case  # torch_warm: the cold process's caches, on disk
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, f"cache-{cache_dir}"))
            env.update(JUPYTER_COMPILE_CACHE_DIR=store, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE)] + sys.path))
            env.pop("JUPYTER_COMPILE_CACHE_HUB", None)
            job.say(f"{case}: a fresh process")
            cmd = [sys.executable, "-m", "benchmarks", "zoo", "--case", case, "--device", args.device]
            out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
            rows += json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
            job.keep(rows=rows)
    job.meta["device"] = args.device
    table(job, rows)
