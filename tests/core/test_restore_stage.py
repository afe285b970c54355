"""restore_stage.py: the newest version that fits is restored and told; a version asked for by id restores alone,
the others passed over without a word; an id no version has is said once; a version a restore installed
is passed over by the next restore, in this kernel or after a restart, while its files are untouched; in a real
session over a real store."""

from __future__ import annotations

import io
import os

from helpers.store import make_bundle, restored_whole

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends.reporter import TextReporter
from jupyter_compile_cache.torch_adapter import fingerprint


def _session(tmp_path, monkeypatch) -> tuple[CompileCacheSession, list]:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    session = CompileCacheSession(
        store_dir=str(tmp_path / "store"), reporter=TextReporter(io.StringIO(), io.StringIO())
    )
    told: list = []
    session.listeners.append(told.append)
    return session, told


def test_the_newest_restores_and_a_version_asked_for_restores_alone(tmp_path, monkeypatch):
    session, told = _session(tmp_path, monkeypatch)
    here = fingerprint.current(with_gpu=False)
    older, newer = (make_bundle(session.store(), "net", now=here) for _ in range(2))
    result = session.restore("net")
    assert (result.version, result.source, result.skipped) == (newer.version, "local", [])
    assert restored_whole(session.restore_stage.restored_paths["net"])
    pinned = session.restore("net", options=CellOptions(version=older.version))
    assert (pinned.version, pinned.skipped) == (older.version, [])  # the newer one, not asked for, is no news
    assert [e.name for e in told if isinstance(e, events.Restored)] == ["net", "net"]
    assert not [e for e in told if isinstance(e, (events.NotRestored, events.SkippedVersion))]
    session.close()


def test_an_id_no_version_has_is_said_once_with_nothing_restored(tmp_path, monkeypatch):
    session, told = _session(tmp_path, monkeypatch)
    make_bundle(session.store(), "net", now=fingerprint.current(with_gpu=False))
    result = session.restore("net", options=CellOptions(version="nosuchid"))
    assert not result.restored and result.skipped == []
    assert [e for e in told if isinstance(e, events.NotRestored)] == [events.NotRestored("net", (), (), "nosuchid")]
    session.close()


def test_a_version_installed_and_untouched_is_passed_over_by_the_next_restore_and_the_next_kernel(
    tmp_path, monkeypatch
):
    session, _told = _session(tmp_path, monkeypatch)
    make_bundle(session.store(), "net", now=fingerprint.current(with_gpu=False))
    first = session.restore("net")
    paths = session.restore_stage.restored_paths["net"]
    inodes = {p: os.stat(p).st_ino for p in paths}  # an extraction replaces each file: a new inode
    again = session.restore("net")
    assert again.version == first.version and session.restore_stage.restored_paths["net"] == paths
    assert {p: os.stat(p).st_ino for p in paths} == inodes
    session.close()
    restarted, _told = _session(tmp_path, monkeypatch)  # a kernel after a restart, on the same store and cache dir
    assert restarted.restore("net").version == first.version
    assert {p: os.stat(p).st_ino for p in paths} == inodes
    with open(paths[0], "ab") as f:  # written since: the version is extracted again, and whole
        f.write(b"changed")
    assert restarted.restore("net").version == first.version and restored_whole(paths)
    assert os.stat(paths[0]).st_ino != inodes[paths[0]]
    restarted.close()
