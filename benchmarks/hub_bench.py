"""Hub benchmark on a loopback redis-server: push/pull of big bundles, and two collaborators compiling.

1. Transfer: a bundle of N MB (incompressible files, the worst case) written to a local store, pushed, pulled
   into an empty local store (chunks verified, payload verified), then extracted; against restoring the same
   bundle from the local store. "Pull adds" = pull time (what a hub hit costs on top of a local hit).
2. Collaborators: A compiles cold and pushes (fresh process, own store and cache dir); B, a fresh process with an
   EMPTY store and EMPTY cache dir, restores A's cell from the hub. Each case a fresh process (_case.py).

Usage: python benchmarks/hub_bench.py [--sizes 110 235] [--suite cpu|gpu] [--redis-server PATH] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from restore_bench import environment, run_case  # noqa: E402

from jupyter_compile_cache import bundle  # noqa: E402
from jupyter_compile_cache.bundle import Manifest  # noqa: E402
from jupyter_compile_cache.hub import HubConfig, RedisHub  # noqa: E402
from jupyter_compile_cache.store import LocalStore  # noqa: E402

SUITES = {
    "cpu": dict(model="mlp", device="cpu", mode="default", train=False),
    "gpu": dict(model="transformer", device="cuda", mode="default", train=False),
}


def start_redis(binary: str, workdir: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
            "--protected-mode",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    import redis

    for _ in range(200):
        try:
            redis.Redis(port=port).ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0"


def transfer(url: str, size_mb: int, work: str) -> dict:
    src = os.path.join(work, f"src{size_mb}")
    os.makedirs(src)
    files = {}
    per_file = 4 << 20
    for i in range(max(1, (size_mb << 20) // per_file)):
        path = os.path.join(src, f"k{i}.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(per_file))
        files[f"inductor/ab/k{i}.bin"] = path
    fp = "0" * 12
    manifest = Manifest(
        name=f"big{size_mb}",
        version=bundle.new_version_id(fp),
        created=time.time(),
        writer="bench",
        fingerprint={},
        fingerprint_id=fp,
        payload_sha256="",
        payload_bytes=0,
        members=[],
    )
    store_a = LocalStore(os.path.join(work, f"a{size_mb}"))
    manifest = store_a.write(manifest, files)
    hub = RedisHub(HubConfig(url=url))
    t = time.perf_counter()
    hub.push(manifest, store_a.payload_path(manifest))
    push_s = time.perf_counter() - t
    store_b = LocalStore(os.path.join(work, f"b{size_mb}"))
    t = time.perf_counter()
    [listed] = hub.versions(manifest.name)
    with tempfile.TemporaryFile(dir=work) as buf:
        hub.pull(listed, buf)
        buf.seek(0)
        local = store_b.adopt(listed, buf)
    pull_s = time.perf_counter() - t
    cache_hub, cache_local = os.path.join(work, f"ch{size_mb}"), os.path.join(work, f"cl{size_mb}")
    os.makedirs(cache_hub)
    os.makedirs(cache_local)
    t = time.perf_counter()
    with store_b.open_payload(local) as f:
        bundle.extract(f, local, {"inductor": cache_hub})
    extract_s = time.perf_counter() - t
    t = time.perf_counter()
    with store_a.open_payload(manifest) as f:
        bundle.extract(f, manifest, {"inductor": cache_local})
    local_restore_s = time.perf_counter() - t
    shutil.rmtree(src)
    return {
        "size_mb": size_mb,
        "payload_bytes": manifest.payload_bytes,
        "chunks": len(listed.chunk_sha256),
        "push_s": push_s,
        "pull_s": pull_s,
        "hub_restore_s": pull_s + extract_s,
        "local_restore_s": local_restore_s,
    }


def collaborators(url: str, config: dict, work: str, think: float) -> list[dict]:
    rows = []
    for who, case in (("A", "ours_cold"), ("B", "ours")):
        store, cache = os.path.join(work, f"store_{who}{think}"), os.path.join(work, f"cache_{who}{think}")
        os.makedirs(store)
        os.makedirs(cache)
        os.environ["JUPYTER_COMPILE_CACHE_HUB"] = url
        os.environ["JUPYTER_COMPILE_CACHE_NAMESPACE"] = f"bench-think-{think:g}"  # each run starts cold
        row = run_case(config, case, cache, store, [], think)
        row.update(config, collaborator=who, think_s=think)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[110, 235])
    p.add_argument("--suite", choices=sorted(SUITES), default="cpu")
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument(
        "--think",
        type=float,
        nargs="*",
        default=[0.0, 10.0],
        help="idle seconds between the definition and compile cells (0 = Run All)",
    )
    p.add_argument("--out")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="jcc-hub-bench-")
    proc, url = start_redis(args.redis_server, work)
    try:
        env = environment()
        print(json.dumps(env))
        transfers = [transfer(url, size, work) for size in args.sizes]
        print("\n| bundle | payload | chunks | push | pull (hub -> local store) | restore from hub | from local |")
        print("|---|---|---|---|---|---|---|")
        for t in transfers:
            print(
                f"| {t['size_mb']} MB | {t['payload_bytes'] / 1e6:.0f} MB | {t['chunks']} | {t['push_s']:.2f} s | "
                f"{t['pull_s']:.2f} s | {t['hub_restore_s']:.2f} s | {t['local_restore_s']:.2f} s |"
            )
        collab = []
        for think in args.think:
            a, b = collaborators(url, SUITES[args.suite], work, think)
            collab += [a, b]
            print(
                f"\nCollaborators ({args.suite}, {a['model']}, think {think:.0f} s): A cold+push: first call "
                f"{a.get('first_call_s', 0):.3f} s, cell {a.get('cell_s', 0):.2f} s, pushed={a.get('pushed')}; "
                f"B from the hub: restored={b.get('restored')} ({b.get('restore_source')}), pull "
                f"{b.get('pull_s', 0):.2f} s, first call {b.get('first_call_s', 0):.3f} s, cell "
                f"{b.get('cell_s', 0):.2f} s; B/A first call "
                f"{b.get('first_call_s', 0) / max(a.get('first_call_s', 1e-9), 1e-9):.3f}x, cell "
                f"{b.get('cell_s', 0) / max(a.get('cell_s', 1e-9), 1e-9):.3f}x"
            )
            print("B counters:", json.dumps(b.get("counters")))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"environment": env, "transfers": transfers, "collaborators": collab}, f, indent=1)
    finally:
        proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
