"""The hub on every backend (a real redis-server, a real Redis Cluster, Redis over TLS, a shared folder): round
trips, signing, tampering, compression, faults in the middle of transfers, concurrency, expiry, gc and leases. What
only one backend has (passwords in URLs, a silent server, real eviction under maxmemory) is tested on that one. How a
push keeps its chunks until the commit (storage/chunk_expiry.py, one way per kind of backend) is tested here, on
every backend: a pusher killed midway, a push longer than the orphan ttl, chunks evicted before the commit."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from helpers.hubs import hub_at, local_bundle, pull_bytes
from helpers.redis_server import RedisServer

from jupyter_compile_cache.storage import bundle
from jupyter_compile_cache.storage.backends import redact
from jupyter_compile_cache.storage.bundle import Manifest, short_id
from jupyter_compile_cache.storage.hub import HubError, HubRefused, SignatureError, check_signature
from jupyter_compile_cache.storage.store import LocalStore


def _payload(store, manifest) -> bytes:
    with open(store.payload_path(manifest), "rb") as f:
        return f.read()


def _chunk(hub, manifest, i):
    return hub._chunk_key(manifest.name, manifest.fingerprint_id, manifest.version, i)


def test_push_pull_round_trip_is_byte_identical_and_listed(tmp_path, any_hub):
    store, manifest = local_bundle(tmp_path)
    hub = any_hub.hub()
    pushed = hub.push(manifest, store.payload_path(manifest))
    assert len(pushed.chunk_sha256) == -(-manifest.payload_bytes // (256 << 10)) > 1
    assert hub.names() == ["net"]
    [listed] = hub.versions("net")
    assert listed.version == manifest.version and listed.chunk_sha256 == pushed.chunk_sha256
    assert pull_bytes(hub, listed) == _payload(store, manifest)
    assert any_hub.seconds_left(_chunk(hub, manifest, 0)) is None  # committed: no expiry left on the chunks


def test_namespaces_do_not_see_each_other(tmp_path, any_hub):
    store, manifest = local_bundle(tmp_path)
    any_hub.hub(namespace="team-a").push(manifest, store.payload_path(manifest))
    assert any_hub.hub(namespace="team-b").versions("net") == []
    assert any_hub.hub(namespace="team-b").names() == []
    assert any_hub.hub(namespace="team-a/sub").names() == []
    assert len(any_hub.hub(namespace="team-a").versions("net")) == 1


def test_signed_bundles_verify_and_tampering_is_refused(tmp_path, any_hub):
    store, manifest = local_bundle(tmp_path)
    secret = b"team-secret"
    hub = any_hub.hub(secret=secret)
    hub.push(manifest, store.payload_path(manifest))
    [pulled] = hub.versions("net")
    check_signature(pulled, secret)  # valid
    with pytest.raises(SignatureError, match="wrong signature"):
        check_signature(pulled, b"another team")
    # someone with write access to the hub rewrites the manifest: the signature breaks
    key = hub._manifest_key("net", manifest.fingerprint_id, manifest.version)
    data = json.loads(hub.backend.get([key])[0])
    data["writer"] = "mallory"
    hub.backend.put({key: json.dumps(data).encode()})
    [tampered] = hub.versions("net")
    with pytest.raises(SignatureError, match="wrong signature"):
        check_signature(tampered, secret)
    # and an unsigned bundle is refused when a secret is set
    store2, unsigned = local_bundle(tmp_path, name="other")
    any_hub.hub().push(unsigned, store2.payload_path(unsigned))
    [pulled_unsigned] = hub.versions("other")
    with pytest.raises(SignatureError, match="unsigned"):
        check_signature(pulled_unsigned, secret)


def test_corrupted_or_missing_chunk_is_detected(tmp_path, any_hub):
    store, manifest = local_bundle(tmp_path)
    hub = any_hub.hub()
    hub.push(manifest, store.payload_path(manifest))
    [listed] = hub.versions("net")
    hub.backend.put({_chunk(hub, manifest, 1): b"garbage"})
    with pytest.raises(HubError, match="sha256"):
        pull_bytes(hub, listed)
    hub.backend.delete([_chunk(hub, manifest, 2)])
    hub.backend.put({_chunk(hub, manifest, 1): _payload(store, manifest)[256 << 10 : 512 << 10]})
    with pytest.raises(HubError, match="missing"):
        pull_bytes(hub, listed)


def _compressible_bundle(tmp_path, size=2 << 20):
    store = LocalStore(str(tmp_path / f"store-{time.time_ns()}"))
    src = tmp_path / f"src-{time.time_ns()}"
    src.mkdir()
    text = src / "k.py"
    text.write_bytes((b"def kernel(x):\n    return x * 2  # generated\n" * (size // 40))[:size])
    noise = src / "k.cubin"
    noise.write_bytes(os.urandom(size))
    files = {"inductor/ab/k.py": str(text), "inductor/ab/k.cubin": str(noise)}
    return store, store.write(Manifest.new("net", {"torch": "x"}, "f" * 12, "alice@a"), files)


def test_chunks_that_compress_travel_compressed_and_pull_back_byte_identical(tmp_path, any_hub):
    store, manifest = _compressible_bundle(tmp_path)
    hub = any_hub.hub()
    pushed = hub.push(manifest, store.payload_path(manifest))
    assert pushed.chunk_compressed is not None and any(pushed.chunk_compressed) and not all(pushed.chunk_compressed)
    stored = hub.backend.get([_chunk(hub, manifest, i) for i in range(len(pushed.chunk_sha256))])
    assert sum(len(data) for data in stored) < 0.7 * manifest.payload_bytes
    [listed] = hub.versions("net")
    assert pull_bytes(hub, listed) == _payload(store, manifest)


def test_a_chunk_that_would_decompress_past_its_size_is_refused_before_it_is(tmp_path, any_hub):
    import zstandard

    store, manifest = _compressible_bundle(tmp_path)
    hub = any_hub.hub()  # no team secret: a hostile hub may rewrite anything, and sizes still hold
    pushed = hub.push(manifest, store.payload_path(manifest))
    i = pushed.chunk_compressed.index(True)
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))  # 64 MiB of zeros in a few KB
    pushed.chunk_sha256[i] = bundle.hashlib.sha256(bomb).hexdigest()
    hub.backend.put({_chunk(hub, manifest, i): bomb})
    key = hub._manifest_key("net", manifest.fingerprint_id, manifest.version)
    hub.backend.put({key: json.dumps(pushed.to_json()).encode()})
    [listed] = hub.versions("net")
    with pytest.raises(HubError, match="size its manifest implies"):
        pull_bytes(hub, listed)


def test_a_format_1_bundle_from_an_older_version_still_travels_and_restores(tmp_path, any_hub):
    """An older version stored a zstd tar and pushed its raw slices without `chunk_compressed`: it still pulls into
    a new store and restores."""
    from helpers.legacy_bundle import write_tar_payload

    src = tmp_path / "src"
    src.mkdir()
    (src / "k.so").write_bytes(os.urandom(300_000))
    payload = io.BytesIO()
    members, sha, size = write_tar_payload({"inductor/ab/k.so": str(src / "k.so")}, payload)
    manifest = Manifest.new("net", {"torch": "x"}, "f" * 12, "old@a")
    manifest.format, manifest.compression = 1, "zstd"
    manifest.members, manifest.payload_sha256, manifest.payload_bytes = members, sha, size
    old_store = LocalStore(str(tmp_path / "old"))
    old_store.adopt(manifest, io.BytesIO(payload.getvalue()))
    assert old_store.payload_path(manifest).endswith(".tar.zst")
    hub = any_hub.hub(chunk_size=64 << 10)
    pushed = hub.push(manifest, old_store.payload_path(manifest))
    assert pushed.chunk_compressed is None  # raw slices, as an older version reads them
    [listed] = hub.versions("net")
    new_store = LocalStore(str(tmp_path / "new"))
    with new_store.receive(listed) as sink:
        hub.pull(listed, sink)
    [local] = new_store.versions("net")
    with new_store.open_payload(local) as f:
        [path] = bundle.extract(f, local, {"inductor": str(tmp_path / "cache")})
    with open(path, "rb") as f:
        assert f.read() == (src / "k.so").read_bytes()


def test_the_hub_going_away_mid_push_leaves_no_visible_bundle_and_the_next_push_completes(tmp_path, any_hub):
    store, manifest = local_bundle(tmp_path, size=6 << 20)
    hub = any_hub.hub(chunk_size=128 << 10, timeout=2.0, connect_timeout=1.0)
    cut = []

    def cut_after_first_batch(done, total):
        if not cut:
            cut.append(True)
            any_hub.cut()

    start = time.time()
    with pytest.raises(HubError):
        hub.push(manifest, store.payload_path(manifest), progress=cut_after_first_batch)
    assert time.time() - start < 10  # bounded, no hang
    any_hub.restore()  # the chunks written before the cut are still there (append-only file, the folder)
    hub = any_hub.hub(chunk_size=128 << 10)
    assert hub.versions("net") == [] and hub.names() == []  # but without a manifest nobody sees them
    if hub.backend.expiry_in_place:
        assert 0 < any_hub.seconds_left(_chunk(hub, manifest, 0)) <= 3600  # and they expire on their own
    else:  # S3: the push's marker does, and gc then takes the chunks it claimed
        [marker] = [key for key in hub.backend.list("jcc:default/net:") if ":pushing:" in key]
        assert 0 < any_hub.seconds_left(marker) <= 3600
    hub.push(manifest, store.payload_path(manifest))
    [listed] = hub.versions("net")
    assert pull_bytes(hub, listed) == _payload(store, manifest)


def test_the_hub_going_away_mid_pull_is_an_error_not_a_hang_and_stores_nothing(tmp_path, any_hub):
    store, manifest = local_bundle(tmp_path, size=6 << 20)
    hub = any_hub.hub(chunk_size=128 << 10, timeout=2.0, connect_timeout=1.0)
    hub.push(manifest, store.payload_path(manifest))
    [listed] = hub.versions("net")
    cut = []

    def cut_once(done, total):
        if not cut:
            cut.append(True)
            any_hub.cut()

    mine = LocalStore(str(tmp_path / "mine"))
    start = time.time()
    with pytest.raises(HubError, match="hub"):
        with mine.receive(listed) as sink:
            hub.pull(listed, sink, progress=cut_once)
    assert cut and time.time() - start < 10
    assert mine.versions("net") == []  # only whole versions: nothing half-pulled
    any_hub.restore()


def test_two_writers_pushing_the_same_name_both_finish(tmp_path, any_hub):
    bundles = [local_bundle(tmp_path) for _ in range(2)]
    errors = []

    def push(store, manifest):
        try:
            any_hub.hub(chunk_size=64 << 10).push(manifest, store.payload_path(manifest))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=push, args=b) for b in bundles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    hub = any_hub.hub()
    versions = hub.versions("net")
    assert {v.version for v in versions} == {m.version for _, m in bundles}
    stores = {m.version: store for store, m in bundles}
    for v in versions:  # each is complete and verifies end to end
        assert pull_bytes(hub, v) == _payload(stores[v.version], v)
        with stores[v.version].open_payload(v) as f:
            assert len(bundle.extract(f, v, {"inductor": str(tmp_path / v.version)})) == 3


def test_ttl_expires_bundles_and_gc_forgets_their_names(tmp_path, clocked_hub):
    store, manifest = local_bundle(tmp_path, size=300_000)
    hub = clocked_hub.hub(ttl=60)
    hub.push(manifest, store.payload_path(manifest))
    key = hub._manifest_key("net", manifest.fingerprint_id, manifest.version)
    # the bundle's ttl
    assert 50 < clocked_hub.seconds_left(key) <= 60 and 50 < clocked_hub.seconds_left(_chunk(hub, manifest, 0)) <= 60
    clocked_hub.pass_time(30)
    assert [v.version for v in hub.versions("net")] == [manifest.version]
    clocked_hub.pass_time(31)
    assert hub.versions("net") == [] and hub.names() == []
    hub.gc()
    assert hub.backend.list("jcc:") == []  # nothing of it left


def test_gc_keeps_the_newest_versions_and_rm_removes_the_rest(tmp_path, any_hub):
    hub = any_hub.hub()
    for _ in range(4):
        store, manifest = local_bundle(tmp_path, size=30_000)
        hub.push(manifest, store.payload_path(manifest))
    assert len(hub.versions("net")) == 4
    assert len(hub.gc(keep=2, dry_run=True)) == 2 and len(hub.versions("net")) == 4
    assert len(hub.gc(keep=2)) == 2
    newest, older = hub.versions("net")
    assert [r.version for r in hub.remove("net", older.version)] == [older.version]
    assert hub.names() == ["net"]
    assert [r.version for r in hub.remove("net")] == [newest.version]
    assert hub.names() == [] and hub.backend.list("jcc:") == []


def _with_header(tmp_path, name="fat", header=600_000):
    """A bundle as versions before 0.3 saved it with nothing set: a kernel and torch's precompiled header."""
    store = LocalStore(str(tmp_path / f"store-{time.time_ns()}"))
    kernel, gch = tmp_path / f"k{time.time_ns()}.so", tmp_path / f"h{time.time_ns()}.gch"
    kernel.write_bytes(os.urandom(1000))
    gch.write_bytes(os.urandom(header))
    files = {"inductor/ab/k.so": str(kernel), "inductor/precompiled_headers/h.h.gch": str(gch)}
    return store, store.write(Manifest.new(name, {"torch": "x"}, "f" * 12, "alice@a"), files), kernel.read_bytes()


def _no_header(member):
    return "precompiled_headers" not in member


def test_gc_pushes_kept_versions_again_without_what_keep_member_refuses(tmp_path, any_hub):
    secret = b"team-secret"
    hub = any_hub.hub(secret=secret)
    store, fat, kernel = _with_header(tmp_path)
    hub.push(fat, store.payload_path(fat))
    forged_store, forged, _ = _with_header(tmp_path, name="forged")  # pushed with another team's secret
    any_hub.hub(secret=b"another team").push(forged, forged_store.payload_path(forged))
    clean_store, clean = local_bundle(tmp_path, size=30_000, name="clean")
    hub.push(clean, clean_store.payload_path(clean))

    plan = hub.gc(keep=3, dry_run=True, keep_member=_no_header)
    assert [(r.name, r.version, r.bytes, r.kept) for r in plan] == [("fat", fat.version, 600_000, fat.version)]
    assert [m.version for m in hub.versions("fat")] == [fat.version]  # a dry run changes nothing

    shown: list[tuple[str, int, int]] = []  # what a progress bar is given: the pull, then the push, one bar
    [removal] = hub.gc(3, False, _no_header, lambda m: lambda done, total: shown.append((m.name, done, total)))
    [slim] = hub.versions("fat")
    whole = 2 * fat.payload_bytes  # the pull's bytes, then the push's scaled to them
    assert {name for name, _, _ in shown} == {"fat"} and ("fat", whole // 2, whole) in shown and shown[-1][1] == whole
    assert [done for _, done, _ in shown] == sorted(done for _, done, _ in shown)  # it only moves on
    check_signature(slim, secret)  # signed again with the team's secret
    assert removal.kept == slim.version != fat.version and slim.created == fat.created
    assert slim.version.split("-")[:2] == fat.version.split("-")[:2]  # same time and fingerprint: same order
    assert [m.name for m in slim.members] == ["inductor/ab/k.so"] and slim.payload_bytes == 1000
    assert hub.backend.missing([_chunk(hub, fat, 0)]) == [_chunk(hub, fat, 0)]  # the old version's chunks are gone
    (tmp_path / "pulled").write_bytes(pull_bytes(hub, slim))
    with open(tmp_path / "pulled", "rb") as payload:
        [path] = bundle.extract(payload, slim, {"inductor": str(tmp_path / "restored")})
    with open(path, "rb") as f:
        assert f.read() == kernel
    # gc never signs what this team did not: the forged version stays as it was, refused by readers
    assert [m.version for m in hub.versions("forged")] == [forged.version]
    assert [m.version for m in hub.versions("clean")] == [clean.version]
    assert hub.gc(keep=3, keep_member=_no_header) == []  # nothing more to take
    # without the secret, a signed version cannot be signed again: it is left whole
    assert any_hub.hub().gc(keep=3, keep_member=lambda member: False) == []


def test_many_processes_racing_for_one_lease_leave_exactly_one_holder(tmp_path, clocked_hub):
    """Eight processes (as eight kernels) try to take the same lease at once: exactly one gets it."""
    code = (
        "import sys, time\n"
        "from jupyter_compile_cache.storage.hub import Hub, HubConfig\n"
        "lease = Hub(HubConfig(url=sys.argv[1])).lease('net', 'f', sys.argv[2])\n"
        "while time.time() < float(sys.argv[3]): pass\n"
        "print('TOOK' if lease.acquire() is None else 'WAITED', flush=True)\n"  # the lease outlives its holder
    )
    at = str(time.time() + 3)
    procs = [
        subprocess.Popen([sys.executable, "-c", code, clocked_hub.url, f"k{i}", at], stdout=subprocess.PIPE, text=True)
        for i in range(8)
    ]
    answers = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sorted(answers) == ["TOOK"] + ["WAITED"] * 7, answers


def test_unreachable_hub_fails_fast(free_port):
    hub = hub_at(f"redis://127.0.0.1:{free_port}/0", connect_timeout=1.0)
    start = time.time()
    with pytest.raises(HubError):
        hub.versions("net")
    assert time.time() - start < 8  # the connect timeout (1 s), not redis-py's retries: wide for a loaded machine


def test_silent_server_times_out_instead_of_hanging():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections (kernel backlog) but never answers
    try:
        port = listener.getsockname()[1]
        hub = hub_at(f"redis://127.0.0.1:{port}/0", connect_timeout=1.0, timeout=1.0)
        start = time.time()
        with pytest.raises(HubError, match=f"127.0.0.1:{port} took the connection but did not answer in time"):
            hub.ping()
        assert time.time() - start < 9  # a timeout or two (1 s each), never a hang: wide for a loaded machine
    finally:
        listener.close()


def test_a_database_number_the_server_lacks_is_said_in_our_words(redis_server):
    url = redis_server.url.rsplit("/", 1)[0] + "/99"
    with pytest.raises(HubError, match=r"has no database of the URL's number \(the /N after the port"):
        hub_at(url).ping()


def test_passwords_never_appear_in_messages(tmp_path):
    server = RedisServer(tmp_path, ["--user", "default", "off", "--user", "alice", "on", ">s3cr3t-pw", "~*", "+@all"])
    try:
        url = f"redis://alice:s3cr3t-pw@127.0.0.1:{server.port}/0"
        assert redact(url) == f"redis://alice:***@127.0.0.1:{server.port}/0"
        good = hub_at(f"redis://alice:s3cr3t-pw@127.0.0.1:{server.port}/0")
        assert good.ping() >= 0  # ACL user and password work through the URL
        bad = hub_at(f"redis://alice:wrong-pw-123@127.0.0.1:{server.port}/0")
        with pytest.raises(HubError) as info:
            bad.versions("net")
        assert "wrong-pw-123" not in str(info.value) and "s3cr3t" not in str(info.value)
        assert "***" in str(info.value) or "alice" in str(info.value)
    finally:
        server.stop()


def test_redis_evicting_chunks_under_maxmemory_mid_pull_is_a_clear_error_and_stores_nothing(tmp_path):
    """A Redis run with `maxmemory` and `allkeys-lru` evicts the bundle's older chunks when other data arrives in the
    middle of a pull: the pull fails on the first missing chunk, and the local store keeps no partial version."""
    server = RedisServer(tmp_path, ["--maxmemory", "12mb", "--maxmemory-policy", "allkeys-lru", "--appendonly", "no"])
    try:
        store, manifest = local_bundle(tmp_path, size=6 << 20)
        hub = hub_at(server.url, chunk_size=128 << 10)
        hub.push(manifest, store.payload_path(manifest))
        [listed] = hub.versions("net")
        filled = []

        def others_write(done, total):
            if not filled:  # another team's 12 MB arrives after our first chunks
                filled.append(True)
                client = server.client()
                for i in range(48):
                    client.set(f"other:{i}", os.urandom(256 << 10))

        mine = LocalStore(str(tmp_path / "mine"))
        with pytest.raises(HubError, match="missing on the hub"):
            with mine.receive(listed) as sink:
                hub.pull(listed, sink, progress=others_write)
        assert server.client().info("stats")["evicted_keys"] > 0
        assert mine.versions("net") == []
    finally:
        server.stop()


def test_an_unknown_scheme_is_one_clear_line_naming_the_supported_ones():
    with pytest.raises(HubError) as caught:
        hub_at("ftp://bucket/prefix").versions("net")
    message = str(caught.value)
    assert "not a hub URL: 'ftp://bucket/prefix'" in message
    assert all(f"{scheme}://" in message for scheme in ("file", "redis", "s3", "gs", "az"))
    assert "\n" not in message


def test_cli_push_all_publishes_what_the_hub_lacks_and_says_what_it_had(tmp_path, any_hub, monkeypatch, capsys):
    from jupyter_compile_cache.frontends import cli

    mine = LocalStore(str(tmp_path / "mine"))
    for name in ("first", "second", "third"):
        store, manifest = local_bundle(tmp_path, size=600 << 10, name=name)
        with store.open_payload(manifest) as payload:
            mine.adopt(manifest, payload)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB", any_hub.url)
    assert cli.main(["--store", mine.root, "hub", "push", "second"]) == 0
    capsys.readouterr()
    assert cli.main(["--store", mine.root, "hub", "push", "--all"]) == 0
    out = capsys.readouterr().out
    assert "pushed 'first' version" in out and "pushed 'third' version" in out and "pushed 'second'" not in out
    assert f"already on the hub {any_hub.url} namespace 'default': 'second'" in out
    assert sorted(any_hub.hub().names()) == ["first", "second", "third"]
    for name in ("first", "third"):
        [local], [pushed] = mine.versions(name), any_hub.hub().versions(name)
        assert pushed.version == local.version and pull_bytes(any_hub.hub(), pushed) == _payload_of(mine, local)
    assert cli.main(["--store", mine.root, "hub", "push", "--all"]) == 0
    assert "already on the hub" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # a name and --all: one or the other
        cli.main(["--store", mine.root, "hub", "push", "first", "--all"])
    assert "not allowed with argument" in capsys.readouterr().err


def _payload_of(store, manifest) -> bytes:
    with store.open_payload(manifest) as payload:
        return payload.read()


def test_cli_pull_walks_the_same_checks_as_a_cell(tmp_path, any_hub, monkeypatch, capsys):
    from jupyter_compile_cache.frontends import cli
    from jupyter_compile_cache.torch_adapter import fingerprint

    store, manifest = local_bundle(tmp_path, name="clinet")
    here = fingerprint.current()  # made on this machine, so it fits
    manifest.fingerprint, manifest.fingerprint_id = here, fingerprint.digest(here)
    mine = LocalStore(str(tmp_path / "mine"))
    with store.open_payload(manifest) as payload:
        mine.adopt(manifest, payload)
    foreign_store, foreign = local_bundle(tmp_path, name="clinet")  # newer, made for another torch
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB", any_hub.url)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_SECRET", "ours")
    assert cli.main(["--store", mine.root, "hub", "push", "clinet"]) == 0
    hub_at(any_hub.url, secret=b"ours").push(foreign, foreign_store.payload_path(foreign))
    capsys.readouterr()

    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_SECRET", "theirs")
    assert cli.main(["--store", str(tmp_path / "theirs"), "hub", "pull", "clinet"]) == cli.ERROR  # none to trust
    err = capsys.readouterr().err
    # the likely cause first: the version that fits is signed with another secret
    assert err.startswith("wrong signature (another team's secret?)"), err
    assert "incompatible" in err and "no team secret" not in err

    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_SECRET", "ours")
    assert cli.main(["--store", str(tmp_path / "ours"), "hub", "pull", "clinet"]) == 0
    out = capsys.readouterr()
    assert f"pulled 'clinet' version {short_id(manifest.version)}" in out.out and "incompatible" in out.out
    # the speed is the transfer's (its seconds are the fetch's own, not the listing's and the checks')
    seconds = float(out.out.split(" in ", 2)[-1].split(" s ")[0])
    assert seconds < 60 and "/s)" in out.out

    monkeypatch.delenv("JUPYTER_COMPILE_CACHE_SECRET")  # as kernels do: pulling unverified bundles is said
    assert cli.main(["--store", str(tmp_path / "unsigned"), "hub", "pull", "clinet"]) == 0
    assert "no team secret (JUPYTER_COMPILE_CACHE_SECRET)" in capsys.readouterr().err
    [pulled] = LocalStore(str(tmp_path / "ours")).versions("clinet")
    assert pulled.payload_sha256 == manifest.payload_sha256


def test_hub_rm_and_gc_say_what_they_remove_and_need_yes_to_empty_a_name(tmp_path, any_hub, capsys):
    from jupyter_compile_cache.frontends import cli

    hub = hub_at(any_hub.url)
    for _ in range(2):
        store, manifest = local_bundle(tmp_path, size=30_000)
        hub.push(manifest, store.payload_path(manifest))
    base = ["--store", str(tmp_path / "cli-store"), "hub", "--hub", any_hub.url]
    for bad, told in (
        (["gc", "--keep", "-1"], "argument --keep: must be a whole number, 1 or more, not '-1'"),
        (["gc", "--keep", "0"], "argument --keep: must be a whole number, 1 or more, not '0'"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(base + bad)
        assert exited.value.code == 2 and told in capsys.readouterr().err
    for bad, told in (
        (["push", "net", "--ttl", "-5"], "argument --ttl: must be a whole number of seconds, 1 or more, not '-5'"),
        (["--namespace", "bad ns", "ls"], "argument --namespace: invalid namespace 'bad ns'"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.main(["hub", "--hub", any_hub.url, *bad])
        assert exited.value.code == 2 and told in capsys.readouterr().err
    assert len(hub.versions("net")) == 2

    assert cli.main(base + ["rm", "net"]) == 3  # every version of the name: refused without --yes
    out = capsys.readouterr()
    assert "would remove 2 versions" in out.out and "run again with --yes" in out.err
    assert cli.main(base + ["gc", "--keep", "1", "--dry-run"]) == 0
    assert "would remove 1 version" in capsys.readouterr().out and len(hub.versions("net")) == 2
    fat_store, fat, _kernel = _with_header(tmp_path)  # saved before build aids were left out
    hub.push(fat, fat_store.payload_path(fat))
    assert cli.main(base + ["gc", "--keep", "1"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 version" in out and len(hub.versions("net")) == 1
    assert f"fat  {short_id(fat.version)}  torch's precompiled headers, no compile result" in out
    assert [m.payload_bytes for m in hub.versions("fat")] == [1000]
    assert cli.main(base + ["rm", "net", "--dry-run"]) == 0 and len(hub.versions("net")) == 1
    assert cli.main(base + ["rm", "net", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 version" in out and "freeing" in out and hub.versions("net") == [] and hub.names() == ["fat"]


# -- nothing left behind, nothing half there ------------------------------------------------------------------------
PUSHING = """
import sys, time
sys.path.insert(0, sys.argv[3])
from helpers.hubs import hub_at, local_bundle
import pathlib
store, manifest = local_bundle(pathlib.Path(sys.argv[2]), size=3 << 20)
def stall(done, total):
    print("PUSHING", flush=True)
    time.sleep(3600)
hub_at(sys.argv[1], orphan_ttl=60).push(manifest, store.payload_path(manifest), progress=stall)
"""


def test_a_pusher_killed_midway_leaves_no_chunk_after_a_few_seconds_not_an_hour(tmp_path, clocked_hub):
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", PUSHING, clocked_hub.url, str(tmp_path), tests], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "PUSHING"
    finally:
        proc.kill()
        proc.wait()
    hub = clocked_hub.hub()
    # A chunk the pusher had sent whole can land just after its death (Azurite and moto finish a request whose
    # client is gone; one landed after the first listing, 8 chunks against 7): the server has settled once two
    # listings a moment apart agree.
    left, deadline = None, time.monotonic() + 10
    while time.monotonic() < deadline and left != (left := hub.backend.list("jcc:default/net:chunk:")):
        time.sleep(0.3)
    assert left and hub.versions("net") == []  # its first chunks, no manifest
    clocked_hub.pass_time(61)  # its orphan_ttl: a minute here, five by default
    if hub.backend.expiry_in_place:  # the chunks' own short expiry: unreadable now
        assert hub.backend.missing(left) == left and hub.backend.get(left) == [None] * len(left)
    else:  # S3: the push's marker has lapsed, and gc takes what it claimed
        [marker] = [key for key in hub.backend.list("jcc:default/net:") if ":pushing:" in key]
        assert hub.backend.missing([marker]) == [marker]
        assert len(hub.backend.list("jcc:default/net:chunk:")) == len(left)  # nothing but gc removes them
    hub.gc()  # what the store does not drop itself (a folder's files, S3's objects) goes at the next sweep
    assert hub.backend.list("jcc:") == [] and hub.versions("net") == []
    if clocked_hub.kind == "file":
        assert [f for _, _, files in os.walk(clocked_hub.folder) for f in files] == []


def test_a_push_longer_than_the_orphan_ttl_keeps_its_first_chunks_alive(tmp_path, clocked_hub):
    """A push two and a half times as long as `orphan_ttl`, and a collaborator's gc after every call once that has
    passed: the push renews what keeps its chunks (their expiry, or on S3 its `pushing` key) as it sends, so it
    commits whole."""
    store, manifest = local_bundle(tmp_path, size=3 << 20)
    hub = clocked_hub.hub(orphan_ttl=60, chunk_size=64 << 10)
    batches = -(-48 // hub.backend.keys_per_call)  # 3 MB in chunks of 64 KB, sent keys_per_call at a time
    collected: list[int] = []

    def call_sent(done: int, total: int) -> None:
        clocked_hub.pass_time(150 / batches)  # each call takes this long: under orphan_ttl, the whole push not
        if clocked_hub.clock.jumped > 65:  # the chunks sent first are older than orphan_ttl by now
            clocked_hub.hub().gc()
            collected.append(1)

    hub.push(manifest, store.payload_path(manifest), progress=call_sent)
    assert collected  # the collaborator's gc ran while the push went on
    [listed] = hub.versions("net")
    assert pull_bytes(hub, listed) == _payload(store, manifest)


def test_a_push_whose_chunks_vanish_before_its_commit_publishes_nothing(tmp_path, any_hub):
    store, manifest = local_bundle(tmp_path)
    hub = any_hub.hub()
    count = -(-manifest.payload_bytes // (256 << 10))

    def evict_the_first_at_the_end(done, total):
        if done == total:  # all sent: what an eviction policy does to the oldest keys
            hub.backend.delete([_chunk(hub, manifest, 0)])

    with pytest.raises(HubError, match=f"1 of the {count} chunks of 'net' were gone from the hub"):
        hub.push(manifest, store.payload_path(manifest), progress=evict_the_first_at_the_end)
    assert hub.versions("net") == [] and hub.names() == [] and hub.backend.list("jcc:") == []


def test_hub_ls_says_which_versions_are_incomplete_and_gc_removes_them(tmp_path, redis_server, monkeypatch, capsys):
    from jupyter_compile_cache.frontends import cli

    hub = hub_at(redis_server.url)
    for _ in range(2):
        store, manifest = local_bundle(tmp_path, size=1 << 20)
        hub.push(manifest, store.payload_path(manifest))
    broken, whole = hub.versions("net")[1], hub.versions("net")[0]
    hub.backend.delete([_chunk(hub, broken, 2)])  # evicted after the commit
    assert hub.missing_chunks(broken) == 1 and hub.missing_chunks(whole) == 0
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB", redis_server.url)
    assert cli.main(["--store", str(tmp_path / "s"), "hub", "ls"]) == 0
    out = capsys.readouterr().out
    assert "INCOMPLETE: 1 chunk gone" in out and out.count("INCOMPLETE") == 1
    assert "incomplete on the hub: 1 version" in out
    assert [r.version for r in hub.gc(keep=5)] == [broken.version]
    assert [m.version for m in hub.versions("net")] == [whole.version]


def test_redis_evicting_a_writers_chunks_before_its_manifest_lands_leaves_nothing_readable(tmp_path):
    """`maxmemory` with `allkeys-lru`: another team's data arriving mid-push evicts our first chunks."""
    server = RedisServer(tmp_path, ["--maxmemory", "12mb", "--maxmemory-policy", "allkeys-lru", "--appendonly", "no"])
    try:
        store, manifest = local_bundle(tmp_path, size=6 << 20)
        hub = hub_at(server.url, chunk_size=128 << 10)
        filled = []

        def others_write(done, total):
            if not filled:
                filled.append(True)
                for i in range(48):
                    server.client().set(f"other:{i}", os.urandom(256 << 10))

        with pytest.raises(HubError, match="were gone from the hub before the push could commit"):
            hub.push(manifest, store.payload_path(manifest), progress=others_write)
        assert server.client().info("stats")["evicted_keys"] > 0
        assert hub.versions("net") == [] and hub.names() == []
    finally:
        server.stop()


def test_a_full_redis_that_evicts_nothing_refuses_pushes_in_words_and_still_serves_pulls(tmp_path):
    """`noeviction`, the setting docs/how_it_works.md recommends: a full hub refuses writes (a HubRefused: told, not
    taken for a hub that is down) and what it holds stays whole."""
    server = RedisServer(tmp_path, ["--maxmemory", "8mb", "--maxmemory-policy", "noeviction", "--appendonly", "no"])
    try:
        first_store, first = local_bundle(tmp_path, size=2 << 20)
        hub = hub_at(server.url)
        hub.push(first, first_store.payload_path(first))
        store, big = local_bundle(tmp_path, size=12 << 20, name="big")
        with pytest.raises(HubRefused, match="the hub is full") as refused:
            hub.push(big, store.payload_path(big))
        assert refused.value.action == "write" and not refused.value.denied
        assert hub.versions("big") == []
        [listed] = hub.versions("net")
        assert pull_bytes(hub, listed) == _payload(first_store, first)
    finally:
        server.stop()
