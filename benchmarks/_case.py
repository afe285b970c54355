"""One benchmark case in a fresh process (= a kernel restart). Run by restore_bench.py; prints one JSON line.

The process mimics a notebook: import torch (not timed), `%load_ext` (ours only), a cell that defines the model
and data, then the compile cell, timed from its start (whole cell) and around the first compiled call.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def build(model_name: str, device: str):
    import torch

    torch.manual_seed(0)
    if model_name == "mlp":  # FACTS.md's CPU model: two Linear layers and pointwise ops
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256), torch.nn.Tanh()
        )
        x = torch.randn(64, 256)
    elif model_name == "transformer":  # FACTS.md's GPU model
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, norm_first=True)
        model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        x = torch.randn(8, 128, 512)
    elif model_name == "convnet":
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 3, padding=1),
            torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(),
            torch.nn.Conv2d(64, 128, 3, padding=1, stride=2),
            torch.nn.BatchNorm2d(128),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(128, 10),
        )
        x = torch.randn(32, 3, 64, 64)
    else:
        raise SystemExit(f"unknown model {model_name}")
    return model.to(device), x.to(device)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--mode", default="default")
    p.add_argument("--train", action="store_true")
    p.add_argument(
        "--case",
        required=True,
        choices=["eager", "cold", "torch_warm", "torch_precompile_warm", "mega", "ours", "ours_cold"],
    )
    p.add_argument("--mega-in", help="mega-cache bytes to load (case mega)")
    p.add_argument("--mega-out", help="write torch.compiler.save_cache_artifacts() bytes here (case cold)")
    p.add_argument("--think", type=float, default=0.0, help="idle seconds between the definition and compile cells")
    args = p.parse_args()

    import torch  # not timed: FACTS.md's times exclude the torch import too

    result = {"case": args.case, "model": args.model, "mode": args.mode, "train": args.train}
    session = None
    if args.case.startswith("ours"):
        import jupyter_compile_cache as jcc

        session = jcc.get_session()
        session.prewarm.start()  # what %load_ext does
    if args.case == "torch_precompile_warm" or (args.case == "cold" and os.environ.get("BENCH_PRECOMPILE") == "1"):
        torch._dynamo.config.caching_precompile = True

    t = time.perf_counter()
    model, x = build(args.model, args.device)
    result["define_s"] = time.perf_counter() - t
    time.sleep(args.think)

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    def step(fn):
        if args.train:
            out = fn(x)
            out.float().pow(2).mean().backward()
            return out
        with torch.no_grad():
            return fn(x)

    cell_start = time.perf_counter()
    if args.case == "eager":
        t = time.perf_counter()
        step(model)
        sync()
        result["first_call_s"] = time.perf_counter() - t
        result["cell_s"] = time.perf_counter() - cell_start
        print("RESULT " + json.dumps(result))
        return

    options = {} if args.mode == "default" else {"mode": args.mode}
    context = None
    if session is not None:
        from jupyter_compile_cache.session import CellOptions

        context = session.cell(
            f"bench-{args.model}-{args.mode}-{'train' if args.train else 'infer'}", CellOptions(quiet=True)
        )
        report = context.__enter__()
    if args.case == "mega":
        with open(args.mega_in, "rb") as f:
            blob = f.read()
        t = time.perf_counter()
        torch.compiler.load_cache_artifacts(blob)
        result["load_s"] = time.perf_counter() - t
        result["bytes_moved"] = len(blob)
    compiled = torch.compile(model, **options)
    t = time.perf_counter()
    step(compiled)
    sync()
    result["first_call_s"] = time.perf_counter() - t
    if context is not None:
        context.__exit__(None, None, None)
        restore = report.restore
        result["restored"] = bool(restore and restore.restored)
        result["restore_source"] = restore.source if restore else None
        result["pull_s"] = restore.pull_seconds if restore else 0.0
        result["pushed"] = report.pushed
        result["restore_s"] = restore.seconds if restore else 0.0
        result["bytes_moved"] = restore.bytes if restore and restore.restored else report.saved_bytes
    result["cell_s"] = time.perf_counter() - cell_start
    if session is not None:
        result["prewarm_import_s"] = session.prewarm.import_seconds
        session.prewarm.wait_all()
        result["prewarm_s"] = session.prewarm.seconds
    if args.mega_out:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            with open(args.mega_out, "wb") as f:
                f.write(saved[0])
            result["mega_bytes"] = len(saved[0])
    from torch._dynamo.utils import counters

    result["counters"] = {g: dict(counters[g]) for g in ("inductor", "aot_autograd", "dynamo_cache") if g in counters}
    result["counters"]["inductor"] = {
        k: v
        for k, v in result["counters"].get("inductor", {}).items()
        if "cache" in k or k.startswith(("select_algorithm", "triton_bundler"))
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
