"""Property-based tests (hypothesis) of what reads outside input in bundle.py: bundle names, manifests, and
payloads that are truncated, bit-flipped or crafted (links, devices, huge members, path escapes). In every case: a
clear BundleError (or ValueError for a name), nothing written outside the cache roots, and the store still
readable. Damaged payloads go through `sources.find` with `bundle.extract`, the path a restoring cell takes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import string
import tarfile
import tempfile

import pytest
import zstandard
from helpers.store import make_bundle, new_manifest, newest, restored_whole
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jupyter_compile_cache.core.machine_fit import MachineFit
from jupyter_compile_cache.storage import bundle, sources
from jupyter_compile_cache.storage.bundle import BundleError, DamagedBundle, Manifest, Member
from jupyter_compile_cache.storage.sources import LocalSource
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.torch_adapter import fingerprint

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _tree(path: str) -> set[str]:
    found = set()
    for root, dirs, files in os.walk(path):
        found |= {os.path.relpath(os.path.join(root, n), path) for n in dirs + files}
    return found


NAMES = [".", "..", "...", "a/b", "a\x00", "x" * 129, "ok-name_1.2", "mlp\n", "..\n"]


@given(st.text(max_size=140) | st.sampled_from(NAMES))
@settings(max_examples=300, deadline=None)
def test_a_bundle_name_is_accepted_only_as_one_safe_path_component(name):
    try:
        checked = bundle.check_name(name)
    except ValueError as exc:
        assert "invalid bundle name" in str(exc)
        return
    assert checked == name and 1 <= len(name) <= 128 and set(name) - set(".") != set()
    assert set(name) <= set(string.ascii_letters + string.digits + "._-"), name  # "mlp\n" was taken, as `$` allows
    root = "/store"
    assert os.path.dirname(os.path.normpath(os.path.join(root, "bundles", name))) == "/store/bundles"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def valid_manifest_json() -> dict:
    return Manifest(
        name="net",
        version=bundle.new_version_id("a" * 12),
        created=1.0,
        writer="w",
        fingerprint={"torch": "x"},
        fingerprint_id="a" * 12,
        payload_sha256="0" * 64,
        payload_bytes=10,
        members=[Member("inductor/ab/x.so", 10, "0" * 64)],
    ).to_json()


@given(data=st.data())
@FAST
def test_any_manifest_json_reads_as_a_manifest_or_is_damaged(valid_manifest_json, data):
    document = dict(valid_manifest_json)
    for _ in range(data.draw(st.integers(0, 3))):
        key = data.draw(st.sampled_from(sorted(document) + ["extra_field"]))
        if data.draw(st.booleans()):
            document.pop(key, None)
        else:
            document[key] = data.draw(_JSON)
    if data.draw(st.booleans()):
        document = data.draw(_JSON)  # not even a manifest's shape
    try:
        manifest = Manifest.from_json(document) if isinstance(document, dict) else Manifest.from_json({})
    except DamagedBundle:
        return
    bundle.check_name(manifest.name)  # what reads as a manifest names a valid bundle and version
    assert bundle.VERSION_RE.fullmatch(manifest.version)
    json.dumps(manifest.to_json(), default=str)  # and writes back


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One real bundle made for this machine; each example damages a copy of its payload."""
    root = tmp_path_factory.mktemp("saved")
    store = LocalStore(str(root / "store"))
    now = fingerprint.current(with_gpu=False)
    manifest = make_bundle(store, "net", size=200_000, files=3, now=now)
    with open(store.payload_path(manifest), "rb") as f:
        return manifest, f.read(), now


def _restore_into_fresh_dirs(manifest: Manifest, payload: bytes, now: dict):
    """A store holding this (maybe damaged) version, and a restore into empty cache roots beside a sentinel."""
    work = tempfile.mkdtemp(prefix="jcc-prop-")
    store = LocalStore(os.path.join(work, "store"))
    os.makedirs(os.path.dirname(store.payload_path(manifest)))
    with open(store.payload_path(manifest), "wb") as f:
        f.write(payload)
    with open(store.manifest_path(manifest), "w") as f:
        json.dump(manifest.to_json(), f)
    roots = {"inductor": os.path.join(work, "cache"), "triton": os.path.join(work, "cache", "triton")}
    os.makedirs(roots["triton"])
    os.makedirs(os.path.join(work, "outside"))
    found = newest("net", [LocalSource(store)], store, _misfit(now), lambda m, p: bundle.extract(p, m, roots))
    return work, store, roots, found


@given(data=st.data())
@FAST
def test_a_truncated_or_bit_flipped_payload_is_refused_and_the_store_stays_readable(saved, data):
    manifest, payload, now = saved
    damaged = bytearray(payload)
    if data.draw(st.booleans(), label="truncate"):
        damaged = damaged[: data.draw(st.integers(0, len(payload) - 1), label="keep")]
    else:
        for _ in range(data.draw(st.integers(1, 4), label="flips")):
            at = data.draw(st.integers(0, len(payload) - 1), label="at")
            damaged[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    assume(bytes(damaged) != payload)
    work, store, roots, found = _restore_into_fresh_dirs(manifest, bytes(damaged), now)
    try:
        assert found.manifest is None and found.installed is None, "a damaged payload was used"
        assert any(s.kind in (sources.SkipKind.DAMAGED, sources.SkipKind.UNSAFE) for s in found.skipped), found.skipped
        assert _tree(roots["inductor"]) == {"triton"}  # nothing restored, no staging left behind
        assert _tree(os.path.join(work, "outside")) == set()
        assert os.path.exists(os.path.join(store.root, "quarantine", "net", manifest.version + ".reason"))
        # the store is still readable and usable: a new save of the same name restores whole
        assert store.versions("net") == [] and store.bundles() == []
        make_bundle(store, "net", now=now)
        again = newest("net", [LocalSource(store)], store, _misfit(now), lambda m, p: bundle.extract(p, m, roots))
        assert again.manifest is not None and restored_whole(again.installed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_undamaged_payload_restores_whole(saved):
    manifest, payload, now = saved
    work, _store, roots, found = _restore_into_fresh_dirs(manifest, payload, now)
    try:
        assert found.manifest is not None and restored_whole(found.installed)
    finally:
        shutil.rmtree(work, ignore_errors=True)


_NAMES = st.sampled_from(
    [
        "inductor/ab/x.so",
        "inductor/fxgraph/k/e",
        "triton/h/k.cubin",
        "../escape",
        "inductor/../../escape",
        "/etc/passwd",
        "inductor//x",
        "inductor/./x",
        "elsewhere/x",
        "inductor",
        "inductor\\..\\x",
        "triton/../../../tmp/x",
    ]
)
_KINDS = st.sampled_from(["file", "symlink", "hardlink", "dir", "fifo", "chardev", "huge"])


def _crafted(entries: list[tuple[str, str, bytes]]) -> tuple[bytes, list[Member]]:
    """A zstd tar stream of crafted entries (name, kind, data) and the members a forger would list for them."""
    raw = io.BytesIO()
    members = []
    truncated = False
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "huge":  # the header claims a terabyte, the stream ends after a few bytes
                info.size = 1 << 40
                raw.write(info.tobuf(tarfile.PAX_FORMAT))
                raw.write(data)
                truncated = True
                break
            else:
                info.type = {
                    "symlink": tarfile.SYMTYPE,
                    "hardlink": tarfile.LNKTYPE,
                    "dir": tarfile.DIRTYPE,
                    "fifo": tarfile.FIFOTYPE,
                    "chardev": tarfile.CHRTYPE,
                }[kind]
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            members.append(Member(name, info.size if kind != "huge" else 1 << 40, hashlib.sha256(data).hexdigest()))
        if truncated:
            tar.fileobj = io.BytesIO()  # never write the end-of-archive blocks
    return zstandard.ZstdCompressor().compress(raw.getvalue()), members


@given(
    entries=st.lists(st.tuples(_NAMES, _KINDS, st.binary(max_size=64)), min_size=1, max_size=4),
    listed=st.sampled_from(["as_crafted", "none", "safe_decoy"]),
    fmt=st.sampled_from([1, 2]),
)
@FAST
def test_a_crafted_archive_is_refused_or_restores_only_regular_files_inside_the_roots(entries, listed, fmt):
    if fmt == 1:  # a tar stream, as older versions wrote: its own headers name, size and type each entry
        payload, members = _crafted(entries)
    else:  # a pack: the manifest alone names and cuts the bytes
        payload = b"".join(data for _name, _kind, data in entries)
        members = [Member(name, len(data), hashlib.sha256(data).hexdigest()) for name, _kind, data in entries]
    if listed == "none":
        members = []
    elif listed == "safe_decoy":
        members = [Member("inductor/ab/decoy.so", 3, hashlib.sha256(b"abc").hexdigest())]
    manifest = new_manifest("net", writer="forger")
    manifest.payload_sha256, manifest.payload_bytes = hashlib.sha256(payload).hexdigest(), len(payload)
    manifest.members = members
    manifest.format = fmt
    work = tempfile.mkdtemp(prefix="jcc-craft-")
    try:
        roots = {"inductor": os.path.join(work, "cache"), "triton": os.path.join(work, "cache", "triton")}
        os.makedirs(roots["triton"])
        os.makedirs(os.path.join(work, "outside"))
        try:
            with open(os.path.join(work, "payload"), "w+b") as f:
                f.write(payload)
                f.seek(0)
                written = bundle.extract(f, manifest, roots)
        except BundleError as exc:
            assert str(exc)
            assert _tree(roots["inductor"]) == {"triton"}  # refused: nothing restored, staging removed
        else:  # a well-formed bundle after all: only its listed regular files, inside the roots
            assert sorted(os.path.relpath(p, work) for p in written) == sorted(
                os.path.join("cache", m.name.split("/", 1)[1])
                if m.name.startswith("inductor/")
                else os.path.join("cache", "triton", m.name.split("/", 1)[1])
                for m in members
            )
            assert all(os.path.isfile(p) and not os.path.islink(p) for p in written)
        assert set(os.listdir(work)) == {"cache", "outside", "payload"}
        assert os.listdir(os.path.join(work, "outside")) == []
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _misfit(now):
    return MachineFit(now).mismatches
