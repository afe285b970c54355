"""Push and pull of one large bundle against the backend client's own floor, and the memory they hold, on each
backend: a loopback redis-server, S3 (moto's server), Azure Blob (Azurite) and a shared folder.

Each step is a fresh process, timed around the transfer alone, its peak RSS measured over its imports:

  push        `Hub.push` of the bundle's payload from a local store (chunks encoded and hashed on worker threads)
  pull        `HubSource.fetch` into an empty local store (every chunk verified, written at its place)
  floor push  the raw client writing the same bytes as the same 4 MB values/objects, as fast as it goes (S3 and
              Azure: obstore, 8 at a time on 8 threads; Redis: pipelines of 2 SETs on one connection; folder: one
              file each, fsynced)
  floor pull  the raw client reading them back into a file the same way

Ours and the floor alternate, `--repeat` times each (medians and the spread in the table: the machine's noise is
part of every figure), for every `--sizes` (MB). The memory check: the peak over imports must not grow with the
bundle (a 4 GB bundle's within 10 % of a 1 GB one's).

  python -m benchmarks hub_transfer --backends redis s3 az file --sizes 1000 4000 --repeat 5 \\
      --out benchmarks/results/hub_transfer_cpu.json
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

from benchmarks.harness import Job, option
from tests.helpers import hubs  # the servers the hub tests use

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHUNK = 4 << 20

CHILD = r"""
import json, os, resource, sys, time
from concurrent.futures import ThreadPoolExecutor
step, kind, url, store_root, name, work = sys.argv[1:7]
from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.sources import HubSource
from jupyter_compile_cache.storage.store import LocalStore
CHUNK = 4 << 20
hub = Hub(HubConfig(url=url, namespace="bench", chunk_size=CHUNK, timeout=120))
backend = hub.backend
if kind == "redis":
    client = backend.client  # connected before the clock starts, as the floor's is
elif kind in ("s3", "az"):
    import obstore
    client = backend.store
payload = os.path.join(work, "payload.bin")
keys = lambda n: [f"floor/{i}" for i in range(n)]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
start = time.perf_counter()
if step == "push":
    [manifest] = LocalStore(store_root).versions(name)
    hub.push(manifest, LocalStore(store_root).payload_path(manifest))
elif step == "pull":
    [manifest] = hub.versions(name)
    HubSource(hub).fetch(manifest, LocalStore(os.path.join(work, f"pulled-{time.time_ns()}")))
else:
    size = os.path.getsize(payload)
    n = (size + CHUNK - 1) // CHUNK
    fd = os.open(payload, os.O_RDONLY) if step == "floor-push" else os.open(
        os.path.join(work, f"floor-{time.time_ns()}.bin"), os.O_WRONLY | os.O_CREAT, 0o600)
    if kind in ("s3", "az"):
        prefix = backend.prefix
        def one(i):
            if step == "floor-push":
                obstore.put(client, f"{prefix}/floor/{i}", os.pread(fd, CHUNK, i * CHUNK), use_multipart=False)
            else:
                os.pwrite(fd, obstore.get(client, f"{prefix}/floor/{i}").bytes(), i * CHUNK)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(n)))
    elif kind == "redis":
        for at in range(0, n, 2):
            pipe = client.pipeline(transaction=False)
            for i in range(at, min(at + 2, n)):
                if step == "floor-push":
                    pipe.set(f"floor:{i}", os.pread(fd, CHUNK, i * CHUNK))
                else:
                    pipe.get(f"floor:{i}")
            for i, value in zip(range(at, min(at + 2, n)), pipe.execute()):
                if step == "floor-pull":
                    os.pwrite(fd, value, i * CHUNK)
    else:
        folder = os.path.join(backend.root, "floor")
        os.makedirs(folder, exist_ok=True)
        for i in range(n):
            path = os.path.join(folder, str(i))
            if step == "floor-push":
                with open(path, "wb") as f:  # on disk before it counts, as the folder backend's writes are
                    f.write(os.pread(fd, CHUNK, i * CHUNK))
                    f.flush()
                    os.fsync(f.fileno())
            else:
                with open(path, "rb") as f:
                    os.pwrite(fd, f.read(), i * CHUNK)
    os.close(fd)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT", json.dumps({"seconds": seconds, "peak_over_imports_mb": peak - base}))
"""


def _step(step: str, kind: str, url: str, store_root: str, name: str, work: str) -> dict:
    os.sync()  # a step does not pay for the disk still writing out the one before
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, step, kind, url, store_root, name, work],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{step} on {kind} failed: {proc.stderr[-1500:]}")
    return json.loads(line[7:])


def _bundle(work: pathlib.Path, size_mb: int) -> tuple[str, str]:
    """A local store holding one incompressible bundle of SIZE_MB (kernels do not compress), and its payload's path
    copied to work/payload.bin for the floors."""
    from jupyter_compile_cache.storage.bundle import Manifest
    from jupyter_compile_cache.storage.store import LocalStore

    src = work / "src"
    src.mkdir()
    files = {}
    per_file = 25 << 20
    for i in range(max(1, (size_mb << 20) // per_file)):
        path = src / f"k{i}.cubin"
        with open(path, "wb") as f:
            for _ in range(per_file >> 20):
                f.write(os.urandom(1 << 20))
        files[f"triton/0/k{i}/k{i}.cubin"] = str(path)
    store = LocalStore(str(work / "store"))
    manifest = store.write(Manifest.new("big", {"torch": "bench"}, "f" * 12, "bench@host"), files)
    for path in files.values():
        os.remove(path)
    os.link(store.payload_path(manifest), work / "payload.bin")
    return str(work / "store"), "big"


def _clear(server: hubs.HubUnderTest) -> None:
    """The hub emptied between runs (moto and Redis hold what they are sent in memory)."""
    if server.kind == "redis":
        server.client().flushall()
    elif server.kind in ("s3", "az"):
        import obstore

        from jupyter_compile_cache.storage.backends.object_store import ObjectStoreBackend

        store = ObjectStoreBackend(server.url).store  # the whole bucket: the hub's prefix and the floor's
        names = [entry["path"] for page in obstore.list(store) for entry in page]
        for name in names:
            obstore.delete(store, name)
    else:
        import shutil

        shutil.rmtree(server.url[len("file://") :], ignore_errors=True)
        os.makedirs(server.url[len("file://") :])


def run_backend(kind: str, sizes: list[int], repeat: int, work: pathlib.Path) -> list[dict]:
    rows = []
    hub_dir = work / f"hub-{kind}"
    hub_dir.mkdir()
    server = hubs.start(kind, hub_dir)
    url = server.url
    if kind == "s3":  # straight to the server: the tests' proxy (which can cut the network) is one more hop
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{server.server.port}"
    if kind == "az":
        os.environ["AZURE_STORAGE_CONNECTION_STRING"] = server.server.connection_string(port=server.server.port)
    try:
        for size_mb in sizes:
            case = work / f"{kind}-{size_mb}"
            case.mkdir()
            store_root, name = _bundle(case, size_mb)
            runs: dict[str, list[dict]] = {s: [] for s in ("push", "floor-push", "pull", "floor-pull")}
            for i in range(repeat):
                order = ("push", "floor-push") if i % 2 == 0 else ("floor-push", "push")
                _clear(server)
                for step in order:
                    runs[step].append(_step(step, kind, url, store_root, name, str(case)))
                for step in ("pull", "floor-pull") if i % 2 == 0 else ("floor-pull", "pull"):
                    runs[step].append(_step(step, kind, url, store_root, name, str(case)))
                for leftover in case.glob("pulled-*"):
                    import shutil

                    shutil.rmtree(leftover, ignore_errors=True)
                for leftover in case.glob("floor-*.bin"):
                    leftover.unlink()
                print(
                    f"{kind} {size_mb} MB run {i + 1}: "
                    + ", ".join(f"{s} {runs[s][-1]['seconds']:.2f} s" for s in runs),
                    flush=True,
                )
            row = {"backend": kind, "size_mb": size_mb, "repeat": repeat, "runs": runs}
            for step, results in runs.items():
                seconds = [r["seconds"] for r in results]
                row[step] = {
                    "median_s": statistics.median(seconds),
                    "min_s": min(seconds),
                    "max_s": max(seconds),
                    "peak_over_imports_mb": max(r["peak_over_imports_mb"] for r in results),
                }
            rows.append(row)
            import shutil

            shutil.rmtree(case, ignore_errors=True)
    finally:
        server.stop()
    return rows


def table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    headers = [
        "backend", "bundle", "step", "ours: median (min-max)", "floor: median (min-max)", "ratio (target <= 1.3x)",
        "ours: peak memory over imports", "floor's",
    ]  # fmt: skip
    cells = []
    for row in rows:
        for step in ("push", "pull"):
            ours, floor = row[step], row[f"floor-{step}"]
            cells.append([
                row["backend"], f"{row['size_mb']} MB", step,
                f"{ours['median_s']:.2f} s ({ours['min_s']:.2f}-{ours['max_s']:.2f})",
                f"{floor['median_s']:.2f} s ({floor['min_s']:.2f}-{floor['max_s']:.2f})",
                f"{ours['median_s'] / floor['median_s']:.2f}x",
                f"{ours['peak_over_imports_mb']:.0f} MB", f"{floor['peak_over_imports_mb']:.0f} MB",
            ])  # fmt: skip
    return headers, cells


OPTIONS = [
    option("--backends", nargs="+", default=["redis", "s3", "az", "file"], choices=["redis", "s3", "az", "file"]),
    option("--sizes", type=int, nargs="+", default=[1000, 4000], help="bundle sizes, MB"),
    option("--repeat", type=int, default=5),
]


def run(job: Job) -> None:
    args = job.args
    rows = []
    with tempfile.TemporaryDirectory(prefix="hub-transfer-") as work:
        for kind in args.backends:
            rows += run_backend(kind, args.sizes, args.repeat, pathlib.Path(work))
            job.keep(rows=rows)
    job.table(*table(rows), title=f"chunks of {CHUNK >> 20} MB; loopback servers", align="lrlrrrrr")
