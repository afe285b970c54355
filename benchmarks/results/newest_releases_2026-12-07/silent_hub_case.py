"""The quick start's cell with a hub that takes connections and never answers (a listening socket nobody serves),
cold: the cell's whole time and what it said. `JUPYTER_COMPILE_CACHE_DIR=... python silent_hub_case.py`."""

import os
import socket
import time

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(64)  # the kernel accepts; nothing ever answers
os.environ["JUPYTER_COMPILE_CACHE_HUB"] = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"

import torch  # noqa: E402

import jupyter_compile_cache as jcc  # noqa: E402

model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
x = torch.randn(64, 256)
torch.compile(lambda t: t + 1)(torch.ones(2))  # torch's compiler loaded first: the cell's time is its own
start = time.perf_counter()
with jcc.cell("mlp"), torch.no_grad():
    torch.compile(model)(x)
print(f"RESULT cell with a silent hub: {time.perf_counter() - start:.2f} s")
