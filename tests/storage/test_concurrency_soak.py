"""Concurrency soak, bounded: 8 processes save, restore, gc and rm the same few names in one local store, then the
same against one real redis-server with `hub gc` and `hub rm` running. Afterwards every surviving version verifies
and restores whole, every restore that reported success restored exactly one saved version whole, and no process
saw an uncaught error. The numbers are printed (pytest -s shows them)."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import tempfile
import time
import traceback

import pytest
from helpers.store import make_bundle, newest, restored_whole

from jupyter_compile_cache.core.machine_fit import MachineFit
from jupyter_compile_cache.storage import bundle
from jupyter_compile_cache.storage.hub import Hub, HubConfig, HubError
from jupyter_compile_cache.storage.sources import HubSource, LocalSource
from jupyter_compile_cache.storage.store import LocalStore

pytestmark = pytest.mark.timeout(300)

PROCESSES = 8
NAMES = ("alpha", "beta", "gamma")
NOW = {"torch": "soak"}  # one made-up machine: every version fits every worker
OPS_LOCAL = 60
OPS_HUB = 30


def _restore(name: str, sources: list, store: LocalStore, scratch: str) -> tuple[bool, bool]:
    """(restored, whole): a restore into an empty cache dir, as a new kernel's cell does."""
    cache = tempfile.mkdtemp(dir=scratch)
    try:
        found = newest(
            name,
            sources,
            store,
            MachineFit(NOW).mismatches,
            lambda m, p: bundle.extract(p, m, {"inductor": cache}),
        )
        if found.manifest is None:
            return False, True
        return True, restored_whole(found.installed)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _local_worker(root: str, seed: int, out: str) -> None:
    rng = random.Random(seed)
    store = LocalStore(root)
    stats = {"ops": 0, "saved": 0, "restored": 0, "missed": 0, "torn": 0, "gc": 0, "rm": 0, "errors": []}
    scratch = tempfile.mkdtemp()
    for _ in range(OPS_LOCAL):
        op, name = rng.choice(("save", "save", "restore", "restore", "gc", "rm")), rng.choice(NAMES)
        stats["ops"] += 1
        try:
            if op == "save":
                make_bundle(store, name, size=rng.randint(2_000, 60_000), now=NOW)
                stats["saved"] += 1
            elif op == "restore":
                restored, whole = _restore(name, [LocalSource(store)], store, scratch)
                stats["restored" if restored else "missed"] += 1
                stats["torn"] += not whole
            elif op == "gc":
                stats["gc"] += len(store.gc(rng.randint(0, 200_000)))
            else:
                stats["rm"] += len(store.remove(name))
        except Exception:
            stats["errors"].append(f"{op} {name}: {traceback.format_exc()}")
    shutil.rmtree(scratch, ignore_errors=True)
    with open(out, "w") as f:
        json.dump(stats, f)


def _hub_worker(url: str, root: str, seed: int, out: str) -> None:
    rng = random.Random(seed)
    hub = Hub(HubConfig(url=url, namespace="soak", chunk_size=16_384))
    mine = LocalStore(os.path.join(root, f"worker-{seed}"))  # each collaborator has a store of their own
    stats = {"ops": 0, "pushed": 0, "restored": 0, "missed": 0, "torn": 0, "hub_errors": 0, "gc": 0, "rm": 0}
    stats["errors"] = []
    scratch = tempfile.mkdtemp()
    for _ in range(OPS_HUB):
        op, name = rng.choice(("push", "push", "pull", "pull", "pull", "gc", "rm")), rng.choice(NAMES)
        stats["ops"] += 1
        try:
            if op == "push":
                manifest = make_bundle(mine, name, size=rng.randint(2_000, 80_000), now=NOW)
                HubSource(hub).push(manifest, mine)
                stats["pushed"] += 1
            elif op == "pull":
                fresh = LocalStore(tempfile.mkdtemp(dir=scratch))  # a colleague with nothing local
                restored, whole = _restore(name, [HubSource(hub)], fresh, scratch)
                stats["restored" if restored else "missed"] += 1
                stats["torn"] += not whole
            elif op == "gc":
                stats["gc"] += len(hub.gc(keep=1))
            else:
                stats["rm"] += len(hub.remove(name, rng.choice([None, "no-such-version"])))
        except HubError:  # a reported hub failure (a version removed under a pull): a miss, never a wrong answer
            stats["hub_errors"] += 1
        except Exception:
            stats["errors"].append(f"{op} {name}: {traceback.format_exc()}")
    shutil.rmtree(scratch, ignore_errors=True)
    with open(out, "w") as f:
        json.dump(stats, f)


def _run(target, args_of, tmp_path) -> tuple[dict, float]:
    ctx = multiprocessing.get_context("spawn")
    outs = [str(tmp_path / f"stats-{i}.json") for i in range(PROCESSES)]
    start = time.perf_counter()
    procs = [ctx.Process(target=target, args=(*args_of(i), outs[i])) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
        assert p.exitcode == 0, f"a worker died (exit {p.exitcode})"
    seconds = time.perf_counter() - start
    total: dict = {}
    for out in outs:
        with open(out) as f:
            for key, value in json.load(f).items():
                total[key] = total.get(key, 0 if not isinstance(value, list) else []) + value
    return total, seconds


def _summary(where: str, total: dict, seconds: float, survivors: int) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in total.items() if k != "errors")
    uncaught = len(total["errors"])
    return f"{where}: {PROCESSES} processes, {counts}, uncaught {uncaught}, {survivors} versions left, {seconds:.1f} s"


def test_eight_processes_on_one_local_store(tmp_path):
    root = str(tmp_path / "store")
    total, seconds = _run(_local_worker, lambda i: (root, i), tmp_path)
    store = LocalStore(root)
    survivors = store.bundles()
    print(_summary("local store", total, seconds, len(survivors)))
    assert total["errors"] == [], "\n".join(total["errors"])
    assert total["torn"] == 0 and total["ops"] == PROCESSES * OPS_LOCAL
    assert total["saved"] > 0 and total["restored"] > 0
    assert not os.path.exists(os.path.join(root, "quarantine")), "a sound version was judged damaged"
    for stored in survivors:  # every surviving version verifies and restores whole
        cache = tmp_path / f"verify-{stored.manifest.version}"
        with store.open_payload(stored.manifest) as payload:
            assert restored_whole(bundle.extract(payload, stored.manifest, {"inductor": str(cache)}))


def test_eight_collaborators_on_one_hub_with_gc_and_rm_running(tmp_path, redis_server):
    total, seconds = _run(_hub_worker, lambda i: (redis_server.url, str(tmp_path / "stores"), i), tmp_path)
    hub = Hub(HubConfig(url=redis_server.url, namespace="soak"))
    survivors = [m for name in hub.names() for m in hub.versions(name)]
    print(_summary("hub", total, seconds, len(survivors)))
    assert total["errors"] == [], "\n".join(total["errors"])
    assert total["torn"] == 0 and total["ops"] == PROCESSES * OPS_HUB
    assert total["pushed"] > 0 and total["restored"] > 0
    for manifest in survivors:  # every surviving version pulls, verifies and restores whole
        store = LocalStore(str(tmp_path / f"verify-{manifest.version}"))
        cache = tmp_path / f"verify-cache-{manifest.version}"
        with tempfile.TemporaryFile() as buffer:
            hub.pull(manifest, buffer)
            buffer.seek(0)
            local = store.adopt(manifest, buffer)
        with store.open_payload(local) as payload:
            assert restored_whole(bundle.extract(payload, local, {"inductor": str(cache)}))
