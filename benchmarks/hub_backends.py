"""Push and pull one bundle through each hub backend, side by side, and against another checkout of the package.

Each step runs in a fresh process (the package of `--src`, default this checkout), three times; the table shows the
median seconds. A real redis-server is started on a free loopback port; the folder backend writes under --work.

  python -m benchmarks hub_backends --sizes 10 100 --baseline-src /path/to/older/checkout
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import Job, option

STEP = r"""
import json, os, sys, tempfile, time
from jupyter_compile_cache.storage.bundle import Manifest
from jupyter_compile_cache.storage.store import LocalStore
import jupyter_compile_cache.storage.hub as hubmod
url, size_mb, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
Hub = getattr(hubmod, "Hub", None) or getattr(hubmod, "RedisHub")
src = os.path.join(work, "src")
os.makedirs(src, exist_ok=True)
files = {}
for i in range(max(1, size_mb // 4)):
    path = os.path.join(src, f"k{i}.bin")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(os.urandom(4 << 20))
    files[f"inductor/ab/k{i}.bin"] = path
store = LocalStore(os.path.join(work, "a"))
manifest = store.write(Manifest.new(f"big{size_mb}", {}, "0" * 12, "bench"), files)
hub = Hub(hubmod.HubConfig(url=url, namespace=f"bench{time.time_ns()}"))
t = time.perf_counter(); hub.push(manifest, store.payload_path(manifest)); push = time.perf_counter() - t
t = time.perf_counter()
[listed] = hub.versions(manifest.name)
with tempfile.TemporaryFile(dir=work) as sink:
    hub.pull(listed, sink)
pull = time.perf_counter() - t
print(json.dumps({"push": push, "pull": pull}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step(src: str, url: str, size_mb: int, work: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run([sys.executable, "-c", STEP, url, str(size_mb), work], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


OPTIONS = [
    option("--sizes", type=int, nargs="*", default=[10, 100], help="bundle sizes in MB (incompressible)"),
    option("--repeats", type=int, default=3),
    option("--src", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    option("--baseline-src", help="another checkout, measured on Redis beside this one"),
    option("--work", default=None),
]


def run(job: Job) -> None:
    args = job.args
    work = args.work or tempfile.mkdtemp(prefix="jcc-hub-bench-")
    port = free_port()
    redis = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", work],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)
    folder = os.path.join(work, "share")
    os.makedirs(folder)
    lanes = [("this checkout", args.src, "redis", f"redis://127.0.0.1:{port}/0")]
    if args.baseline_src:
        lanes.insert(0, ("baseline", args.baseline_src, "redis", f"redis://127.0.0.1:{port}/0"))
    lanes.append(("this checkout", args.src, "file", f"file://{folder}"))
    rows = []
    try:
        for size in args.sizes:
            for label, src, backend, url in lanes:
                runs = []
                for i in range(args.repeats):
                    runs.append(step(src, url, size, os.path.join(work, f"w{size}")))
                    job.say(f"  {label:14} {backend:6} {size:5d} MB run {i + 1}: {runs[-1]}")
                rows.append({
                    "code": label, "backend": backend, "size_mb": size,
                    "push_s": statistics.median(r["push"] for r in runs),
                    "pull_s": statistics.median(r["pull"] for r in runs),
                })  # fmt: skip
    finally:
        redis.kill()
        shutil.rmtree(work, ignore_errors=True)
    job.keep(rows=rows)
    table = [[r["code"], r["backend"], f"{r['size_mb']} MB", f"{r['push_s']:.3f}", f"{r['pull_s']:.3f}"] for r in rows]
    job.table(["code", "backend", "size", "push s", "pull s"], table, title=f"median of {args.repeats}", align="llrrr")
