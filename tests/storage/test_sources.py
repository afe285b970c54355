"""sources.py: a `Walk` goes over the local store, then the hub, newest version first, skipping with the reason what
does not fit this machine, is damaged or is not signed with the team's secret, and yields what it fetched whole; the
install loop over it is core's (core/bundle_search.py), run here too (real stores, a real redis-server)."""

from __future__ import annotations

import os

from helpers.store import make_bundle, newest, restored_whole

from jupyter_compile_cache.storage import bundle, sources
from jupyter_compile_cache.storage.bundle import FieldMismatch
from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.sources import HubSource, LocalSource
from jupyter_compile_cache.storage.store import LocalStore

OTHER_MACHINE = "f" * 12


TORCH_DIFFERS = (FieldMismatch("torch", "2.9", "2.13"),)


def _misfit(manifest) -> tuple[FieldMismatch, ...]:
    return TORCH_DIFFERS if manifest.fingerprint_id == OTHER_MACHINE else ()


def _install_into(cache: str):
    return lambda manifest, payload: bundle.extract(payload, manifest, {"inductor": cache})


def test_the_newest_version_that_fits_wins_and_the_others_say_why(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    fits = make_bundle(store, "net", fp="a" * 12)
    make_bundle(store, "net", fp=OTHER_MACHINE)  # newer, for another machine
    cache = str(tmp_path / "cache")
    found = newest("net", [LocalSource(store)], store, _misfit, _install_into(cache))
    assert found.manifest is not None and found.manifest.version == fits.version and found.source.kind == "local"
    (skip,) = found.skipped
    assert (skip.kind, skip.mismatches, skip.worth_telling) == (sources.SkipKind.INCOMPATIBLE, TORCH_DIFFERS, False)
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
    found = newest("net", [LocalSource(store)], store, _misfit, _install_into(str(tmp_path / "cache")))
    assert found.manifest.version == older.version
    (skip,) = found.skipped
    assert (
        skip.kind == sources.SkipKind.DAMAGED
        and skip.worth_telling
        and skip.version == newer.version
        and skip.where.kind == "local"
    )
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
    found = newest("net", [LocalSource(mine), team], mine, _misfit, _install_into(str(tmp_path / "cache")))
    assert found.source is team and found.manifest.version == manifest.version
    assert os.path.exists(mine.payload_path(found.manifest))  # next time it is local
    stranger = HubSource(Hub(HubConfig(url=redis_server.url, secret=b"not the team's")))
    other = LocalStore(str(tmp_path / "other"))
    refused = newest("net", [stranger], other, _misfit)
    assert refused.manifest is None and refused.wrong_signatures == 1
    assert (
        refused.skipped[0].kind == sources.SkipKind.WRONG_SIGNATURE and "wrong signature" in refused.skipped[0].detail
    )
    down = HubSource(Hub(HubConfig(url=f"redis://127.0.0.1:{free_port}/0", connect_timeout=0.5)))
    nothing = newest("net", [LocalSource(other), down], other, _misfit)
    assert nothing.manifest is None and [source for source, _exc in nothing.down] == [down]


def _proxied_team(tmp_path, redis_server, **bundle):
    """A bundle on a real redis-server, and a reader who reaches it through a TCP proxy the test controls."""
    from helpers.tcp_proxy import HoldingProxy

    author = LocalStore(str(tmp_path / "author"))
    manifest = make_bundle(author, "net", fp="a" * 12, **bundle)
    HubSource(Hub(HubConfig(url=redis_server.url, chunk_size=256 << 10))).push(manifest, author)
    proxy = HoldingProxy(redis_server.port)
    reader = HubSource(Hub(HubConfig(url=proxy.url, chunk_size=256 << 10, timeout=5.0)))
    return manifest, proxy, reader


def test_a_connection_dropped_under_a_pull_is_retried_on_a_fresh_one_and_said(tmp_path, redis_server):
    manifest, proxy, reader = _proxied_team(tmp_path, redis_server, size=1 << 20)
    drops = []

    def drop(request: bytes) -> bool:  # the first two tries of a chunk's GET (redis-py's pipeline retries none)
        if b":chunk:" in request and b"GET" in request and len(drops) < 2:
            drops.append(request)
            return True
        return False

    proxy.drop = drop
    mine = LocalStore(str(tmp_path / "mine"))
    found = newest("net", [LocalSource(mine), reader], mine, _misfit, _install_into(str(tmp_path / "cache")))
    assert len(drops) == 2
    assert found.source is reader and found.manifest.version == manifest.version
    assert restored_whole(found.installed)
    assert len(found.retries) == 2 and "closed" in found.retries[0].lower()


def test_a_connection_that_keeps_dropping_gives_up_after_the_retries(tmp_path, redis_server):
    _manifest, proxy, reader = _proxied_team(tmp_path, redis_server)
    proxy.drop = lambda request: b":chunk:" in request
    mine = LocalStore(str(tmp_path / "mine"))
    found = newest("net", [LocalSource(mine), reader], mine, _misfit)
    assert found.manifest is None and len(found.retries) == sources.RETRIES
    [skip] = found.skipped
    assert skip.kind == sources.SkipKind.TRANSFER_FAILED and skip.tries == sources.RETRIES + 1


def test_a_damaged_hub_version_does_not_hide_an_older_whole_one(tmp_path, redis_server):
    # A chunk that failed its sha256 was taken for a hub that failed: the walk stopped, and the older good version
    # was never tried.
    author = LocalStore(str(tmp_path / "author"))
    team = HubSource(Hub(HubConfig(url=redis_server.url, chunk_size=256 << 10)))
    older = make_bundle(author, "net", fp="a" * 12, size=600_000)
    team.push(older, author)
    newer = make_bundle(author, "net", fp="a" * 12, size=600_000)
    team.push(newer, author)
    redis_server.client().set(f"jcc:{{default/net}}:chunk:{'a' * 12}:{newer.version}:1", b"tampered")
    mine = LocalStore(str(tmp_path / "mine"))
    found = newest("net", [LocalSource(mine), team], mine, _misfit, _install_into(str(tmp_path / "cache")))
    assert found.manifest is not None and found.manifest.version == older.version
    assert restored_whole(found.installed)
    [skip] = found.skipped
    assert skip.kind == sources.SkipKind.UNUSABLE and skip.version == newer.version and "sha256" in skip.detail
