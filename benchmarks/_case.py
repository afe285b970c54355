"""One benchmark case in a fresh process (= a kernel restart). Run by bench.py; prints one JSON line.

The process mimics a notebook: import torch (not timed), `%load_ext` (ours only), a cell that defines the model
and data, then the compile cell, timed from its start (whole cell) and around the first compiled call(s).
Which caches torch may use comes from the environment bench.py sets (cache dir, torch's Redis switches, our hub).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

CASES = ["eager", "cold", "torch_warm", "mega", "torch_remote", "ours_cold", "ours", "ours_hub", "overhead"]


class Block(torch.nn.Module):
    """A pre-norm decoder block: causal self-attention (SDPA) and a GELU MLP."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyLM(torch.nn.Module):
    """A small decoder-only language model (GPT-style, tied embeddings): 6 blocks of width 512, 8k vocabulary."""

    def __init__(self, vocab: int = 8192, dim: int = 512, heads: int = 8, layers: int = 6, context: int = 256):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def build(model_name: str, device: str, batches: list[int]):
    """The model, one input per batch size, and the loss a training step minimises."""
    torch.manual_seed(0)

    def square_mean(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return out.float().pow(2).mean()

    loss = square_mean
    if model_name == "mlp":  # the CPU model: two Linear layers and pointwise ops
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256), torch.nn.Tanh()
        )
        inputs = [torch.randn(8 * b, 256) for b in batches]
    elif model_name == "transformer":  # the GPU model: a 6-layer pre-norm transformer encoder
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, norm_first=True)
        model = torch.nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        inputs = [torch.randn(b, 128, 512) for b in batches]
    elif model_name == "convnet":  # a small ResNet-style stem + classifier
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 3, padding=1),
            torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(),
            torch.nn.Conv2d(64, 128, 3, padding=1, stride=2),
            torch.nn.BatchNorm2d(128),
            torch.nn.ReLU(),
            torch.nn.Conv2d(128, 256, 3, padding=1, stride=2),
            torch.nn.BatchNorm2d(256),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(256, 10),
        )
        inputs = [torch.randn(4 * b, 3, 64, 64) for b in batches]
    elif model_name == "lm":
        model = TinyLM()
        inputs = [torch.randint(0, 8192, (b, 256)) for b in batches]

        def next_token(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]).float(), x[:, 1:].reshape(-1))

        loss = next_token
    else:
        raise SystemExit(f"unknown model {model_name}")
    return model.to(device), [x.to(device) for x in inputs], loss


AUTOTUNES_RUN: list[int] = []  # real matmul autotunings in this process (torch replays its counter on cache hits)
RUNTIME_AUTOTUNES_RUN: list[str] = []  # run-time benchmarks of Triton launch configs here (calls, kernel named)


def count_real_autotunes() -> None:
    """Count AlgorithmSelectorCache.benchmark calls: on an FX graph cache hit torch adds the compile's counters
    (codecache: `counters["inductor"] += graph.counter_deltas`), so its select_algorithm_autotune counter says
    nothing about work done in this process. Also count CachingAutotuner's runtime benchmarks (several configs of
    one Triton kernel, or coordinate descent). Hooked at import, so inductor is not imported early here.
    BENCH_TRACE_AUTOTUNE=1 also prints where the first one comes from."""
    import importlib.abc
    import importlib.util

    def trace() -> None:
        if not AUTOTUNES_RUN and not RUNTIME_AUTOTUNES_RUN and os.environ.get("BENCH_TRACE_AUTOTUNE") == "1":
            import traceback

            print("FIRST AUTOTUNE FROM:\n" + "".join(traceback.format_stack(limit=60)), file=sys.stderr)

    def patch_select_algorithm(module: object) -> None:
        original = module.AlgorithmSelectorCache.benchmark

        def benchmark(self, *args, **kwargs):  # noqa: ANN001, ANN202
            trace()
            AUTOTUNES_RUN.append(1)
            return original(self, *args, **kwargs)

        module.AlgorithmSelectorCache.benchmark = benchmark

    def patch_triton_heuristics(module: object) -> None:
        for method in ("benchmark_all_configs", "coordinate_descent_tuning"):
            original = getattr(module.CachingAutotuner, method, None)
            if original is None:
                continue

            def counted(self, *args, _original=original, _method=method, **kwargs):  # noqa: ANN001, ANN202
                trace()
                RUNTIME_AUTOTUNES_RUN.append(f"{_method}:{getattr(self.fn, '__name__', '?')}")
                return _original(self, *args, **kwargs)

            setattr(module.CachingAutotuner, method, counted)

    targets = {
        "torch._inductor.select_algorithm": patch_select_algorithm,
        "torch._inductor.runtime.triton_heuristics": patch_triton_heuristics,
    }

    class AfterImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target_module=None):  # noqa: ANN001, ANN201
            if name not in targets:
                return None
            patch = targets.pop(name)  # popped first: the find_spec below does not come back here for it
            if not targets:
                sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = spec.loader.exec_module

            def exec_then_patch(module: object) -> None:
                exec_module(module)
                patch(module)

            spec.loader.exec_module = exec_then_patch
            return spec

    sys.meta_path.insert(0, AfterImport())


def overhead(cells: int) -> dict:
    """What `%%compile_cache` costs a cell with nothing to restore and nothing to compile (steady state)."""
    import jupyter_compile_cache as jcc
    from jupyter_compile_cache.core.options import CellOptions

    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # a GPU notebook has CUDA up before such a cell; do not time its start-up
    session = jcc.get_session()
    session.prewarm.start()
    session.prewarm.join(hashes=True, probe=True)
    body = compile("total = sum(range(10_000))", "<cell>", "exec")
    plain, ours = [], []

    def our_cell(i: int) -> None:
        with session.cell(f"nothing-{i}", CellOptions(quiet=True)):
            exec(body, {})

    for i in range(cells):
        t = time.perf_counter()
        exec(body, {})
        plain.append(time.perf_counter() - t)
        profiler = None
        if i == 0 and os.environ.get("BENCH_PROFILE"):  # where the first cell's time goes
            import cProfile

            profiler = cProfile.Profile()
        t = time.perf_counter()
        if profiler:
            profiler.runcall(our_cell, i)
        else:
            our_cell(i)
        ours.append(time.perf_counter() - t)
        if profiler:
            import pstats

            with open(os.environ["BENCH_PROFILE"], "w") as f:
                pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(50)
    return {
        "case": "overhead",
        "cells": cells,
        "first_cell_ms": 1000 * (ours[0] - plain[0]),
        "median_ms": 1000 * (statistics.median(ours[1:]) - statistics.median(plain[1:])),
        "max_ms": 1000 * (max(ours[1:]) - statistics.median(plain[1:])),
        "hub": os.environ.get("JUPYTER_COMPILE_CACHE_HUB") is not None,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", required=True, choices=CASES)
    p.add_argument("--model", default="mlp")
    p.add_argument("--device", default="cpu")
    p.add_argument("--mode", default="default")
    p.add_argument("--train", action="store_true")
    p.add_argument("--batches", default="8", help="batch sizes, one call each (two sizes: dynamic shapes)")
    p.add_argument("--name", default="bench", help="the %%compile_cache bundle name")
    p.add_argument("--mega-in", help="mega-cache bytes to load (case mega)")
    p.add_argument("--mega-out", help="write torch.compiler.save_cache_artifacts() bytes here (case cold)")
    p.add_argument("--think", type=float, default=0.0, help="idle seconds between the definition and compile cells")
    p.add_argument("--cells", type=int, default=30, help="cells to time (case overhead)")
    args = p.parse_args()
    count_real_autotunes()
    if args.case == "overhead":
        print("RESULT " + json.dumps(overhead(args.cells)))
        return

    result: dict = {"case": args.case}
    session = None
    if args.case.startswith("ours"):
        import jupyter_compile_cache as jcc

        session = jcc.get_session()
        session.prewarm.start()  # what %load_ext does

    t = time.perf_counter()
    model, inputs, loss = build(args.model, args.device, [int(b) for b in args.batches.split(",")])
    result["define_s"] = time.perf_counter() - t
    time.sleep(args.think)

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    def step(fn, x: torch.Tensor) -> None:  # noqa: ANN001
        if args.train:
            loss(fn(x), x).backward()
        else:
            with torch.no_grad():
                fn(x)

    def calls(fn) -> None:  # noqa: ANN001
        """The first call per input shape, each timed: compile (or restore) happens here."""
        times = []
        for x in inputs:
            t = time.perf_counter()
            step(fn, x)
            sync()
            times.append(time.perf_counter() - t)
        result["call_s"] = times
        result["first_call_s"] = sum(times)  # with two shapes: both first calls (the recompile is part of it)

    cell_start = time.perf_counter()
    if args.case == "eager":
        calls(model)
        result["cell_s"] = time.perf_counter() - cell_start
        print("RESULT " + json.dumps(result))
        return

    options = {} if args.mode == "default" else {"mode": args.mode}
    context = report = None
    if session is not None:
        from jupyter_compile_cache.core.options import CellOptions

        context = session.cell(args.name, CellOptions(quiet=True))
        report = context.__enter__()
    if args.case == "mega":
        with open(args.mega_in, "rb") as f:
            blob = f.read()
        t = time.perf_counter()
        torch.compiler.load_cache_artifacts(blob)
        result["load_s"] = time.perf_counter() - t
        result["bytes_moved"] = len(blob)
    compiled = torch.compile(model, **options)
    if os.environ.get("BENCH_PROFILE"):  # where the first call's time goes: the 40 slowest functions, cumulative
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(calls, compiled)
        with open(os.environ["BENCH_PROFILE"], "w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(40)
    else:
        calls(compiled)
    if context is not None:
        context.__exit__(None, None, None)
        restore = report.restore
        result["restored"] = bool(restore and restore.restored)
        result["restore_source"] = restore.source if restore else None
        result["restore_s"] = restore.seconds if restore else 0.0
        result["pull_s"] = restore.pull_seconds if restore else 0.0
        result["pushed"] = report.pushed
        result["bytes_moved"] = restore.bytes if restore and restore.restored else report.saved_bytes
    result["cell_s"] = time.perf_counter() - cell_start
    if session is not None:
        result["prewarm_import_s"] = session.prewarm.import_seconds
    if args.mega_out:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            with open(args.mega_out, "wb") as f:
                f.write(saved[0])
            result["mega_bytes"] = len(saved[0])
    from torch._dynamo.utils import counters

    groups = ("inductor", "aot_autograd", "dynamo_cache", "jupyter_compile_cache")  # ours: precompile_stale_rejected
    result["counters"] = {g: dict(counters[g]) for g in groups if g in counters}
    result["counters"]["inductor"] = {
        k: v
        for k, v in result["counters"].get("inductor", {}).items()
        if "cache" in k or k.startswith(("select_algorithm", "triton_bundler"))
    }
    result["counters"]["recompiles"] = dict(counters["recompiles"]) if "recompiles" in counters else {}
    result["counters"]["autotunes_run"] = len(AUTOTUNES_RUN)
    result["counters"]["runtime_autotunes_run"] = len(RUNTIME_AUTOTUNES_RUN)
    result["runtime_autotuned"] = RUNTIME_AUTOTUNES_RUN[:50]
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
