"""N processes on one hub at once, each doing what a kernel's cell does with the hub (no torch: the hub's part of a
cell), started together; then the hub's keys are checked. Used by tests/storage/test_hub_load.py (N = 8) and
benchmarks/hub_load.py (more, with figures).

Scenarios:
  restore      every process restores the same bundle into ONE local store (one machine's kernels): the walk a
               cell does (local store, then the hub), then the bundle installed (every member's hash checked)
  restore-staged
               the same, while a second thread of each process (a kernel's notebook staging) fetches the same
               bundle through the same backend, both starting on a connection not made yet; a process whose cell
               did not restore compiles and saves, as a kernel would: it pushes a version of its own (a duplicate)
  save-names   every process saves a bundle of its own name: lease, push, release (a cell that compiled)
  save-same    every process saves a bundle of the same name: the lease goes to one, all push their version
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

SCENARIOS = ("restore", "restore-staged", "save-names", "save-same")

WORKER = r"""
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
from helpers.hubs import local_bundle
from helpers.store import newest
from jupyter_compile_cache.storage import bundle
from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.sources import Found, HubSource, LocalSource
from jupyter_compile_cache.storage.store import LocalStore
import pathlib

scenario, url, namespace, index, work, size, go = sys.argv[2:9]
index, size, work = int(index), int(size), pathlib.Path(work)
hub = Hub(HubConfig(url=url, namespace=namespace, chunk_size=1 << 20))
result = {"index": index, "pulled": False}
if not scenario.startswith("restore"):
    name = "net" if scenario == "save-same" else f"net{index}"
    (work / f"w{index}").mkdir()
    store, manifest = local_bundle(work / f"w{index}", size=size, name=name, fp="f" * 12)
    with open(store.payload_path(manifest), "rb") as f:
        result["payload_sha256"] = __import__("hashlib").sha256(f.read()).hexdigest()
print("READY", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
start = time.perf_counter()
if scenario.startswith("restore"):
    store = LocalStore(str(work / "machine"))
    cache = work / f"cache{index}"
    installed = lambda m, payload: bundle.extract(payload, m, {"inductor": str(cache)})
    staged = {}

    def restore(install=None):
        try:
            return newest("net", [LocalSource(store), HubSource(hub)], store, lambda m: None, install)
        except Exception as exc:  # escaped the walk: the kernel's cell would have failed (counted as lost)
            result.setdefault("errors", []).append(repr(exc))
            return None

    if scenario == "restore-staged":
        stage = threading.Thread(target=lambda: staged.update(found=restore()))
        stage.start()
    found = restore(installed) or Found()  # nothing found, as a walk that failed
    result["version"] = found.manifest.version if found.manifest else None
    result["source"] = found.source.kind if found.source else None
    result["files"] = len(found.installed or [])
    result["problems"] = [f"version {skip.version}: {skip.kind.value}: {skip.detail}" for skip in found.skipped]
    result["problems"] += [str(exc) for _source, exc in found.down]
    result["retries"] = len(found.retries)
    if scenario == "restore-staged":
        stage.join()
        result["staging_lost"] = staged["found"] is None or staged["found"].manifest is None
        if found.manifest is None:  # the cell compiles, then saves and pushes what it compiled
            (work / f"w{index}").mkdir()
            mine, manifest = local_bundle(work / f"w{index}", size=size, name="net", fp="f" * 12)
            result["pushed"] = hub.push(manifest, mine.payload_path(manifest)).version
else:
    lease = hub.lease(name, manifest.fingerprint_id, f"writer{index}")
    result["lease"] = lease.acquire() is None
    pushed = hub.push(manifest, store.payload_path(manifest))
    if result["lease"]:
        lease.release()
    result["version"], result["name"] = pushed.version, name
result["seconds"] = time.perf_counter() - start
print(json.dumps(result), flush=True)
"""


@dataclass
class LoadRun:
    scenario: str
    processes: int
    size: int
    wall_seconds: float  # from the start signal to the last process's end
    seconds: list[float] = field(default_factory=list)  # each process's own wait
    results: list[dict] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        """Bytes the hub moved per second of the whole run (a restore moves the bundle once per machine)."""
        moved = self.size if self.scenario == "restore" else self.size * self.processes
        return moved / self.wall_seconds if self.wall_seconds else 0.0

    def summary(self) -> dict:
        return {
            "scenario": self.scenario,
            "processes": self.processes,
            "bundle_bytes": self.size,
            "wall_seconds": self.wall_seconds,
            "median_wait_seconds": statistics.median(self.seconds),
            "max_wait_seconds": max(self.seconds),
            "hub_throughput_bytes_per_second": self.throughput,
            # a restore scenario's cells that found nothing (each would compile cold), retries on a fresh connection,
            # and the versions the losers pushed (duplicates of the one that was there)
            "restores_lost": sum(r.get("version") is None for r in self.results) if "restore" in self.scenario else 0,
            "retries": sum(r.get("retries", 0) for r in self.results),
            "duplicates_pushed": sum("pushed" in r for r in self.results),
        }


def run(scenario: str, url: str, namespace: str, processes: int, size: int, work) -> LoadRun:
    """Start PROCESSES workers of SCENARIO, let them go at once, and collect what each did."""
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(work, exist_ok=True)
    go = os.path.join(str(work), "go")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, tests, scenario, url, namespace, str(i), str(work), str(size), go],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(processes)
    ]
    for proc in procs:  # every worker imported and made its bundle: now they go together
        line = proc.stdout.readline() if proc.stdout else ""
        if line.strip() != "READY":
            raise RuntimeError(f"a worker did not start: {line}{proc.communicate()[1][-2000:]}")
    start = time.perf_counter()
    open(go, "w").close()
    outs = [p.communicate(timeout=600) for p in procs]
    wall = time.perf_counter() - start
    results = []
    for proc, (out, err) in zip(procs, outs):
        if proc.returncode != 0:
            raise RuntimeError(f"a worker failed ({proc.returncode}): {err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return LoadRun(scenario, processes, size, wall, [r["seconds"] for r in results], results)
