"""bundle_file.py: one version as one file, and what an import refuses."""

from __future__ import annotations

import io
import tarfile

import pytest
from helpers.store import make_bundle

from jupyter_compile_cache.storage import bundle_file
from jupyter_compile_cache.storage.bundle import BundleError
from jupyter_compile_cache.storage.store import LocalStore


def test_export_then_import_elsewhere_is_the_same_version_and_a_second_import_is_no_new_one(tmp_path):
    mine, theirs = LocalStore(str(tmp_path / "mine")), LocalStore(str(tmp_path / "theirs"))
    manifest = make_bundle(mine, "net", size=50_000)
    path = str(tmp_path / "net.jcc")
    bundle_file.export_bundle(mine, manifest, path)
    imported, new = bundle_file.import_bundle(theirs, path)
    assert new and imported.version == manifest.version and imported.payload_sha256 == manifest.payload_sha256
    with open(theirs.payload_path(imported), "rb") as a, open(mine.payload_path(manifest), "rb") as b:
        assert a.read() == b.read()
    again, new = bundle_file.import_bundle(theirs, path)
    assert not new and again.version == manifest.version and len(theirs.versions("net")) == 1


def _tar(path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def test_files_that_are_not_an_export_are_refused_and_the_store_is_untouched(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    source = LocalStore(str(tmp_path / "source"))
    manifest = make_bundle(source, "net", size=5_000)
    good = tmp_path / "good.jcc"
    bundle_file.export_bundle(source, manifest, str(good))
    with tarfile.open(good) as tar:
        parts = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    (tmp_path / "text").write_text("hello")
    cases = {
        "not a tar": str(tmp_path / "text"),
        "an extra member": _tar(tmp_path / "extra.jcc", {**parts, "evil.py": b"import os"}),
        "no payload": _tar(tmp_path / "nopayload.jcc", {"manifest.json": parts["manifest.json"]}),
        "another format's payload": _tar(
            tmp_path / "format.jcc", {"manifest.json": parts["manifest.json"], "payload.tar.zst": b"x"}
        ),
        "an altered payload": _tar(
            tmp_path / "altered.jcc", {"manifest.json": parts["manifest.json"], "payload.pack": b"y" * 5_000}
        ),
    }
    for case, path in cases.items():
        with pytest.raises((BundleError, OSError)):
            bundle_file.import_bundle(store, path)
        assert store.versions("net") == [], case
