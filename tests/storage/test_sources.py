"""sources.py: `find` walks the local store, then the hub, newest version first, skipping with the reason what does not
fit this machine, is damaged or is not signed with the team's secret (real stores, a real redis-server)."""

from __future__ import annotations

import os

from helpers.store import make_bundle, restored_whole

from jupyter_compile_cache.storage import bundle, sources
from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.sources import HubSource, LocalSource, find
from jupyter_compile_cache.storage.store import LocalStore

OTHER_MACHINE = "f" * 12


def _misfit(manifest) -> str | None:
    return "another torch" if manifest.fingerprint_id == OTHER_MACHINE else None


def _install_into(cache: str):
    return lambda manifest, payload: bundle.extract(payload, manifest, {"inductor": cache})


def test_the_newest_version_that_fits_wins_and_the_others_say_why(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    fits = make_bundle(store, "net", fp="a" * 12)
    make_bundle(store, "net", fp=OTHER_MACHINE)  # newer, for another machine
    cache = str(tmp_path / "cache")
    found = find("net", [LocalSource(store)], store, _misfit, _install_into(cache))
    assert found.manifest is not None and found.manifest.version == fits.version and found.source.kind == "local"
    (skip,) = found.skipped
    assert (skip.kind, skip.detail, skip.worth_telling) == (sources.INCOMPATIBLE, "another torch", False)
    assert restored_whole(found.installed)


def test_a_damaged_local_version_is_quarantined_and_the_next_one_used(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    older = make_bundle(store, "net", fp="a" * 12)
    newer = make_bundle(store, "net", fp="b" * 12)
    with open(store.payload_path(newer), "r+b") as f:  # a flipped byte in the newest payload
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 0xFF]))
    found = find("net", [LocalSource(store)], store, _misfit, _install_into(str(tmp_path / "cache")))
    assert found.manifest.version == older.version
    (skip,) = found.skipped
    assert skip.kind == sources.DAMAGED and skip.worth_telling and skip.label == f"version {newer.version}"
    assert skip.moved_to is not None and os.path.exists(skip.moved_to)
    assert [m.version for m in store.versions("net")] == [older.version]


def test_the_hub_after_the_local_store_signatures_checked_and_a_hub_that_is_down_recorded(
    tmp_path, redis_server, free_port
):
    author = LocalStore(str(tmp_path / "author"))
    manifest = make_bundle(author, "net", fp="a" * 12)
    team = HubSource(Hub(HubConfig(url=redis_server.url, secret=b"team")))
    team.push(manifest, author)
    mine = LocalStore(str(tmp_path / "mine"))
    found = find("net", [LocalSource(mine), team], mine, _misfit, _install_into(str(tmp_path / "cache")))
    assert found.source is team and found.manifest.version == manifest.version
    assert os.path.exists(mine.payload_path(found.manifest))  # next time it is local
    stranger = HubSource(Hub(HubConfig(url=redis_server.url, secret=b"not the team's")))
    other = LocalStore(str(tmp_path / "other"))
    refused = find("net", [stranger], other, _misfit)
    assert refused.manifest is None and refused.wrong_signatures == 1
    assert refused.skipped[0].kind == sources.WRONG_SIGNATURE and "wrong signature" in refused.skipped[0].detail
    down = HubSource(Hub(HubConfig(url=f"redis://127.0.0.1:{free_port}/0", connect_timeout=0.5)))
    nothing = find("net", [LocalSource(other), down], other, _misfit)
    assert nothing.manifest is None and [source for source, _exc in nothing.down] == [down]
