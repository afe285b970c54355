"""Cells and jobs whose compiled work runs in processes they start: `!torchrun` in a notebook, and
`jupyter-compile-cache run NAME -- torchrun ...` on another "node" (its own store and torch cache dir, one hub).

Real processes throughout: a real kernel runs the cell, torch.distributed.run starts two ranks (gloo, DDP over a
`torch.compile`d model), and the CLI runs the same job elsewhere with the notebook's bundle restored.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TRAIN = """
import torch, torch.distributed as dist
from torch._dynamo.utils import counters
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
# a rank-dependent width: each rank compiles a graph of its own too
extra = torch.compile(lambda t: t.sum(dim=-1) * 2)
ddp = torch.nn.parallel.DistributedDataParallel(torch.compile(model))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for _ in range(3):
    x, y = torch.randn(8, 16), torch.randn(8, 4)
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(round(loss.item() + float(extra(torch.ones(2, 3 + dist.get_rank()))[0]), 6))
inductor = counters["inductor"]
print(f"RANK {dist.get_rank()} LOSSES {losses} MISSES {inductor['fxgraph_cache_miss']}", flush=True)
dist.destroy_process_group()
"""


def _ranks(out: str) -> dict[int, tuple[str, int]]:
    return {int(r): (losses, int(m)) for r, losses, m in re.findall(r"RANK (\d) LOSSES (\[.*?\]) MISSES (\d+)", out)}


def _job(script: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", script]


def test_a_torchrun_cell_saves_what_its_ranks_compiled_and_a_job_elsewhere_restores_it(kernel_factory, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    hub = tmp_path / "hub"
    hub.mkdir()
    node = {n: (tmp_path / f"store_{n}", tmp_path / f"cache_{n}") for n in ("a", "b")}
    hub_url = f"file://{hub}"

    # The notebook: a cell that starts the ranks (IPython's `!`), each of which compiles.
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=node["a"][1], JUPYTER_COMPILE_CACHE_DIR=node["a"][0],
                       JUPYTER_COMPILE_CACHE_HUB=hub_url)  # fmt: skip
    k.run("%load_ext jupyter_compile_cache").check()
    out = k.run(f"%%compile_cache ddp\n!{' '.join(_job(str(script)))} 2>/dev/null").check().stdout
    cold = _ranks(out)
    assert sorted(cold) == [0, 1] and all(m > 0 for _, m in cold.values()), out
    assert "the processes it started compiled" in out and "saved" in out and "the hub" in out, out

    # Another node: the same job from a terminal, the notebook's bundle restored from the hub before it starts.
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(node["b"][1]), PYTHONWARNINGS="ignore")
    cli = [sys.executable, "-m", "jupyter_compile_cache", "run", "ddp", "--store", str(node["b"][0])]
    job = subprocess.run([*cli, "--hub", hub_url, "--", *_job(str(script))], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert job.returncode == 0, job.stderr
    restored = _ranks(job.stdout)
    assert f"restored 'ddp' from the hub {hub_url}" in job.stderr, job.stderr
    assert {r: m for r, (_, m) in restored.items()} == {0: 0, 1: 0}, job.stdout  # every rank's graphs restored
    assert {r: losses for r, (losses, _) in restored.items()} == {r: losses for r, (losses, _) in cold.items()}
    assert "nothing new to save" in job.stderr, job.stderr

    # A job that fails: its exit status, and nothing saved; one that cannot start: 127, said.
    failing = subprocess.run([*cli, "--no-hub", "--", sys.executable, "-c", "raise SystemExit(3)"], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert failing.returncode == 3 and "exited with status 3: nothing saved" in failing.stderr, failing.stderr
    missing = subprocess.run([*cli, "--no-hub", "--", "no-such-program-here"], env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert missing.returncode == 127 and "could not start 'no-such-program-here'" in missing.stderr
    usage = subprocess.run([*cli], env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "put it after --" in usage.stderr
