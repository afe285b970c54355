"""`jupyter-compile-cache demo` (`make demo`): the quick start, then a kernel restart, in real kernels.

A new kernel loads the extension, builds a small model and compiles it under `%%compile_cache demo-mlp`; the kernel
is restarted on an empty torch cache dir (what a colleague's fresh machine has, or a machine whose /tmp was
cleaned) and runs the same cells. It prints what each run said and the two compile cells side by side. Everything
lives in a temporary folder (or `--dir DIR`), torch's precompiled headers too; your own store and caches are not
touched.
CPU only, about 40 s on 2 cores.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable

LOAD = "%load_ext jupyter_compile_cache"
MODEL = """import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(256, 512)
        self.l2 = torch.nn.Linear(512, 256)

    def forward(self, x):
        return torch.tanh(self.l2(torch.nn.functional.gelu(self.l1(x))))

torch.manual_seed(0)
model, x = Net(), torch.randn(64, 256)"""
COMPILE = """%%compile_cache demo-mlp
compiled = torch.compile(model)
with torch.no_grad():
    y = compiled(x)
print("same result as eager:", torch.allclose(y, model(x), atol=1e-5))"""


def run(folder: str | None = None, say: Callable[[str], None] = print) -> dict[str, float]:
    """Both runs; returns the compile cell's seconds in each ({"first": s, "restarted": s})."""
    from ..kernels.kernel_runner import KernelRunner

    if folder is not None and not os.path.isdir(os.path.dirname(os.path.abspath(folder))):
        # the store would make every folder on the way (once, /nonexistent/x at the filesystem's root)
        parent = os.path.dirname(os.path.abspath(folder))
        raise FileNotFoundError(f"{parent} is not a folder: --dir names a new or existing folder inside one")
    with tempfile.TemporaryDirectory(prefix="jcc-demo-") as scratch:
        root = os.path.abspath(folder or scratch)
        say(f"demo folder: {root} (a store and torch cache dirs of its own)")
        seconds, said = {}, {}
        for step, (run_name, cache) in enumerate((("first", "torch-cache-1"), ("restarted", "torch-cache-2")), 1):
            env = {
                "JUPYTER_COMPILE_CACHE_DIR": os.path.join(root, "store"),
                "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, cache),
                # torch keeps its precompiled headers (~150 MB) in its default dir, under TMPDIR, whatever dir is set
                "TMPDIR": os.path.join(root, "tmp"),
            }
            os.makedirs(env["TMPDIR"], exist_ok=True)
            what = "a new kernel" if run_name == "first" else "the kernel restarted, on an empty torch cache dir"
            say(f"[{step}/2] {what}: %load_ext, the model, then the compile cell ...")
            kernel = KernelRunner(env)
            try:
                kernel.run(LOAD)
                kernel.run(MODEL)
                seconds[run_name], out = kernel.run(COMPILE)
            finally:
                kernel.close()
            said[run_name] = out
            for line in out.strip().splitlines():
                say(f"      {line}")
        first, again = seconds["first"], seconds["restarted"]
        say("")
        say("| compile cell | first run | after the restart |")
        say("|---|---|---|")
        say(f"| whole cell | {first:.2f} s | {again:.2f} s ({again / first:.2f}x) |")
        parts: dict[str, list[float | None]] = {}
        for label, pattern in (
            ("the cell's code", r"ran in ([0-9.]+) s"),
            ("waiting for torch's compiler to load", r"waited ([0-9.]+) s"),
        ):
            found = [re.search(pattern, said[k]) for k in ("first", "restarted")]
            parts[label] = [float(m.group(1)) if m else None for m in found]
            values = [f"{v:.2f} s" if v is not None else "-" for v in parts[label]]
            say(f"| {label} | {values[0]} | {values[1]} |")
        code_first, code_again = parts["the cell's code"]
        if code_first is not None and code_again is not None:
            # The compile time saved is the cell's own code; the compiler's load is per process, not cached.
            say(f"\nthe restore saved {code_first - code_again:.1f} s of compiling (the cell's code). Loading torch's")
            say("compiler is per process, so no bundle holds it: the warm kernel (jupyter-compile-cache")
            say("install-kernel) starts every kernel with it loaded.")
        return seconds
