"""Bundle payloads: round trip, integrity checks, and refusal of hostile archives (nothing written outside)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import pytest
import zstandard

from jupyter_compile_cache.storage import bundle
from jupyter_compile_cache.storage.bundle import DamagedBundle, Manifest, Member, UnsafeBundle


def _manifest(members, sha, size):
    return Manifest(
        name="t",
        version=bundle.new_version_id("0" * 12),
        created=0.0,
        writer="w",
        fingerprint={},
        fingerprint_id="0" * 12,
        payload_sha256=sha,
        payload_bytes=size,
        members=members,
    )


def _payload(tmp_path, files: dict[str, bytes]):
    paths = {}
    for name, data in files.items():
        p = tmp_path / "src" / name.replace("/", "_")
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
        paths[name] = str(p)
    out = io.BytesIO()
    members, sha, size = bundle.write_payload(paths, out)
    return out.getvalue(), _manifest(members, sha, size)


def _hostile_payload(entries) -> tuple[bytes, str]:
    """A zstd tar built by hand, with whatever member types and names a hostile hub could send."""
    raw = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(raw, closefd=False) as z, tarfile.open(fileobj=z, mode="w|") as t:
        for info, data in entries:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    payload = raw.getvalue()
    return payload, hashlib.sha256(payload).hexdigest()


def test_round_trip_restores_every_file(tmp_path):
    files = {"inductor/fxgraph/ab/key/entry": b"graph" * 100, "inductor/ab/cab.so": os.urandom(5000)}
    payload, manifest = _payload(tmp_path, files)
    cache = tmp_path / "cache"
    cache.mkdir()
    written = bundle.extract(io.BytesIO(payload), manifest, {"inductor": str(cache)})
    assert len(written) == 2
    assert (cache / "fxgraph/ab/key/entry").read_bytes() == files["inductor/fxgraph/ab/key/entry"]
    assert (cache / "ab/cab.so").read_bytes() == files["inductor/ab/cab.so"]
    assert not [p for p in os.listdir(cache) if p.startswith(".jcc-staging")]


def test_corrupted_member_is_detected_and_nothing_is_written(tmp_path):
    payload, manifest = _payload(tmp_path, {"inductor/a/x.py": b"print(1)", "inductor/b/y.py": b"print(2)"})
    manifest.members[1] = Member(manifest.members[1].name, manifest.members[1].size, "0" * 64)
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(DamagedBundle, match="sha256"):
        bundle.extract(io.BytesIO(payload), manifest, {"inductor": str(cache)})
    assert os.listdir(cache) == []


def test_truncated_payload_is_damaged(tmp_path):
    payload, manifest = _payload(tmp_path, {"inductor/a/x.so": os.urandom(200_000)})
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(DamagedBundle):
        bundle.extract(io.BytesIO(payload[: len(payload) // 2]), manifest, {"inductor": str(cache)})
    assert os.listdir(cache) == []


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "inductor/../../escape",
        "inductor/a/../../escape",
        "other/x",
        "inductor",
        "inductor//x",
        "inductor\\..\\x",
    ],
)
def test_unsafe_member_names_are_refused_before_anything_is_written(tmp_path, name):
    manifest = _manifest([Member(name, 1, "0" * 64)], "0" * 64, 1)
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(UnsafeBundle):
        bundle.extract(io.BytesIO(b""), manifest, {"inductor": str(cache)})
    assert os.listdir(cache) == []
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE, tarfile.DIRTYPE])
def test_links_devices_and_directories_refuse_the_whole_bundle(tmp_path, kind):
    good = tarfile.TarInfo("inductor/a/good.py")
    good.size = 3
    bad = tarfile.TarInfo("inductor/a/bad")
    bad.type = kind
    bad.linkname = "/etc/passwd"
    payload, sha = _hostile_payload([(good, b"abc"), (bad, None)])
    members = [Member("inductor/a/good.py", 3, hashlib.sha256(b"abc").hexdigest()), Member("inductor/a/bad", 0, "")]
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(UnsafeBundle, match="not a regular file"):
        bundle.extract(io.BytesIO(payload), _manifest(members, sha, len(payload)), {"inductor": str(cache)})
    assert os.listdir(cache) == []  # even the good member was not written


def test_member_missing_from_manifest_is_refused(tmp_path):
    info = tarfile.TarInfo("inductor/a/smuggled.py")
    info.size = 1
    payload, sha = _hostile_payload([(info, b"x")])
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(UnsafeBundle, match="not in the manifest"):
        bundle.extract(io.BytesIO(payload), _manifest([], sha, len(payload)), {"inductor": str(cache)})
    assert os.listdir(cache) == []


def test_symlinked_directory_inside_the_cache_cannot_redirect_writes(tmp_path):
    payload, manifest = _payload(tmp_path, {"inductor/evil/x.py": b"x"})
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    os.symlink(outside, cache / "evil")
    with pytest.raises(UnsafeBundle, match="outside"):
        bundle.extract(io.BytesIO(payload), manifest, {"inductor": str(cache)})
    assert os.listdir(outside) == []


def test_manifest_with_bad_version_or_format_is_damaged():
    payload = {"format": 1, "name": "ok", "version": "../../x", "members": []}
    with pytest.raises(DamagedBundle):
        Manifest.from_json(payload)
    with pytest.raises(DamagedBundle, match="format"):
        Manifest.from_json({"format": 99})


def test_classify_separates_gpu_and_cpu_kernels():
    assert bundle.classify([Member("inductor/ab/c.so", 1, "")]) == (False, True)
    assert bundle.classify([Member("inductor/triton/0/x/k.cubin", 1, "")]) == (True, False)
    assert bundle.classify([Member("inductor/fxgraph/a/b/c", 1, "")]) == (False, False)
