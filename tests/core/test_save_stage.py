"""save_stage.py: the store's size cap after a save, and every cell's one ending (its run kept in the store it
named, statistics that cannot be kept told once), in a real session over real stores."""

from __future__ import annotations

import io
import os
import time

from helpers.store import make_bundle

from jupyter_compile_cache.core import events
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.records import CellReport
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends.reporter import TextReporter
from jupyter_compile_cache.storage.store import LocalStore


def test_the_least_recently_used_version_past_the_cap_is_evicted_and_told(tmp_path, monkeypatch):
    store = LocalStore(str(tmp_path / "s"))
    old = make_bundle(store, "old", size=200_000)
    past = time.time() - 3600
    os.utime(store.manifest_path(old), (past, past))
    new = make_bundle(store, "new", size=200_000)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_MAX_SIZE", str(new.payload_bytes + 1000))
    out = io.StringIO()
    session = CompileCacheSession(store_dir=store.root, reporter=TextReporter(out, io.StringIO()))
    told: list = []
    session.listeners.append(told.append)
    session.save_stage.enforce_size_cap(store, CellReport("new"), quiet=False)
    assert store.versions("old") == [] and store.versions("new")
    assert [e for e in told if isinstance(e, events.Evicted)] == [events.Evicted(1, ("old",), new.payload_bytes + 1000)]
    assert "evicted 1 least recently used version (old)" in out.getvalue()
    session.close()


def test_the_ending_keeps_the_run_in_the_store_the_cell_named_and_tells_its_line(tmp_path):
    session = CompileCacheSession(
        store_dir=str(tmp_path / "default"), reporter=TextReporter(io.StringIO(), io.StringIO())
    )
    told: list = []
    session.listeners.append(told.append)
    named = str(tmp_path / "named")
    ok, failed = CellReport("net", body_seconds=0.5), CellReport("bad", ok=False, body_seconds=0.1)
    for report in (ok, failed):
        session.save_stage.end(report, CellOptions(store_dir=named))
    assert session.history == [ok, failed] and all(r.finished for r in (ok, failed))
    assert LocalStore(named).last_run("net") is not None  # a run that raised is not kept as the last run
    assert LocalStore(named).last_run("bad") is None
    assert LocalStore(named).read_stats().counts["cells"] == 2  # the failed cell's too, in the store it named
    assert LocalStore(session.store().root).read_stats().counts["cells"] == 0
    assert [e.report for e in told if isinstance(e, events.CellFinished)] == [ok, failed]
    session.close()


def test_statistics_a_store_cannot_take_are_told_once_and_the_cell_ends(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the store's folder should be")
    err = io.StringIO()
    session = CompileCacheSession(store_dir=str(tmp_path / "s"), reporter=TextReporter(io.StringIO(), err))
    for _ in range(2):
        session.save_stage.end(CellReport("net", body_seconds=0.1), CellOptions(store_dir=str(blocked)))
    assert len(session.history) == 2
    failed = [line for line in err.getvalue().splitlines() if "statistics" in line]
    assert len(failed) == 1, err.getvalue()
    session.close()
