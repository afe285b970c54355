"""torchao int4 weight-only on the GPU, cold then restored, through the script API (README.md here says why not
through real_work): `python int4_check.py cold` with an empty TORCHINDUCTOR_CACHE_DIR, then `python int4_check.py
restored` with another empty one and the same JUPYTER_COMPILE_CACHE_DIR. Needs torchao and mslk-cuda."""

import sys
import time
import warnings

import torch
from torchao.quantization import Int4WeightOnlyConfig, quantize_

import jupyter_compile_cache as jcc

warnings.filterwarnings("ignore")
torch.manual_seed(0)
width = 256
net = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
net = net.to("cuda").to(torch.bfloat16)
quantize_(net, Int4WeightOnlyConfig(group_size=32))
x = torch.randn(16, width, device="cuda", dtype=torch.bfloat16)
with torch.no_grad():
    want = net(x)
start = time.perf_counter()
with jcc.cell("int4"):
    with torch.no_grad():
        got = torch.compile(net)(x)
    torch.cuda.synchronize()
took = time.perf_counter() - start
print("RESULT", sys.argv[1], round(float(got.float().abs().mean()), 5), round(float(want.float().abs().mean()), 5))
print(f"{took:.2f}s")
