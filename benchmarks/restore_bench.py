"""Restore benchmark: ours vs torch's own caches, side by side in one run.

Each case is a fresh process (= a kernel restart), so nothing is warm in memory:

  eager        the model's first eager call (the floor)
  cold         torch.compile on an empty TORCHINDUCTOR_CACHE_DIR
  torch_warm   the same cache dir again (torch's own local caches)
  mega         torch.compiler.load_cache_artifacts() of the cold run's mega-cache, into an empty dir
  ours_cold    %%compile_cache on an empty dir and empty store (the extension's cost on a cold run; saves)
  ours         %%compile_cache restoring that bundle into an empty dir

Usage: python benchmarks/restore_bench.py [--suite cpu|gpu|gpu-autotune] [--out results.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = ["eager", "cold", "torch_warm", "mega", "ours_cold", "ours"]
SUITES = {
    "cpu": [dict(model="mlp", device="cpu", mode="default", train=False)],
    "gpu": [
        dict(model="transformer", device="cuda", mode="default", train=False),
        dict(model="transformer", device="cuda", mode="default", train=True),
    ],
    "gpu-infer": [dict(model="transformer", device="cuda", mode="default", train=False)],
    "gpu-autotune": [dict(model="transformer", device="cuda", mode="max-autotune-no-cudagraphs", train=False)],
}


def run_case(config: dict, case: str, cache_dir: str, store: str, extra: list[str], think: float) -> dict:
    env = dict(
        os.environ,
        TORCHINDUCTOR_CACHE_DIR=cache_dir,
        JUPYTER_COMPILE_CACHE_DIR=store,
        PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]),
    )
    cmd = [
        sys.executable,
        os.path.join(HERE, "_case.py"),
        "--case",
        case,
        "--model",
        config["model"],
        "--device",
        config["device"],
        "--mode",
        config["mode"],
        "--think",
        str(think),
        *extra,
    ]
    if config["train"]:
        cmd.append("--train")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"case": case, "error": proc.stderr[-2000:]}
    return json.loads(lines[-1][len("RESULT ") :])


def run_config(config: dict, think: float) -> list[dict]:
    work = tempfile.mkdtemp(prefix="jcc-bench-")
    try:
        dirs = {name: os.path.join(work, name) for name in ("cold", "mega", "ours_cold", "ours", "store", "eager")}
        for d in dirs.values():
            os.makedirs(d)
        mega = os.path.join(work, "mega.bin")
        rows = []
        for case in CASES:
            cache = {"torch_warm": dirs["cold"]}.get(case, dirs.get(case, dirs["cold"]))
            extra = {"cold": ["--mega-out", mega], "mega": ["--mega-in", mega]}.get(case, [])
            row = run_case(config, case, cache, dirs["store"], extra, think)
            row.update(config)
            rows.append(row)
            print(
                f"  {config['model']:12s} {config['mode']:28s} {'train' if config['train'] else 'infer':5s} "
                f"{case:11s} first call {row.get('first_call_s', float('nan')):8.3f} s   "
                f"cell {row.get('cell_s', float('nan')):8.3f} s" + ("   ERROR" if "error" in row else ""),
                flush=True,
            )
        return rows
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table(rows: list[dict], metric: str = "first_call_s") -> str:
    """Markdown: one row per model/mode/step, the cases side by side (seconds), and our ratios."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["mode"], "train" if r["train"] else "infer")
        groups.setdefault(key, {})[r["case"]] = r
    header = "| model | mode | step | " + " | ".join(CASES) + " | ours / eager | ours / cold |"
    lines = [header, "|" + "---|" * (len(CASES) + 5)]
    for key, cases in groups.items():

        def t(case: str, cases: dict = cases) -> float | None:
            return cases.get(case, {}).get(metric)

        cells = [f"{t(c):.3f}" if t(c) is not None else "err" for c in CASES]
        ours, eager, cold = t("ours"), t("eager"), t("cold")
        ratio_e = f"{ours / eager:.2f}x" if ours and eager else "-"
        ratio_c = f"{ours / cold:.3f}x" if ours and cold else "-"
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + f" | {ratio_e} | {ratio_c} |")
    return "\n".join(lines)


def environment() -> dict:
    import torch

    env = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", action="append", choices=sorted(SUITES), help="default: cpu")
    p.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="idle seconds between the definition cell and the compile cell (0 = 'Run All')",
    )
    p.add_argument("--out", help="write JSON results here")
    args = p.parse_args()
    env = environment()
    print(json.dumps(env))
    rows = []
    for suite in args.suite or ["cpu"]:
        for config in SUITES[suite]:
            rows += run_config(config, args.think)
    print()
    print(f"First compiled call (s), each case a fresh process; think time {args.think} s")
    print(table(rows, "first_call_s"))
    print()
    print("Whole compile cell (s): torch.compile + first call, and for ours restore + waiting for the prewarm")
    print(table(rows, "cell_s"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"environment": env, "think_s": args.think, "cases": rows}, f, indent=1)


if __name__ == "__main__":
    main()
