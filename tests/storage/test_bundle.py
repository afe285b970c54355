"""Bundle payloads: round trip (format 2 packs, and format 1 tars as older versions wrote them), integrity checks,
and refusal of hostile payloads (nothing written outside)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile

import pytest
import zstandard
from helpers.legacy_bundle import write_tar_payload

from jupyter_compile_cache.storage import bundle
from jupyter_compile_cache.storage.bundle import DamagedBundle, Manifest, Member, UnsafeBundle


def _manifest(members, sha, size, fmt=1):
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
        format=fmt,
        compression="zstd" if fmt == 1 else "none",
    )


def _payload(tmp_path, files: dict[str, bytes], fmt=2):
    paths = {}
    for name, data in files.items():
        p = tmp_path / "src" / name.replace("/", "_")
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
        paths[name] = str(p)
    with open(tmp_path / f"payload-{len(os.listdir(tmp_path))}", "w+b") as out:
        members, sha, size = (bundle.write_pack if fmt == 2 else write_tar_payload)(paths, out)
        out.seek(0)
        return out.read(), _manifest(members, sha, size, fmt)


def _file(tmp_path, data: bytes):
    """A payload as a restore meets it: an open file."""
    path = tmp_path / f"payload-{len(os.listdir(tmp_path))}"
    path.write_bytes(data)
    return open(path, "rb")


FORMATS = pytest.mark.parametrize("fmt", [2, 1], ids=["pack", "tar"])


def _hostile_payload(entries) -> tuple[bytes, str]:
    """A zstd tar built by hand, with whatever member types and names a hostile hub could send."""
    raw = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(raw, closefd=False) as z, tarfile.open(fileobj=z, mode="w|") as t:
        for info, data in entries:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    payload = raw.getvalue()
    return payload, hashlib.sha256(payload).hexdigest()


@FORMATS
def test_round_trip_restores_every_file(tmp_path, fmt):
    files = {"inductor/fxgraph/ab/key/entry": b"graph" * 100, "inductor/ab/cab.so": os.urandom(5000)}
    payload, manifest = _payload(tmp_path, files, fmt)
    cache = tmp_path / "cache"
    cache.mkdir()
    written = bundle.extract(_file(tmp_path, payload), manifest, {"inductor": str(cache)})
    assert len(written) == 2
    assert (cache / "fxgraph/ab/key/entry").read_bytes() == files["inductor/fxgraph/ab/key/entry"]
    assert (cache / "ab/cab.so").read_bytes() == files["inductor/ab/cab.so"]
    assert not [p for p in os.listdir(cache) if p.startswith(".jcc-staging")]


@FORMATS
def test_corrupted_member_is_detected_and_nothing_is_written(tmp_path, fmt):
    payload, manifest = _payload(tmp_path, {"inductor/a/x.py": b"print(1)", "inductor/b/y.py": b"print(2)"}, fmt)
    manifest.members[1] = Member(manifest.members[1].name, manifest.members[1].size, "0" * 64)
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(DamagedBundle, match="sha256"):
        bundle.extract(_file(tmp_path, payload), manifest, {"inductor": str(cache)})
    assert os.listdir(cache) == []


@FORMATS
def test_truncated_payload_is_damaged(tmp_path, fmt):
    payload, manifest = _payload(tmp_path, {"inductor/a/x.so": os.urandom(200_000)}, fmt)
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(DamagedBundle):
        bundle.extract(_file(tmp_path, payload[: len(payload) // 2]), manifest, {"inductor": str(cache)})
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
        bundle.extract(_file(tmp_path, b""), manifest, {"inductor": str(cache)})
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
        bundle.extract(_file(tmp_path, payload), _manifest(members, sha, len(payload)), {"inductor": str(cache)})
    assert os.listdir(cache) == []  # even the good member was not written


def test_member_missing_from_manifest_is_refused(tmp_path):
    info = tarfile.TarInfo("inductor/a/smuggled.py")
    info.size = 1
    payload, sha = _hostile_payload([(info, b"x")])
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(UnsafeBundle, match="not in the manifest"):
        bundle.extract(_file(tmp_path, payload), _manifest([], sha, len(payload)), {"inductor": str(cache)})
    assert os.listdir(cache) == []


@FORMATS
def test_symlinked_directory_inside_the_cache_cannot_redirect_writes(tmp_path, fmt):
    payload, manifest = _payload(tmp_path, {"inductor/evil/x.py": b"x"}, fmt)
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir()
    outside.mkdir()
    os.symlink(outside, cache / "evil")
    with pytest.raises(UnsafeBundle, match="outside"):
        bundle.extract(_file(tmp_path, payload), manifest, {"inductor": str(cache)})
    assert os.listdir(outside) == []


def test_a_pack_with_bytes_moved_between_members_or_extra_bytes_is_damaged(tmp_path):
    files = {"inductor/a/x.py": b"first", "inductor/b/y.py": b"second"}
    payload, manifest = _payload(tmp_path, files)
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(DamagedBundle, match="payload has"):
        bundle.extract(_file(tmp_path, payload + b"!"), manifest, {"inductor": str(cache)})
    shifted = Manifest.from_json(manifest.to_json())
    shifted.members[0].size += 1  # the same bytes, cut elsewhere
    with pytest.raises(DamagedBundle, match="sha256"):
        bundle.extract(_file(tmp_path, payload + b"!"), shifted, {"inductor": str(cache)})
    assert os.listdir(cache) == []


def test_a_pack_is_written_in_order_and_skips_files_that_vanished(tmp_path):
    big = os.urandom((3 << 20) + 5)  # several pieces of a copy
    src = tmp_path / "src"
    src.mkdir()
    paths = {}
    for name, data in {"inductor/b/big.so": big, "inductor/a/small.py": b"x" * 10, "inductor/c/z": b"z"}.items():
        paths[name] = str(src / name.replace("/", "_"))
        (src / name.replace("/", "_")).write_bytes(data)
    paths["inductor/d/gone"] = str(src / "never-written")
    with open(tmp_path / "pack", "w+b") as out:
        members, digest, size = bundle.write_pack(paths, out)
    assert [m.name for m in members] == ["inductor/a/small.py", "inductor/b/big.so", "inductor/c/z"]
    assert (tmp_path / "pack").read_bytes() == b"x" * 10 + big + b"z" and size == len(b"x" * 10 + big + b"z")
    assert members[1].sha256 == hashlib.sha256(big).hexdigest() and digest == bundle.members_digest(members)


def test_a_format_2_manifest_whose_member_list_was_edited_is_damaged(tmp_path):
    _payload_bytes, manifest = _payload(tmp_path, {"inductor/a/x.py": b"x"})
    data = manifest.to_json()
    data["members"][0]["name"] = "inductor/a/other.py"
    with pytest.raises(DamagedBundle, match="member list"):
        Manifest.from_json(data)


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


def test_members_can_be_placed_under_other_names_checked_like_members(tmp_path):
    # another version's precompile entries go beside torch's own, everything else where it always goes
    files = {"inductor/dynamo/key1/entry": b"entry", "inductor/ab/cab.so": b"so"}
    payload, manifest = _payload(tmp_path, files)
    cache = tmp_path / "cache"
    cache.mkdir()

    def aside(name: str) -> str:
        return name.replace("inductor/dynamo/", "inductor/dynamo/.jcc-versions/v1/")

    bundle.extract(_file(tmp_path, payload), manifest, {"inductor": str(cache)}, None, aside)
    assert (cache / "dynamo/.jcc-versions/v1/key1/entry").read_bytes() == b"entry"
    assert (cache / "ab/cab.so").read_bytes() == b"so" and not (cache / "dynamo/key1").exists()
    with pytest.raises(UnsafeBundle):
        bundle.extract(_file(tmp_path, payload), manifest, {"inductor": str(cache)}, None, lambda n: "inductor/../x")


def test_short_ids_are_what_people_type():
    versions = [bundle.new_version_id("a" * 12) for _ in range(3)]
    ids = [bundle.short_id(v) for v in versions]
    assert all(len(i) == 7 for i in ids) and len(set(ids)) == 3
    for version, short in zip(versions, ids):
        assert bundle.matching_versions(versions, short) == [version]  # the short id
        assert bundle.matching_versions(versions, version) == [version]  # the whole id
    assert bundle.matching_versions(versions, versions[0][:4]) == versions  # a prefix of all three: ambiguous
    assert bundle.matching_versions(versions, "zzzz") == [] and bundle.matching_versions(versions, " ") == []
