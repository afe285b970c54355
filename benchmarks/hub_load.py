"""Many kernels on one hub at once: each scenario of tests/helpers/hub_load.py (restore one bundle into one machine's
store, save bundles of their own names, save the same name) with N processes started together, against one process
alone, on a loopback redis-server. Prints a table (each process's wait, median and slowest, against one alone; the
hub's throughput) and writes the figures as JSON.

  python benchmarks/hub_load.py --processes 1 8 16 32 --size-mb 16 --out benchmarks/results/hub_load_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from bench import redis_server  # noqa: E402  (a loopback redis-server, as the other benchmarks use)
from helpers import hub_load  # noqa: E402  (the same workers as tests/storage/test_hub_load.py)
from helpers.hubs import hub_at, local_bundle  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--size-mb", type=int, default=16)
    parser.add_argument("--out", help="JSON file for the figures")
    args = parser.parse_args()
    size = args.size_mb << 20
    counts = sorted(set([1, *args.processes]))
    rows = []
    with tempfile.TemporaryDirectory() as work, redis_server(shutil.which("redis-server"), work) as url:
        for scenario in hub_load.SCENARIOS:
            alone = None
            for n in counts:
                namespace = f"{scenario}-{n}-{time.time_ns()}"
                chunks = 0
                if scenario == "restore":  # the bundle everyone restores, pushed first
                    store, manifest = local_bundle(pathlib.Path(work), size=size)
                    hub = hub_at(url, namespace=namespace, chunk_size=4 << 20)
                    chunks = len(hub.push(manifest, store.payload_path(manifest)).chunk_sha256 or [])
                before = _gets(url)
                run = hub_load.run(scenario, url, namespace, n, size, os.path.join(work, namespace))
                summary = run.summary()
                alone = alone or summary["median_wait_seconds"]
                summary["median_wait_vs_alone"] = summary["median_wait_seconds"] / alone
                # each process reads the manifest once; the chunks' reads say how many times the bundle was pulled
                summary["pulls"] = (_gets(url) - before - n) / chunks if chunks else None
                rows.append(summary)
                print(_line(summary), flush=True)
    machine = f"{platform.node()} ({os.cpu_count()} CPUs), Python {platform.python_version()}"
    print(f"\n{machine}; bundle {args.size_mb} MB; loopback redis-server\n")
    print(_table(rows))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine, "size_mb": args.size_mb, "rows": rows}, f, indent=1)


def _gets(url: str) -> int:
    import redis

    return redis.Redis.from_url(url).info("commandstats").get("cmdstat_get", {}).get("calls", 0)


def _line(s: dict) -> str:
    return (
        f"{s['scenario']:>10} x{s['processes']:<3} wait median {s['median_wait_seconds']:.2f} s "
        f"(x{s['median_wait_vs_alone']:.1f} alone), slowest {s['max_wait_seconds']:.2f} s, "
        f"hub {s['hub_throughput_bytes_per_second'] / 1e6:.0f} MB/s"
    )


def _table(rows: list[dict]) -> str:
    head = "| scenario | processes | median wait (s) | vs one alone | slowest (s) | hub throughput (MB/s) | pulls |"
    lines = [head, "|---|--:|--:|--:|--:|--:|--:|"]
    for s in rows:
        pulls = "-" if s["pulls"] is None else f"{s['pulls']:g}"
        lines.append(
            f"| {s['scenario']} | {s['processes']} | {s['median_wait_seconds']:.2f} | "
            f"{s['median_wait_vs_alone']:.1f}x | {s['max_wait_seconds']:.2f} | "
            f"{s['hub_throughput_bytes_per_second'] / 1e6:.0f} | {pulls} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
