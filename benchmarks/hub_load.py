"""Many kernels on one hub at once: each scenario of tests/helpers/hub_load.py (restore one bundle into one machine's
store, the same with each kernel's notebook staging beside its cell, save bundles of their own names, save the same
name) with N processes started together, against one process alone, on each backend: a loopback redis-server, the
same over TLS, S3 (moto's server), Azure Blob (Azurite) and a shared folder. Prints a table (restores lost, retries
on a fresh connection, duplicate versions pushed by cells that compiled instead of restoring; each process's wait,
median and slowest, against one alone; the hub's throughput) and writes the figures as JSON.

  python -m benchmarks hub_load --processes 1 8 32 --backends redis rediss s3 az file --size-mb 16 \
      --out benchmarks/results/hub_load_cpu.json

With `--kernels N`, real Jupyter kernels instead: an author's kernel compiles and pushes the test model's cell, then
N kernels of one machine (one local store, a cache dir each) run the same cell at once. Single flight holds when
every kernel restores, none compiles, and the bundle was pulled once (Redis counts the chunk reads).

  python -m benchmarks hub_load --kernels 6 --backends redis rediss
"""

from __future__ import annotations

import os
import pathlib
import tempfile
import time

from benchmarks.harness import Job, option
from tests.helpers import hub_load, hubs  # the same workers and servers as the hub tests
from tests.helpers.hubs import hub_at, local_bundle

HERE = os.path.dirname(os.path.abspath(__file__))


OPTIONS = [
    option("--processes", type=int, nargs="+", default=[1, 8, 32]),
    option("--backends", nargs="+", default=["redis"], choices=["redis", "rediss", "s3", "az", "file"]),
    option("--scenarios", nargs="+", default=list(hub_load.SCENARIOS), choices=hub_load.SCENARIOS),
    option("--size-mb", type=int, default=16),
    option("--kernels", type=int, help="real kernels restoring one bundle at once, instead"),
]


def run(job: Job) -> None:
    args = job.args
    if args.kernels:
        job.keep(rows=[kernels_at_once(backend, args.kernels) for backend in args.backends])
        job.table(*_kernel_table(job.data["rows"]), align="lrrrrrr")
        return
    size = args.size_mb << 20
    counts = sorted(set([1, *args.processes]))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for backend in args.backends:
            hub_dir = pathlib.Path(work) / f"hub-{backend}"
            hub_dir.mkdir()
            server = hubs.start(backend, hub_dir)
            try:
                for scenario in args.scenarios:
                    alone = None
                    for n in counts:
                        namespace = f"{scenario}-{n}-{time.time_ns()}"
                        chunks = 0
                        if scenario.startswith("restore"):  # the bundle everyone restores, pushed first
                            store, manifest = local_bundle(pathlib.Path(work), size=size)
                            hub = hub_at(server.url, namespace=namespace, chunk_size=4 << 20)
                            chunks = len(hub.push(manifest, store.payload_path(manifest)).chunk_sha256 or [])
                        before = _gets(server)
                        load = hub_load.run(scenario, server.url, namespace, n, size, os.path.join(work, namespace))
                        summary = load.summary()
                        summary["backend"] = backend
                        alone = alone or summary["median_wait_seconds"]
                        summary["median_wait_vs_alone"] = summary["median_wait_seconds"] / alone
                        # each process reads the manifest once; the chunks' reads say how many times it was pulled
                        after = _gets(server)
                        plain = scenario == "restore" and before is not None and after is not None and chunks
                        summary["pulls"] = (after - before - n) / chunks if plain else None
                        rows.append(summary)
                        job.keep(size_mb=args.size_mb, rows=rows)
                        job.say(_line(summary))
            finally:
                server.stop()
    job.table(*_table(rows), title=f"bundle {args.size_mb} MB; loopback servers", align="llrrrrrrrrr")


def kernels_at_once(backend: str, n: int) -> dict:
    """An author's kernel pushes the cell's bundle; N kernels of one machine then run the cell at once."""
    import statistics
    import threading

    from tests.helpers.cells import COMPILE, DEFINE
    from tests.helpers.kernels import Kernel, misses

    with tempfile.TemporaryDirectory(prefix="hub-kernels-") as work:
        root = pathlib.Path(work)
        (root / "hub").mkdir()
        server = hubs.start(backend, root / "hub")
        kernels: list = []
        try:
            base = {"JUPYTER_COMPILE_CACHE_HUB": server.url, "JUPYTER_COMPILE_CACHE_SECRET": "bench"}
            author = Kernel(
                {**base, "TORCHINDUCTOR_CACHE_DIR": str(root / "a"), "JUPYTER_COMPILE_CACHE_DIR": str(root / "sa")}
            )
            kernels.append(author)
            author.run("%load_ext jupyter_compile_cache").check()
            author.run(DEFINE).check()
            assert "the hub" in author.run(COMPILE.format(name="net", options="")).check().stdout
            machine = str(root / "machine")  # one local store: the kernels of one machine
            for i in range(n):
                k = Kernel(
                    {**base, "TORCHINDUCTOR_CACHE_DIR": str(root / f"c{i}"), "JUPYTER_COMPILE_CACHE_DIR": machine}
                )
                k.run("%load_ext jupyter_compile_cache").check()
                k.run(DEFINE).check()
                kernels.append(k)
            before = _gets(server)
            results: dict[int, tuple[float, str, dict]] = {}

            def cell(i: int) -> None:
                start = time.perf_counter()
                out = kernels[i + 1].run(COMPILE.format(name="net", options="")).check()
                results[i] = (time.perf_counter() - start, out.stdout, misses(kernels[i + 1].counters()))

            threads = [threading.Thread(target=cell, args=(i,)) for i in range(n)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            after = _gets(server)
            seconds = [results[i][0] for i in range(n)]
            restored = sum("compile_cache: restored 'net'" in results[i][1] for i in range(n))
            compiled = sum(results[i][2]["fxgraph_cache_miss"] > 0 for i in range(n))
            row = {
                "backend": backend,
                "kernels": n,
                "restored": restored,
                "compiled": compiled,
                "chunk_reads": None if before is None or after is None else after - before,
                "median_cell_seconds": statistics.median(seconds),
                "slowest_cell_seconds": max(seconds),
                "lines": [results[i][1].strip().splitlines()[0] for i in range(n)],
            }
            print(row, flush=True)
            return row
        finally:
            for k in kernels:
                k.shutdown()
            server.stop()


def _kernel_table(rows: list[dict]) -> tuple[list[str], list[list[object]]]:
    headers = ["backend", "kernels", "restored", "compiled", "GETs at the hub", "median cell (s)", "slowest cell (s)"]
    cells = [
        [
            r["backend"],
            r["kernels"],
            r["restored"],
            r["compiled"],
            "-" if r["chunk_reads"] is None else r["chunk_reads"],
            f"{r['median_cell_seconds']:.2f}",
            f"{r['slowest_cell_seconds']:.2f}",
        ]
        for r in rows
    ]
    return headers, cells


def _gets(server) -> int | None:
    """GETs the Redis server has answered (None for the other backends)."""
    if server.kind not in ("redis", "rediss"):
        return None
    return server.client().info("commandstats").get("cmdstat_get", {}).get("calls", 0)


def _line(s: dict) -> str:
    return (
        f"{s['backend']:>6} {s['scenario']:>14} x{s['processes']:<3} lost {s['restores_lost']} "
        f"retries {s['retries']} duplicates {s['duplicates_pushed']}, wait median {s['median_wait_seconds']:.2f} s "
        f"(x{s['median_wait_vs_alone']:.1f} alone), slowest {s['max_wait_seconds']:.2f} s, "
        f"hub {s['hub_throughput_bytes_per_second'] / 1e6:.0f} MB/s"
    )


def _table(rows: list[dict]) -> tuple[list[str], list[list[object]]]:
    headers = [
        "backend", "scenario", "processes", "restores lost", "retries", "duplicates pushed", "median wait (s)",
        "vs one alone", "slowest (s)", "hub throughput (MB/s)", "pulls",
    ]  # fmt: skip
    cells = [
        [
            s["backend"],
            s["scenario"],
            s["processes"],
            s["restores_lost"],
            s["retries"],
            s["duplicates_pushed"],
            f"{s['median_wait_seconds']:.2f}",
            f"{s['median_wait_vs_alone']:.1f}x",
            f"{s['max_wait_seconds']:.2f}",
            f"{s['hub_throughput_bytes_per_second'] / 1e6:.0f}",
            "-" if s["pulls"] is None else f"{s['pulls']:g}",
        ]
        for s in rows
    ]
    return headers, cells
