"""One function wrapped by two torch.compile calls at two dtypes in one cell: `python dtypes_case.py NAME
float32,float64` (run by matrix.sh)."""

import sys

import torch
from blocks import f
from torch._dynamo.utils import counters

import jupyter_compile_cache as jcc

dtypes = [getattr(torch, d) for d in sys.argv[2].split(",")]
ok = True
with jcc.cell(sys.argv[1]), torch.no_grad():
    for dtype in dtypes:
        x = torch.randn(4, 32, dtype=dtype)
        ok &= torch.allclose(torch.compile(f)(x), f(x))
print("RESULT", sys.argv[2], "graphs", counters["stats"]["unique_graphs"], "match", ok, dict(counters["dynamo_cache"]))
