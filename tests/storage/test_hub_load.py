"""Eight processes on one real redis-server at once (helpers/hub_load.py), each doing a cell's part with the hub:
nothing damaged, every restore whole, one pull per machine, no lease left held, every manifest's chunks present.
The figures (wait against one process alone, the hub's throughput) are benchmarks/hub_load.py's."""

from __future__ import annotations

import hashlib

import pytest
from helpers import hub_load
from helpers.hubs import hub_at, local_bundle, pull_bytes

N = 8
SIZE = 2 << 20
pytestmark = pytest.mark.slow


def _consistent(hub) -> list:
    """Every committed version complete, and no lease held: the hub's keys after the load."""
    versions = [m for name in hub.names() for m in hub.versions(name)]
    assert versions and all(hub.missing_chunks(m) == 0 for m in versions)
    assert hub.backend.list("jcc:default/") == [k for k in hub.backend.list("jcc:default/") if ":lease:" not in k]
    return versions


def test_eight_kernels_restoring_one_bundle_pull_it_once_and_all_install_it_whole(tmp_path, redis_server):
    store, manifest = local_bundle(tmp_path, size=SIZE)
    hub = hub_at(redis_server.url, chunk_size=256 << 10)
    chunk_count = len(hub.push(manifest, store.payload_path(manifest)).chunk_sha256)
    before = redis_server.client().info("commandstats").get("cmdstat_get", {}).get("calls", 0)

    run = hub_load.run("restore", redis_server.url, "default", N, SIZE, tmp_path / "load")

    assert {r["version"] for r in run.results} == {manifest.version}
    assert all(r["files"] == len(manifest.members) and not r["problems"] for r in run.results), run.results
    # One process pulled the chunks; the others waited for it and read the machine's store.
    gets = redis_server.client().info("commandstats")["cmdstat_get"]["calls"] - before
    assert chunk_count >= 8 and gets == N + chunk_count, gets  # the manifest once a process, the chunks once
    _consistent(hub)


@pytest.mark.parametrize("scenario", ["save-names", "save-same"])
def test_eight_kernels_saving_at_once_leave_every_version_whole_and_no_lease(tmp_path, redis_server, scenario):
    run = hub_load.run(scenario, redis_server.url, "default", N, SIZE, tmp_path / "load")

    hub = hub_at(redis_server.url)
    versions = {m.version: m for m in _consistent(hub)}
    assert sorted(versions) == sorted(r["version"] for r in run.results)  # every push landed, none lost
    for r in run.results:  # each version is byte for byte what its writer pushed
        assert hashlib.sha256(pull_bytes(hub, versions[r["version"]])).hexdigest() == r["payload_sha256"]
    if scenario == "save-same":
        assert sum(r["lease"] for r in run.results) >= 1  # one held it; the others pushed without waiting
    else:
        assert all(r["lease"] for r in run.results)


@pytest.mark.parametrize("kind", ["redis", "rediss"])
def test_eight_kernels_each_restoring_in_the_cell_and_the_staging_thread_lose_none(tmp_path, request, kind):
    """Each process's cell and its notebook staging thread first use one backend together (the race that lost one
    restore in four): every cell restores, none pushes a duplicate."""
    server = request.getfixturevalue("redis_server" if kind == "redis" else "tls_redis")
    store, manifest = local_bundle(tmp_path, size=SIZE)
    hub_at(server.url, chunk_size=256 << 10).push(manifest, store.payload_path(manifest))

    run = hub_load.run("restore-staged", server.url, "default", N, SIZE, tmp_path / "load")

    summary = run.summary()
    assert (summary["restores_lost"], summary["duplicates_pushed"]) == (0, 0), run.results
    assert {r["version"] for r in run.results} == {manifest.version}
    assert not any(r["staging_lost"] for r in run.results)
