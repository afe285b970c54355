"""Which Triton kernels torch will not launch statically, and why: a cold compile of zoo models on a GPU.

A kernel torch cannot launch statically is saved for Triton's own launcher, and every restore loads it through
Triton's compiler (slow, and at times compiled again). torch logs each such kernel ("Bypassing
StaticallyLaunchedCudaKernel due to ..."); this compiles the named models cold, with Inductor's compile workers off
so that the check runs (and logs) in this process, and prints the reasons per model.

  python benchmarks/static_launch_bypasses.py t5,bart            # torch as it is
  JCC_FIXES=1 python benchmarks/static_launch_bypasses.py t5     # with our cache_load_patches() applied
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import tempfile

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="jcc-bypass-")
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import transformers  # noqa: E402
from zoo import first_tensor, zoo_models  # noqa: E402


class _Reasons(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Bypassing" in message:
            self.seen[message.split("due to", 1)[-1].strip()] += 1


def main() -> None:
    names = sys.argv[1].split(",")
    reasons = _Reasons()
    logger = logging.getLogger("torch._inductor.runtime.triton_heuristics")
    logger.setLevel(logging.INFO)
    logger.addHandler(reasons)
    if os.environ.get("JCC_FIXES"):
        from jupyter_compile_cache.torch_adapter import fixes as torch_fixes

        print("applied:", [p.name for p in torch_fixes.cache_load_patches()])
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
        print(f"{name}: {sum(reasons.seen.values())} kernels not launched statically")
        for reason, count in reasons.seen.items():
            print(f"  {count} x {reason}")


if __name__ == "__main__":
    main()
