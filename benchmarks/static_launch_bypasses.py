"""Which Triton kernels torch will not launch statically, and why: a cold compile of zoo models on a GPU.

A kernel torch cannot launch statically is saved for Triton's own launcher, and every restore loads it through
Triton's compiler (slow, and at times compiled again). torch logs each such kernel ("Bypassing
StaticallyLaunchedCudaKernel due to ..."); this compiles the named models cold, with Inductor's compile workers off
so that the check runs (and logs) in this process, and prints the reasons per model.

  python -m benchmarks static_launch_bypasses t5,bart            # torch as it is
  JCC_FIXES=1 python -m benchmarks static_launch_bypasses t5     # with our cache_load_patches() applied
"""

from __future__ import annotations

import collections
import logging
import os
import tempfile

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="jcc-bypass-")
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"

import torch
import transformers

from benchmarks.harness import Job, option
from benchmarks.zoo import first_tensor, zoo_models


class _Reasons(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Bypassing" in message:
            self.seen[message.split("due to", 1)[-1].strip()] += 1


OPTIONS = [option("models", help=f"comma-separated, of {', '.join(zoo_models())}")]


def run(job: Job) -> None:
    names = job.args.models.split(",")
    reasons = _Reasons()
    logger = logging.getLogger("torch._inductor.runtime.triton_heuristics")
    logger.setLevel(logging.INFO)
    logger.addHandler(reasons)
    if os.environ.get("JCC_FIXES"):
        from jupyter_compile_cache.torch_adapter import kernel_load_fixes

        job.note(f"applied: {[p.name for p in kernel_load_fixes.cache_load_patches(print)]}")
    namespace = {"torch": torch, "T": transformers}
    try:
        import timm

        namespace["timm"] = timm
    except ImportError:
        pass
    for name, (build, inputs) in zoo_models().items():
        if name not in names:
            continue
        reasons.seen.clear()
        torch._dynamo.reset()
        model = eval(build, namespace).eval().cuda()
        args = {k: v.cuda() for k, v in eval(inputs, namespace).items()}
        with torch.no_grad():
            first_tensor(torch.compile(model)(**args))
        job.keep(**{name: dict(reasons.seen)})
        rows = [[count, reason] for reason, count in reasons.seen.items()]
        job.table(
            ["kernels", "why not launched statically"],
            rows,
            title=f"{name}: {sum(reasons.seen.values())} kernels not launched statically",
            align="rl",
        )
