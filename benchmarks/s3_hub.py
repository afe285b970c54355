"""An S3 hub, in one run against one S3 protocol server (moto's, on loopback; or any server AWS_ENDPOINT_URL names):

1. The client, chosen by measurement: boto3 and obstore, each moving the same 10 MB and 1 GB of bytes both ways,
   as one object (each client's own multipart transfer) and as the hub's 4 MB objects, 8 at a time.
2. Our hub against the floors: save, push, pull and restore of a 1 GB bundle (a fresh process each, as a user runs
   them: `jupyter_compile_cache.save`, the CLI's `hub push` and `hub pull`, a restore into an empty cache dir),
   beside the same run's dd+fsync and sha256 of the same bytes and the raw client's put and get of the payload's
   bytes in the same 4 MB objects. Ratios and peak memory (in chunks) in the table.
3. Listing 10,000 objects by prefix.

  python -m benchmarks s3_hub --out benchmarks/results/s3_hub_cpu_<date>.json [--sizes 10,1000]
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import Job, option
from benchmarks.large_bundles import floors, make_cache, save_push_pull_restore

HERE = os.path.dirname(os.path.abspath(__file__))

CHUNK = 4 << 20
CONCURRENCY = 8

# One client moving one file both ways in a fresh process: prints seconds and peak RSS over the imports.
TRANSFER = r"""
import json, os, resource, sys, time
from concurrent.futures import ThreadPoolExecutor
client_name, mode, path, bucket, key = sys.argv[1:6]
CHUNK, CONCURRENCY = 4 << 20, 8
endpoint = os.environ["AWS_ENDPOINT_URL"]
if client_name == "boto3":
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config
    s3 = boto3.client("s3", config=Config(max_pool_connections=16, request_checksum_calculation="when_required",
                                           response_checksum_validation="when_required"))
    def put(name, data): s3.put_object(Bucket=bucket, Key=name, Body=data)
    def get(name): return s3.get_object(Bucket=bucket, Key=name)["Body"].read()
    transfer = TransferConfig(multipart_chunksize=8 << 20, max_concurrency=CONCURRENCY)
    def put_file(name): s3.upload_file(path, bucket, name, Config=transfer)
    def get_file(name, dest): s3.download_file(bucket, name, dest, Config=transfer)
else:
    import obstore
    from obstore.store import S3Store
    store = S3Store(bucket, endpoint=endpoint, region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
                    access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                    secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], client_options={"allow_http": True})
    def put(name, data): obstore.put(store, name, data)
    def get(name): return obstore.get(store, name).bytes()
    def put_file(name): obstore.put(store, name, open(path, "rb"), chunk_size=8 << 20, max_concurrency=CONCURRENCY)
    def get_file(name, dest):
        with open(dest, "wb") as f:
            for piece in obstore.get(store, name).stream(min_chunk_size=8 << 20):
                f.write(piece)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
size = os.path.getsize(path)
dest = path + ".back"
out = {}
if mode == "object":
    start = time.perf_counter(); put_file(key); out["put_s"] = time.perf_counter() - start
    start = time.perf_counter(); get_file(key, dest); out["get_s"] = time.perf_counter() - start
else:
    n = -(-size // CHUNK)
    def send(i):
        with open(path, "rb") as f:
            f.seek(i * CHUNK)
            put(f"{key}/{i}", f.read(CHUNK))
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    def receive(i):
        os.pwrite(fd, get(f"{key}/{i}"), i * CHUNK)
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        start = time.perf_counter(); list(pool.map(send, range(n))); out["put_s"] = time.perf_counter() - start
        start = time.perf_counter(); list(pool.map(receive, range(n))); out["get_s"] = time.perf_counter() - start
    os.close(fd)
assert os.path.getsize(dest) == size
os.remove(dest)
out["peak_over_imports_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
print("RESULT", json.dumps(out))
"""


def transfer(client: str, mode: str, path: str, bucket: str, key: str) -> dict:
    os.sync()
    proc = subprocess.run(
        [sys.executable, "-c", TRANSFER, client, mode, path, bucket, key], capture_output=True, text=True, timeout=1800
    )
    remove(bucket, key)  # the server holds what it is sent in memory: each transfer leaves it as it found it
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        return {"error": (proc.stderr or proc.stdout)[-800:]}
    return json.loads(line[7:])


def remove(bucket: str, prefix: str) -> None:
    import boto3

    s3 = boto3.client("s3")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=entry["Key"])


def clients(sizes: list[int], work: str, bucket: str) -> list[dict]:
    rows = []
    for size in sizes:
        path = os.path.join(work, f"payload-{size}.bin")
        with open(path, "wb") as f:
            for _ in range(size):
                f.write(os.urandom(1 << 20))
        for client in ("boto3", "obstore"):
            for mode in ("object", "chunks"):
                result = transfer(client, mode, path, bucket, f"clients/{client}-{mode}-{size}")
                rows.append({"size_mb": size, "client": client, "mode": mode, **result})
                print(f"{client} {mode} {size} MB: {result}", flush=True)
        os.remove(path)
    return rows


def ours(size: int, work: str, url: str, bucket: str) -> dict:
    """save, push, pull, restore of one bundle, each a fresh process; the floors of the same bytes beside them."""
    cache = os.path.join(work, "cache")
    nbytes = make_cache(cache, size, compressible=False)
    base = {"JUPYTER_COMPILE_CACHE_SECRET": "s3-benchmark", "JUPYTER_COMPILE_CACHE_PREWARM": "0"}
    name = f"big-{size}mb"
    row: dict = {"size_mb": size, "bytes": nbytes, **save_push_pull_restore(name, cache, work, url, base)}
    row["floors"] = floors(cache, nbytes, work, None)
    pack = next(
        os.path.join(d, f) for d, _, fs in os.walk(os.path.join(work, "store_a")) for f in fs if f.endswith(".pack")
    )  # the payload's bytes, as the push sends them
    row["raw_chunks"] = transfer("obstore", "chunks", pack, bucket, f"raw/{size}")  # the hub's own client
    row["raw_object"] = transfer("obstore", "object", pack, bucket, f"raw-object/{size}")
    print(f"ours {size} MB: " + json.dumps({k: row[k] for k in ("save", "push", "pull", "restore")})[:600], flush=True)
    return row


def listing(url: str) -> dict:
    from jupyter_compile_cache.storage.backends.object_store import ObjectStoreBackend

    backend = ObjectStoreBackend(url + "-listing", timeout=120)  # moto slows as a bucket fills: about 6 ms a write
    keys = [f"jcc:ns/:name:n{i:05d}" for i in range(10_000)]
    start = time.perf_counter()
    for i in range(0, len(keys), 500):
        backend.put({key: b"" for key in keys[i : i + 500]})
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    listed = backend.list("jcc:ns/:name:")
    list_s = time.perf_counter() - start
    assert sorted(listed) == keys
    return {"objects": len(keys), "put_s": put_s, "list_s": list_s}


def _s(result: dict, key: str = "seconds") -> float | None:
    return None if "error" in result else result.get(key)


def report(job: Job, client_rows: list[dict], big: dict, listed: dict) -> None:
    cells: list[list[object]] = []
    for r in client_rows:
        if "error" in r:
            cells.append([f"{r['size_mb']} MB", r["client"], r["mode"], "FAILED", "", ""])
            continue
        mb = r["size_mb"]
        cells.append([
            f"{mb} MB", r["client"], "one object" if r["mode"] == "object" else "4 MB objects, 8 at once",
            f"{r['put_s']:.2f} s ({mb / r['put_s']:.0f} MB/s)", f"{r['get_s']:.2f} s ({mb / r['get_s']:.0f} MB/s)",
            f"{r['peak_over_imports_mb']:.0f} MB",
        ])  # fmt: skip
    title = "## 1. The client (same bytes, same server, a fresh process each)"
    job.table(["bytes", "client", "as", "put", "get", "peak memory over imports"], cells, title=title)
    f = big["floors"]
    save, push, pull = _s(big["save"]), _s(big["push"]), _s(big["pull"])
    restore = _s(big["restore"], "restore_s")
    raw = big["raw_chunks"]
    save_floor = max(f["dd_fsync_s"], f["sha256_read_s"])

    def ratio(ours_s: float | None, floor: float | None) -> str:
        return "FAILED" if ours_s is None or not floor else f"{ours_s / floor:.2f}x"

    def memory(result: dict) -> str:
        if "error" in result:
            return ""
        over = result["peak_rss_mb"] - result["imports_rss_mb"]
        return f"{over:.0f} MB ({over / (CHUNK >> 20):.1f} chunks)"

    def secs(value: float | None) -> str:
        return "FAILED" if value is None else f"{value:.2f} s"

    job.table(
            ["step", "ours", "floor", "floor's time", "ratio (target <= 1.3x)", "peak memory over imports"],
            [
                [
                    "save",
                    secs(save),
                    "max(dd+fsync, sha256) of the same bytes",
                    f"{save_floor:.2f} s",
                    ratio(save, save_floor),
                    memory(big["save"]),
                ],
                [
                    "push",
                    secs(push),
                    "obstore put of the payload in 4 MB objects, 8 at once",
                    secs(raw.get("put_s")),
                    ratio(push, raw.get("put_s")),
                    memory(big["push"]),
                ],
                [
                    "pull",
                    secs(pull),
                    "obstore get of the same objects, 8 at once",
                    secs(raw.get("get_s")),
                    ratio(pull, raw.get("get_s")),
                    memory(big["pull"]),
                ],
                [
                    "restore",
                    secs(restore),
                    "max(dd+fsync, sha256)",
                    f"{save_floor:.2f} s",
                    ratio(restore, save_floor),
                    memory(big["restore"]),
                ],
            ],
            title=f"## 2. A {big['size_mb']} MB bundle: ours against the floors of the same run",
        )  # fmt: skip
    job.note(
        f"Floors alone: dd {f['dd_s']:.2f} s, dd+fsync {f['dd_fsync_s']:.2f} s, sha256 {f['sha256_read_s']:.2f} s, "
        f"copy {f['copy_s']:.2f} s; obstore's own multipart transfer of the payload as one object: put "
        f"{secs(big['raw_object'].get('put_s'))}, get {secs(big['raw_object'].get('get_s'))}."
    )
    job.note(
        f"## 3. Listing: {listed['objects']} objects by prefix in {listed['list_s']:.2f} s "
        f"(written in {listed['put_s']:.1f} s)"
    )


OPTIONS = [
    option("--sizes", default="10,1000", help="MB moved by each client, comma-separated"),
    option("--bundle", type=int, default=1000, help="MB of the bundle ours moves"),
]


def run(job: Job) -> None:
    args = job.args
    from tests.helpers import s3_server

    with tempfile.TemporaryDirectory(prefix="s3-hub-") as work:
        server = None
        if "AWS_ENDPOINT_URL" not in os.environ:
            server = s3_server.S3Server(work)
            # the server's own port: the tests' proxy (which can cut the network) would be one more hop here
            s3_server.use({**server.environ(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.port}"})
        try:
            import boto3

            bucket = f"bench-{time.time_ns()}"
            boto3.client("s3").create_bucket(Bucket=bucket)
            url = f"s3://{bucket}/hub"
            listed = listing(url)
            remove(bucket, "hub-listing/")
            client_rows = clients([int(s) for s in args.sizes.split(",")], work, bucket)
            big = ours(args.bundle, os.path.join(work, "ours"), url, bucket)
        finally:
            if server is not None:
                server.stop()
    job.meta |= {
        "server": "moto (loopback)" if server is not None else os.environ["AWS_ENDPOINT_URL"],
        "chunk_mb": CHUNK >> 20,
        "floor_client": "obstore",  # the hub's own client: its floors
        "peak_rss_mb_of_this_process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    with contextlib.suppress(Exception):
        import boto3
        import obstore

        job.meta["boto3"], job.meta["obstore"] = boto3.__version__, obstore.__version__
    job.keep(clients=client_rows, bundle=big, listing=listed)
    report(job, client_rows, big, listed)
