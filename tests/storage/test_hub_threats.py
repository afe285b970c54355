"""The hub's threat model (docs/how_it_works.md, "A hostile hub"), a test per point, on a real redis-server: what a
hub, or anyone who can write to it, may serve, and what a kernel then does. Paths in a bundle are refused before
anything is written (tests/storage/test_bundle.py, the unsafe member names); chunks that decompress past their size
are refused before they are expanded (test_hub.py)."""

from __future__ import annotations

import json
import os
import shutil

from helpers.hubs import hub_at, local_bundle
from helpers.store import newest

from jupyter_compile_cache.storage import chunks
from jupyter_compile_cache.storage.hub import MAX_MANIFEST_BYTES
from jupyter_compile_cache.storage.sources import HubSource, SkipKind
from jupyter_compile_cache.storage.store import LocalStore

SECRET = b"team-a-secret"


def _manifest_key(hub, m):
    return hub._manifest_key(m.name, m.fingerprint_id, m.version)


def _chunk_key(hub, m, i):
    return hub._chunk_key(m.name, m.fingerprint_id, m.version, i)


def _find(hub, tmp_path, name="net"):
    mine = LocalStore(str(tmp_path / f"mine-{name}"))
    return mine, newest(name, [HubSource(hub)], mine, lambda m: None)


def test_a_valid_looking_but_different_bundle_is_refused_with_a_team_secret(tmp_path, redis_server):
    """The hub serves another bundle, whole and correctly signed, as this version (every hash right): the signature
    covers the version and the chunk list, so the swap is refused and nothing is stored."""
    hub = hub_at(redis_server.url, secret=SECRET)
    ours_store, ours = local_bundle(tmp_path, name="net")
    theirs_store, theirs = local_bundle(tmp_path, name="net")
    pushed_ours = hub.push(ours, ours_store.payload_path(ours))
    pushed_theirs = hub.push(theirs, theirs_store.payload_path(theirs))
    forged = pushed_theirs.to_json() | {"version": pushed_ours.version}  # their bundle, whole, as our version
    hub.backend.put({_manifest_key(hub, pushed_ours): json.dumps(forged).encode()})
    for i in range(len(pushed_theirs.chunk_sha256)):
        [data] = hub.backend.get([_chunk_key(hub, pushed_theirs, i)])
        hub.backend.put({_chunk_key(hub, pushed_ours, i): data})
    hub.remove("net", pushed_theirs.version)

    mine, found = _find(hub, tmp_path)
    assert found.manifest is None and found.wrong_signatures == 1
    assert found.skipped[0].kind == SkipKind.WRONG_SIGNATURE and "wrong signature" in found.skipped[0].detail
    assert mine.versions("net") == []


def test_a_bundle_signed_with_another_teams_secret_is_refused(tmp_path, redis_server):
    store, manifest = local_bundle(tmp_path)
    hub_at(redis_server.url, secret=b"team-b-secret").push(manifest, store.payload_path(manifest))
    mine, found = _find(hub_at(redis_server.url, secret=SECRET), tmp_path)
    assert found.manifest is None and found.wrong_signatures == 1 and mine.versions("net") == []


def test_sizes_that_would_fill_the_disk_are_refused_before_a_byte_is_written(tmp_path, redis_server):
    """A manifest claiming more bytes than the disk has free, with a chunk list that fits the claim: refused at once,
    neither pulled nor left as a temporary file."""
    hub = hub_at(redis_server.url)
    store, manifest = local_bundle(tmp_path, size=1 << 20)
    pushed = hub.push(manifest, store.payload_path(manifest))
    claim = shutil.disk_usage(tmp_path).free + (1 << 30)
    count = -(-claim // chunks.MAX_CHUNK)
    forged = pushed.to_json() | {
        "payload_bytes": claim,
        "chunk_size": chunks.MAX_CHUNK,
        "chunk_sha256": ["0" * 64] * count,
        "chunk_compressed": [False] * count,
    }
    hub.backend.put({_manifest_key(hub, pushed): json.dumps(forged).encode()})
    mine, found = _find(hub, tmp_path)
    told = found.skipped[0].detail
    assert found.manifest is None and f"free where the local store is ({mine.root}): nothing was written" in told
    assert mine.versions("net") == []
    assert [f for _, _, files in os.walk(mine.root) for f in files if f.startswith(".tmp-")] == []


def test_a_manifest_big_enough_to_exhaust_memory_is_skipped_unread(tmp_path, redis_server):
    """Chunk counts that would exhaust memory need a manifest that lists them: one past MAX_MANIFEST_BYTES (a 1 GB
    bundle's is about 100 KB) is skipped before it is parsed, and the listing carries on."""
    hub = hub_at(redis_server.url)
    store, manifest = local_bundle(tmp_path, size=1 << 20)
    pushed = hub.push(manifest, store.payload_path(manifest))
    other_store, other = local_bundle(tmp_path, size=1 << 20)
    hub.push(other, other_store.payload_path(other))
    bloated = pushed.to_json() | {"chunk_sha256": ["0" * 64] * (MAX_MANIFEST_BYTES // 60)}
    hub.backend.put({_manifest_key(hub, pushed): json.dumps(bloated).encode()})
    assert [m.version for m in hub.versions("net")] == [other.version]


def test_a_pulled_bundle_with_unsafe_paths_is_quarantined_before_anything_is_written(tmp_path, redis_server):
    """A member named `inductor/../../escape` in a bundle whose every hash is right (a hostile hub, no team secret):
    the restore refuses the whole bundle and moves it to quarantine; nothing lands outside the cache dir."""
    from jupyter_compile_cache.storage import bundle

    hub = hub_at(redis_server.url)
    store, manifest = local_bundle(tmp_path, size=1 << 20)
    pushed = hub.push(manifest, store.payload_path(manifest))
    forged = pushed.to_json()
    forged["members"][0]["name"] = "inductor/../../escape"
    # the hub recomputes every digest that covers the member list: all hashes right
    forged["payload_sha256"] = bundle.members_digest([bundle.Member(**m) for m in forged["members"]])
    hub.backend.put({_manifest_key(hub, pushed): json.dumps(forged).encode()})
    cache = tmp_path / "cache" / "inductor"
    cache.mkdir(parents=True)
    mine = LocalStore(str(tmp_path / "mine"))

    def install(m, payload):
        return bundle.extract(payload, m, {"inductor": str(cache)})

    found = newest("net", [HubSource(hub)], mine, lambda m: None, install)
    assert found.manifest is None and found.skipped[0].kind == SkipKind.UNSAFE
    assert not (tmp_path / "escape").exists() and os.listdir(cache) == []
    assert mine.versions("net") == [] and os.listdir(os.path.join(mine.root, "quarantine", "net"))
