"""session.py: the cell flow around torch, in this process (real files, a real store; nothing compiles here)."""

from __future__ import annotations

import os

from helpers.store import make_bundle, restored_whole

from jupyter_compile_cache.core.records import CellOptions
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.torch_adapter import fingerprint


def _files(root):
    return {os.path.join(d, f): os.stat(os.path.join(d, f)).st_ino for d, _, fs in os.walk(root) for f in fs}


def test_restoring_then_running_the_cell_passes_over_the_bundle_once(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    make_bundle(session.store(), "twice", size=200_000, files=4, now=fingerprint.current())
    first = session.restore("twice", quiet=True)
    assert first.restored and first.files == 5
    extracted = _files(cache)
    with session.cell("twice", CellOptions(quiet=True, save=False)) as report:
        pass
    assert report.restore.restored and report.restore.version == first.version
    after = _files(cache)  # (the cell may add torch's CPU probe programs beside them)
    assert {p: after[p] for p in extracted} == extracted  # not written again: a new extraction makes new inodes

    # a file changed since (torch rewrote it, a user deleted it): that version is extracted again, whole
    victim = next(p for p in extracted if p.endswith("k1.so"))
    with open(victim, "ab") as f:
        f.write(b"changed")
    os.unlink(next(p for p in extracted if p.endswith("k2.so")))
    again = session.restore("twice", quiet=True)
    assert again.restored and restored_whole(list(extracted))
    assert _files(cache)[victim] != extracted[victim]
    session.close()


def test_a_view_that_fails_is_told_once_and_the_cell_stands(tmp_path, monkeypatch):
    import io

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    err = io.StringIO()
    from jupyter_compile_cache.frontends.reporter import TextReporter

    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter(io.StringIO(), err))
    seen = []

    def broken(report):
        seen.append(report.name)
        raise RuntimeError("the widget is gone")

    session.listeners.append(broken)
    for name in ("one", "two"):
        with session.cell(name, CellOptions(quiet=True)) as report:
            pass
        assert report.ok
    assert seen == ["one"] and session.listeners == []
    assert err.getvalue().count("a view of this session stopped updating (RuntimeError: the widget is gone)") == 1
    assert [r.name for r in session.history] == ["one", "two"]


def test_an_unreadable_manifest_beside_a_good_version_is_told_once_and_the_good_one_restores(tmp_path, monkeypatch):
    import io

    from jupyter_compile_cache.frontends.reporter import TextReporter
    from jupyter_compile_cache.storage.bundle import new_version_id

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    out, err = io.StringIO(), io.StringIO()
    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter(out, err))
    good = make_bundle(session.store(), "net", now=fingerprint.current())
    broken = os.path.join(os.path.dirname(session.store().manifest_path(good)), new_version_id("f" * 12) + ".json")
    with open(broken, "w") as f:
        f.write("{not json")
    result = session.restore("net")
    assert result.restored and result.version == good.version
    assert err.getvalue().count("unreadable manifest, quarantined") == 1, err.getvalue()
    assert "restored 'net'" in out.getvalue()
    session.close()
