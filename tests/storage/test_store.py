"""The local store: atomic versions, bounded history, LRU eviction, quarantine, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from jupyter_compile_cache.storage import bundle
from jupyter_compile_cache.storage.bundle import Manifest, UnsafeBundle
from jupyter_compile_cache.storage.store import LocalStore, UnreadableManifest


def _manifest(name="m", fp="a" * 12):
    return Manifest(
        name=name,
        version=bundle.new_version_id(fp),
        created=time.time(),
        writer="w",
        fingerprint={},
        fingerprint_id=fp,
        payload_sha256="",
        payload_bytes=0,
        members=[],
    )


def _write(store, tmp_path, name="m", size=1000, fp="a" * 12):
    src = tmp_path / f"f{time.time_ns()}"
    src.write_bytes(os.urandom(size))
    return store.write(_manifest(name, fp), {"inductor/ab/x.so": str(src)})


def test_write_then_versions_newest_first(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    first = _write(store, tmp_path)
    second = _write(store, tmp_path)
    assert [m.version for m in store.versions("m")] == [second.version, first.version]
    assert os.path.exists(store.payload_path(second))
    assert not [f for f in os.listdir(os.path.dirname(store.payload_path(second))) if f.startswith(".tmp-")]


def test_versions_are_bounded_per_fingerprint(tmp_path):
    store = LocalStore(str(tmp_path / "s"), max_versions=2)
    for _ in range(4):
        _write(store, tmp_path)
    other = _write(store, tmp_path, fp="b" * 12)
    kept = store.versions("m")
    assert len(kept) == 3
    assert other.version in {m.version for m in kept}


def test_gc_evicts_least_recently_used(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    old = _write(store, tmp_path, name="old", size=50_000)
    new = _write(store, tmp_path, name="new", size=50_000)
    past = time.time() - 3600
    os.utime(store.manifest_path(new), (past, past))
    store.touch(old)  # used just now: survives
    assert [r.name for r in store.gc(new.payload_bytes + 10, dry_run=True)] == ["new"] and store.versions("new")
    evicted = store.gc(new.payload_bytes + 10)
    assert [r.name for r in evicted] == ["new"] and evicted[0].bytes == new.payload_bytes
    assert store.versions("old") and not store.versions("new")


def test_gc_by_age_and_by_usability_comes_before_the_size_cap(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    stale = _write(store, tmp_path, name="stale", size=10_000)
    _write(store, tmp_path, name="foreign", size=10_000)
    kept = _write(store, tmp_path, name="kept", size=10_000)
    forty_days_ago = time.time() - 40 * 86400
    os.utime(store.manifest_path(stale), (forty_days_ago, forty_days_ago))
    past = time.time() - 3600
    os.utime(store.manifest_path(kept), (past, past))  # the least recently used of the two that remain
    rules = dict(older_than=30 * 86400, unusable=lambda m: m.name == "foreign")

    assert {r.name for r in store.gc(None, dry_run=True, **rules)} == {"stale", "foreign"}
    # a cap the two evictions already meet evicts nothing more, though "kept" is the least recently used left
    assert {r.name for r in store.gc(kept.payload_bytes, dry_run=True, **rules)} == {"stale", "foreign"}
    assert {r.name for r in store.gc(kept.payload_bytes - 1, dry_run=True, **rules)} == {"stale", "foreign", "kept"}
    assert {r.name for r in store.gc(None, **rules)} == {"stale", "foreign"}
    assert [n for n in ("stale", "foreign", "kept") if store.versions(n)] == ["kept"]


def test_unreadable_manifest_is_quarantined_and_reported(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    m = _write(store, tmp_path)
    with open(store.manifest_path(m), "w") as f:
        f.write("{not json")
    problems: list[UnreadableManifest] = []
    assert store.versions("m", problems) == []
    assert [(p.name, p.version) for p in problems] == [("m", m.version)] and problems[0].error
    assert os.path.exists(os.path.join(store.root, "quarantine", "m", m.version + ".reason"))


def test_remove_deletes_all_versions(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    _write(store, tmp_path)
    _write(store, tmp_path)
    cached = tmp_path / "cache" / "x.so"
    cached.parent.mkdir()
    cached.write_bytes(b"restored")
    store.note_installed("m", "key", [str(cached)])  # what its last restore wrote, for the next one
    assert store.installed("m", "key") == [str(cached)] and store.installed("m", "other key") is None
    preview = store.remove("m", dry_run=True)
    assert len(preview) == 2 and len(store.versions("m")) == 2  # a dry run removes nothing
    removed = store.remove("m")
    assert removed == preview and sum(r.bytes for r in removed) > 0
    assert store.versions("m") == [] and store.names() == [] and store.installed("m", "key") is None


def _writer_process(root, src, n):
    store = LocalStore(root, max_versions=100)
    for _ in range(n):
        store.write(_manifest(), {"inductor/ab/x.so": src})


def test_two_processes_saving_the_same_name_both_commit_complete_versions(tmp_path):
    root = str(tmp_path / "s")
    src = tmp_path / "payload"
    src.write_bytes(os.urandom(300_000))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer_process, args=(root, str(src), 5)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = LocalStore(root)
    versions = store.versions("m")
    assert len(versions) == 10
    cache = tmp_path / "cache"
    cache.mkdir()
    for m in versions:  # every committed version is complete and verifies
        with store.open_payload(m) as f:
            bundle.extract(f, m, {"inductor": str(cache)})


def test_an_unwritable_store_raises_oserror(tmp_path):
    if os.geteuid() == 0:
        # root ignores permission bits: use a path whose parent is a file instead
        blocker = tmp_path / "blocker"
        blocker.write_text("x")
        store = LocalStore(str(blocker / "s"))
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        store = LocalStore(str(ro / "s"))
    with pytest.raises(OSError):
        _write(store, tmp_path)


def test_a_write_that_fails_midway_leaves_no_partial_version(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    kept = _write(store, tmp_path)
    present = tmp_path / "present"
    present.write_bytes(os.urandom(200_000))
    folder = os.path.dirname(store.payload_path(kept))
    before = sorted(os.listdir(folder))
    # The first member is written, the second is refused (a name that escapes the cache roots): the write stops.
    files = {"inductor/ab/a.so": str(present), "inductor/ab/zz/../../../escape": str(present)}
    with pytest.raises(UnsafeBundle):
        store.write(_manifest(), files)
    assert [m.version for m in store.versions("m")] == [kept.version]  # the earlier version, nothing half-written
    assert sorted(os.listdir(folder)) == before  # no temp payload left beside it


def test_manifest_json_round_trip(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    m = _write(store, tmp_path)
    with open(store.manifest_path(m)) as f:
        again = Manifest.from_json(json.load(f))
    assert again == m


def _tree_bytes(root) -> dict[str, bytes]:
    out = {}
    for folder, _dirs, files in os.walk(root):
        for f in files:
            path = os.path.join(folder, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = fh.read()
    return out


def test_a_write_through_the_cache_dir_never_reaches_the_store(tmp_path):
    """Restored files share no data with the store (no hard links, no shared blocks): writing into one in place, as
    a tool that opened it "r+b" would, leaves the stored version whole, and restoring it again brings the original
    bytes back. The same holds the other way for the files a save read."""
    store = LocalStore(str(tmp_path / "s"))
    cache = tmp_path / "cache"
    (cache / "ab").mkdir(parents=True)
    kernel = cache / "ab" / "k.so"
    original = os.urandom(3 << 20)
    kernel.write_bytes(original)
    manifest = store.write(_manifest("net"), {"inductor/ab/k.so": str(kernel)})
    stored = _tree_bytes(store.root)
    with open(kernel, "r+b") as f:  # the file the save read, changed in place afterwards
        f.write(b"X" * 100)

    restored = tmp_path / "restored"
    with store.open_payload(manifest) as payload:
        [path] = bundle.extract(payload, manifest, {"inductor": str(restored)})
    st = os.stat(path)
    assert st.st_nlink == 1 and st.st_ino not in {os.stat(store.payload_path(manifest)).st_ino}
    with open(path, "r+b") as f:  # the restored file, changed in place
        f.seek(1 << 20)
        f.write(b"Y" * 4096)
    with open(path, "ab") as f:
        f.write(b"appended")
    assert _tree_bytes(store.root) == stored

    again = tmp_path / "again"
    with store.open_payload(manifest) as payload:
        [path] = bundle.extract(payload, manifest, {"inductor": str(again)})
    with open(path, "rb") as f:
        assert f.read() == original


def test_an_interrupted_restore_leaves_the_cache_dir_and_the_store_as_they_were(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    src = tmp_path / "src"
    src.mkdir()
    files = {}
    for i in range(6):
        (src / f"k{i}.so").write_bytes(os.urandom(1 << 20))
        files[f"inductor/k{i}/k.so"] = str(src / f"k{i}.so")
    manifest = store.write(_manifest("net"), files)
    stored = _tree_bytes(store.root)
    cache = tmp_path / "cache"
    cache.mkdir()

    def interrupt(done: int, total: int) -> None:
        if done > total // 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), store.open_payload(manifest) as payload:
        bundle.extract(payload, manifest, {"inductor": str(cache)}, interrupt)
    assert os.listdir(cache) == []  # nothing moved into place, staging removed
    assert _tree_bytes(store.root) == stored
    with store.open_payload(manifest) as payload:
        assert len(bundle.extract(payload, manifest, {"inductor": str(cache)})) == 6


def _with_build_aid(store, tmp_path, name="m", header=300_000):
    """A version as versions before 0.3 saved it with nothing set: a kernel and torch's precompiled header."""
    kernel, gch = tmp_path / f"k{time.time_ns()}.so", tmp_path / f"h{time.time_ns()}.gch"
    kernel.write_bytes(os.urandom(1000))
    gch.write_bytes(os.urandom(header))
    files = {"inductor/ab/k.so": str(kernel), "inductor/precompiled_headers/h.h.gch": str(gch)}
    return store.write(_manifest(name), files), kernel.read_bytes()


def _no_header(member):
    return "precompiled_headers" not in member


def test_gc_takes_what_keep_refuses_out_of_every_version_and_keeps_the_rest_whole(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    fat, kernel = _with_build_aid(store, tmp_path)
    clean = _write(store, tmp_path, name="clean")
    past = time.time() - 3600
    os.utime(store.manifest_path(fat), (past, past))

    plan = store.gc(None, dry_run=True, keep=_no_header)
    assert [(r.name, r.version, r.bytes, r.kept) for r in plan] == [("m", fat.version, 300_000, fat.version)]
    assert [m.version for m in store.versions("m")] == [fat.version]  # a dry run changes nothing

    [removal] = store.gc(None, keep=_no_header)
    [slim] = store.versions("m")
    assert removal.kept == slim.version != fat.version
    assert slim.version.split("-")[:2] == fat.version.split("-")[:2]  # same time and fingerprint: same order
    assert [m.name for m in slim.members] == ["inductor/ab/k.so"] and slim.payload_bytes == 1000
    assert not os.path.exists(store.payload_path(fat)) and not os.path.exists(store.manifest_path(fat))
    assert abs(os.stat(store.manifest_path(slim)).st_mtime - past) < 1  # its last use is kept for eviction
    assert [m.version for m in store.versions("clean")] == [clean.version]
    restored = tmp_path / "restored"
    with store.open_payload(slim) as payload:
        [path] = bundle.extract(payload, slim, {"inductor": str(restored)})
    with open(path, "rb") as f:
        assert f.read() == kernel
    assert store.gc(None, keep=_no_header) == []  # nothing more to take


def test_a_version_slimmed_beside_others_of_its_name_prunes_none_of_them(tmp_path):
    store = LocalStore(str(tmp_path / "s"), max_versions=2)
    older = _write(store, tmp_path)
    fat, _kernel = _with_build_aid(store, tmp_path)
    store.slim(_no_header)
    versions = store.versions("m")
    assert len(versions) == 2 and versions[1].version == older.version
    assert [m.name for m in versions[0].members] == ["inductor/ab/k.so"]


def test_a_restore_writes_no_member_that_keep_refuses(tmp_path):
    store = LocalStore(str(tmp_path / "s"))
    fat, kernel = _with_build_aid(store, tmp_path)
    restored = tmp_path / "restored"
    with store.open_payload(fat) as payload:
        written = bundle.extract(payload, fat, {"inductor": str(restored)}, keep=_no_header)
    assert [os.path.relpath(p, restored) for p in written] == [os.path.join("ab", "k.so")]
    assert not (restored / "precompiled_headers").exists()
