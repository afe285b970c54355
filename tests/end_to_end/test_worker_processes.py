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

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

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
    # cold: the ranks compile (one may find the graph the other just wrote in their shared cache dir, as plain torch)
    assert sorted(cold) == [0, 1] and any(m > 0 for _, m in cold.values()), out
    assert "the processes it started compiled" in out and "saved" in out and "the hub" in out, out
    assert re.search(r"'ddp' ran in \S+ s, \d+ cache hits?, [1-9]\d* miss", out), out  # the ranks' own counts

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
    # the ranks' hits are the job's, and the line says what the restore saved against the notebook's cold run
    said = re.search(r"'ddp': the command ran in \S+ s, [1-9]\d* cache hits, 0 misses; (no time saved|\S+ s of comp)",
                     job.stderr)  # fmt: skip
    assert said, job.stderr

    # A job that fails: its exit status, and nothing saved; one that cannot start: 127, said.
    failing = subprocess.run([*cli, "--no-hub", "--", sys.executable, "-c", "raise SystemExit(3)"], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
    assert failing.returncode == 3 and "'ddp': the command exited with status 3 after" in failing.stderr
    assert "nothing saved" in failing.stderr and "raised" not in failing.stderr, failing.stderr  # said once, as a job
    missing = subprocess.run([*cli, "--no-hub", "--", "no-such-program-here"], env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert missing.returncode == 127 and "could not start 'no-such-program-here'" in missing.stderr
    usage = subprocess.run([*cli], env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "put it after --" in usage.stderr


# One process, no ranks: the CLI's side of a job that saves (the ranks' own graphs are the test above's).
SCRIPT_JOB = """
import torch
from torch._dynamo.utils import counters
torch.manual_seed(0)
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
losses = [round(float(model(torch.randn(8, 16)).pow(2).mean()), 6) for _ in range(2)]
print(f"RANK 0 LOSSES {losses} MISSES {counters['inductor']['fxgraph_cache_miss']}", flush=True)
"""


def test_a_job_run_from_a_terminal_saves_and_a_notebook_cell_elsewhere_restores_it(kernel_factory, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT_JOB)
    hub_url = f"file://{tmp_path / 'hub'}"
    (tmp_path / "hub").mkdir()

    # The job first, on a cluster node: it compiles, saves and pushes.
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache_job"), PYTHONWARNINGS="ignore")
    cli = [sys.executable, "-m", "jupyter_compile_cache", "run", "from-job", "--store", str(tmp_path / "store_job")]
    job = subprocess.run([*cli, "--hub", hub_url, "--", sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert job.returncode == 0, job.stderr
    cold = _ranks(job.stdout)
    assert cold[0][1] > 0 and "the local store and the hub" in job.stderr, job.stderr
    assert re.search(r"'from-job': the command ran in \S+ s, 0 cache hits, [1-9]\d* misses", job.stderr), job.stderr

    # Then a notebook on another machine: the same job from a cell restores the job's bundle and compiles nothing.
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=tmp_path / "cache_nb", JUPYTER_COMPILE_CACHE_DIR=tmp_path / "store_nb",
                       JUPYTER_COMPILE_CACHE_HUB=hub_url)  # fmt: skip
    k.run("%load_ext jupyter_compile_cache").check()
    out = k.run(f"%%compile_cache from-job\n!{sys.executable} {script} 2>/dev/null").check().stdout
    restored = _ranks(out)
    assert f"restored 'from-job' from the hub {hub_url}" in out, out
    assert restored == {0: (cold[0][0], 0)}, out  # the same losses, no graph compiled
    # a forward with gradients on: torch keeps no AOTAutograd entry without a backward, and the line says so
    assert "1 AOTAutograd graph made again over the restored FX graph" in out, out

    # The job under a name of its own, on the cluster node's warm torch cache: nothing compiled, yet the name had no
    # bundle, so what its process read is one (the job's own counts say where its graphs came from).
    cli = [*cli[:4], "warm-job", *cli[5:]]
    job = subprocess.run([*cli, "--no-hub", "--", sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert job.returncode == 0 and _ranks(job.stdout) == {0: (cold[0][0], 0)}, job.stderr
    assert re.search(r"'warm-job': the command ran in \S+ s, [1-9]\d* cache hits?, 1 miss; saved [1-9]", job.stderr)


# A job that writes cache files as a compile would (no torch: the restore's timing is what is tested), and that can
# wait for the files a restore brings, then write one of its own.
FILE_JOB = """
import os, sys, time
root = os.environ["TORCHINDUCTOR_CACHE_DIR"]
names = [f"fxgraph/f{i}/entry" for i in range(40)]
if sys.argv[1] == "write":
    names.append("fxgraph/zz/own-entry")
else:
    deadline = time.time() + 60
    while not all(os.path.exists(os.path.join(root, n)) for n in names) and time.time() < deadline:
        time.sleep(0.01)
    print("SEEN", sum(os.path.exists(os.path.join(root, n)) for n in names), flush=True)
    names = ["fxgraph/zz/own-entry"]
for name in names:
    os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    with open(os.path.join(root, name), "w") as f:
        f.write(name)
"""


def test_a_job_starts_while_its_bundle_is_restored_and_what_lands_is_never_counted_as_its_work(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(FILE_JOB)
    cli = [sys.executable, "-m", "jupyter_compile_cache", "run", "files", "--no-hub", "--store", str(tmp_path / "s")]

    def run(cache: str, mode: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / cache))
        done = subprocess.run([*cli, "--", sys.executable, str(script), mode], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done

    cold = run("cache_a", "write")
    assert "the processes it started compiled 41 new files; saved 41 files" in cold.stderr, cold.stderr
    # On an empty cache dir: the job runs while the restore lands (the job's first look may find none of it), sees
    # every restored file, and writes one that was already in the bundle: nothing of it is the job's new work.
    again = run("cache_b", "wait")
    assert "SEEN 40" in again.stdout, again.stdout
    assert "restored 'files' from the local store (41 files" in again.stderr, again.stderr
    assert "nothing new to save" in again.stderr and "compiled" not in again.stderr.split("ran in")[-1], again.stderr
    assert sorted(os.listdir(tmp_path / "cache_b" / "fxgraph")) == sorted([*(f"f{i}" for i in range(40)), "zz"])


NODE_JOB = """
import os, sys, time, torch
from torch._dynamo.utils import counters
here, everyone = sys.argv[1], sys.argv[2:]
open(here, "w").close()
deadline = time.time() + 120
while not all(os.path.exists(p) for p in everyone) and time.time() < deadline:  # the job's rendezvous
    time.sleep(0.05)
step = torch.compile(lambda t: torch.nn.functional.gelu(t @ t.T).sum())
print(f"VALUE {float(step(torch.ones(8, 8))):.4f} MISSES {counters['inductor']['fxgraph_cache_miss']}", flush=True)
"""


def test_the_nodes_of_one_job_compile_at_once_push_one_version_then_each_pulls_it_once(tmp_path, redis_server):
    script = tmp_path / "node_job.py"
    script.write_text(NODE_JOB)
    nodes = ("n1", "n2")

    def start(run: int) -> list[subprocess.Popen]:
        ready = [str(tmp_path / f"ready-{run}-{n}") for n in nodes]
        jobs = []
        for node, here in zip(nodes, ready):
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"cache-{run}-{node}"),
                       PYTHONWARNINGS="ignore", JUPYTER_COMPILE_CACHE_HUB=redis_server.url)  # fmt: skip
            cli = [sys.executable, "-m", "jupyter_compile_cache", "run", "nodes", "--store", str(tmp_path / node)]
            jobs.append(subprocess.Popen([*cli, "--", sys.executable, str(script), here, *ready], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
        return jobs

    def finish(jobs: list[subprocess.Popen]) -> list[tuple[str, str]]:
        outs = [job.communicate(timeout=300) for job in jobs]
        assert all(job.returncode == 0 for job in jobs), outs
        return outs

    # Both nodes start with nothing anywhere: both compile, one holds the lease and pushes, the other keeps its
    # copy local and says whose the hub gets.
    first = finish(start(1))
    assert all("MISSES 0" not in out for out, _err in first), first
    hub_versions = redis_server.client().keys("*nodes*manifest*")
    assert len(hub_versions) == 1, hub_versions
    lines = [err for _out, err in first]
    assert sum("the local store and the hub" in err for err in lines) == 1, lines
    assert sum("is being compiled by" in err and "compiled at the same time" in err for err in lines) == 1, lines

    # Both again, on empty cache dirs: each restores (its own store, or the hub's version), compiles nothing,
    # and nothing new reaches the hub.
    again = finish(start(2))
    assert all("MISSES 0" in out for out, _err in again), again
    values = {out.split("VALUE ")[1].split()[0] for out, _err in first + again}
    assert len(values) == 1, values
    assert all("nothing new to save" in err for _out, err in again), again
    assert len(redis_server.client().keys("*nodes*manifest*")) == 1


# accelerate's notebook_launcher: the training function forked into two processes (gloo on the CPU), from a kernel
# that ran CPU ops first, as a notebook does (OpenMP started before the fork). Each rank writes what it computed.
# A forked rank sets one intra-op thread first: the parent's OpenMP pool does not survive the fork, and without it
# plain torch's ranks hang in their first parallel op here (torch 2.14 and 2.15, no extension loaded).
LAUNCHED = """
import torch
from accelerate import notebook_launcher
torch.manual_seed(0)
warmup = torch.randn(256, 256) @ torch.randn(256, 256)  # the kernel's own CPU work before the launch
def train(out_dir):
    import torch, torch.distributed as dist
    from torch._dynamo.utils import counters
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(torch.compile(model))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(ddp(torch.randn(8, 16)), torch.randn(8, 4))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(round(loss.item(), 6))
    with open(f"{out_dir}/rank{rank}.txt", "w") as f:
        f.write(f"RANK {rank} LOSSES {losses} MISSES {counters['inductor']['fxgraph_cache_miss']}")
    dist.destroy_process_group()
"""


def test_a_notebook_launcher_cell_saves_what_its_forked_processes_compiled_and_restores_it(kernel_factory, tmp_path):
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    launch = f"%%compile_cache launched\nnotebook_launcher(train, args=({str(out)!r},), num_processes=2)"

    def ranks() -> dict[int, tuple[str, int]]:
        found = _ranks(" ".join((out / f"rank{r}.txt").read_text() for r in (0, 1)))
        for r in (0, 1):
            (out / f"rank{r}.txt").unlink()
        return found

    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=tmp_path / "cache_a", JUPYTER_COMPILE_CACHE_DIR=store)
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(LAUNCHED).check()
    said = k.run(launch).check().stdout
    cold = ranks()
    # cold: the ranks compile (one may find the graph the other just wrote in their shared cache dir, as plain torch)
    assert sorted(cold) == [0, 1] and any(m > 0 for _, m in cold.values()), said
    assert "the processes it started compiled" in said and "saved" in said, said

    # After a restart on an empty cache dir: the bundle is restored before the fork, and no rank compiles a graph.
    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache_b")})
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(LAUNCHED).check()
    said = k.run(launch).check().stdout
    restored = ranks()
    assert "restored 'launched' from the local store" in said, said
    assert {r: m for r, (_, m) in restored.items()} == {0: 0, 1: 0}, said
    assert {r: losses for r, (losses, _) in restored.items()} == {r: losses for r, (losses, _) in cold.items()}


# Ranks that run a compiled model of the script's own class (no DDP: torch packages no precompile entry for the
# graphs DDP's optimizer splits). Each rank checks its compiled answers against the same model run eagerly.
PRECOMPILED_JOB = """
import os, torch
from torch._dynamo.utils import counters
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)
    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))
net = Net()
model = torch.compile(net)
x = torch.randn(8, 16) + int(os.environ.get("RANK", 0))
with torch.no_grad():
    out, eager = model(x), net(x)
torch.testing.assert_close(out, eager)
hits = counters["dynamo_cache"]["dynamo_cache_hit"]
print(f"RANK {os.environ.get('RANK', 0)} OUT {round(float(out.sum()), 4)} HITS {hits}", flush=True)
"""


@pytest.mark.skipif(not PrecompileGuard.available(), reason="this torch has no Dynamo precompile we can check")
def test_precompile_carried_into_the_ranks_restores_their_functions_and_never_runs_edited_code_stale(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(PRECOMPILED_JOB)
    cli = [sys.executable, "-m", "jupyter_compile_cache", "run", "ranks", "--no-hub", "--store", str(tmp_path / "s"),
           "--precompile-processes", "--"]  # fmt: skip

    def run(cache: str, command: list[str], **extra: str) -> tuple[dict[int, tuple[str, int]], str]:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / cache), PYTHONWARNINGS="ignore", **extra)
        done = subprocess.run([*cli, *command], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        ranks = re.findall(r"RANK (\d) OUT (\S+) HITS (\d+)", done.stdout)
        return {int(r): (out, int(hits)) for r, out, hits in ranks}, done.stderr

    cold, said = run("cache_a", _job(str(script)))
    assert sorted(cold) == [0, 1] and all(hits == 0 for _, hits in cold.values()), said
    assert "2 processes it started ran with precompile: 0 entries restored" in said and "saved" in said, said
    assert "ran in" in said and "0 cache hits" in said and ", 0 misses" not in said, said  # the ranks' misses

    # Another cache dir, the bundle restored: each rank loads its function's entry, Dynamo traces nothing.
    restored, said = run("cache_b", _job(str(script)))
    assert restored == {r: (out, 1) for r, (out, _) in cold.items()}, said
    assert "2 processes it started ran with precompile: 2 entries restored, 0 frames traced by Dynamo" in said, said
    assert re.search(r"ran in \S+ s, [2-9]\d* cache hits, 0 misses", said), said  # the ranks' hits, counted
    assert "nothing new to save" in said, said

    # The script edited, run as rank 0 alone (as torchrun would name it, without its agent): the restored entry is
    # refused, the new code runs, and the edited function's entry is saved beside it.
    script.write_text(PRECOMPILED_JOB.replace("functional.gelu", "functional.silu"))
    edited, said = run("cache_c", [sys.executable, str(script)], LOCAL_RANK="0", RANK="0")
    assert edited[0][1] == 0 and edited[0][0] != cold[0][0], said  # checked against eager in the job itself
    assert "1 stale precompile entry refused (code changed)" in said and "1 frame traced by Dynamo" in said, said


def test_a_job_whose_processes_never_compile_says_precompile_did_not_reach_them(tmp_path):
    cli = [sys.executable, "-m", "jupyter_compile_cache", "run", "quiet", "--no-hub", "--store", str(tmp_path / "s")]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    job = [sys.executable, "-c", "import os; print(os.environ['PYTHONPATH'].split(os.pathsep)[0])"]
    done = subprocess.run([*cli, "--precompile-processes", "--", *job], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("process_start"), done.stdout  # the hook's folder first on its path
    assert "no process it started ran with precompile (none called torch.compile" in done.stderr, done.stderr
