"""tables.py: `explain`, `list` and `stats` as text in a terminal and as HTML tables in a notebook, from the records
commands.py returns for a real store."""

from __future__ import annotations

from helpers.store import make_bundle

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends import tables
from jupyter_compile_cache.storage.bundle import short_id
from jupyter_compile_cache.torch_adapter import fingerprint


def test_explain_is_a_heading_and_a_table_per_version_as_text_and_as_html(tmp_path):
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    here = make_bundle(session.store(), "net", now=fingerprint.current())
    elsewhere = make_bundle(session.store(), "net", now={**fingerprint.current(), "torch": "1.0"})
    view = tables.Explanation(Commands(session).explain("net"))
    text, page = repr(view), view._repr_html_()
    for version, verdict in ((here.version, "WOULD RESTORE"), (elsewhere.version, "would NOT restore")):
        assert f"version {short_id(version)}" in text and verdict in text  # the id people type
        assert f"version {short_id(version)}" in page
    assert "MISMATCH (blocks)" in text and "no recorded run of this cell" in text
    assert page.count("<table>") == 2 and "<th>verdict</th>" in page and "MISMATCH (blocks)" in page
    assert max(len(line) for line in text.splitlines()) < 200  # the verdict comes before the long values


def test_list_ends_with_totals_and_stats_read_as_a_table(tmp_path):
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    make_bundle(session.store(), "a", now=fingerprint.current())
    make_bundle(session.store(), "b", now=fingerprint.current())
    listing = tables.BundleTable(Commands(session).bundles())
    assert repr(listing).splitlines()[-1].startswith("local: 2 versions of 2 bundles")
    assert "<table>" in listing._repr_html_()
    stats = tables.StatsView(Commands(session).stats())
    assert "store size" in repr(stats) and "<table>" in stats._repr_html_()


def test_explain_does_not_promise_a_restore_whose_code_its_last_run_refused(tmp_path):
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    store = session.store()
    here = make_bundle(store, "net", now=fingerprint.current())
    from jupyter_compile_cache.core.records import CellReport, RestoreResult

    restored = RestoreResult("net", source="local", version=here.version)
    store.save_run("net", CellReport("net", restore=restored, stale_rejected=2).to_json())
    text = repr(tables.Explanation(Commands(session).explain("net")))
    assert f"version {short_id(here.version)}" in text and "WOULD RESTORE" not in text
    assert "its last restore refused 2 entries whose code had changed" in text


def test_tables_fit_the_terminal_and_elide_instead_of_wrapping(tmp_path, monkeypatch):
    """In an 80-column terminal no line of `list` or `explain` runs past 80 columns: long values lose their middle
    ('…'), headings wrap between words, numbers stay whole."""
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    long_writer = {**fingerprint.current(), "torch": "9.9"}
    make_bundle(session.store(), "a-bundle-with-a-long-name", now=fingerprint.current())
    make_bundle(session.store(), "a-bundle-with-a-long-name", now=long_writer)
    for columns in (80, 100):
        monkeypatch.setenv("COLUMNS", str(columns))
        listing = repr(tables.BundleTable(Commands(session).bundles()))
        explained = repr(tables.Explanation(Commands(session).explain("a-bundle-with-a-long-name")))
        for text in (listing, explained):
            lines = [line for line in text.splitlines() if str(tmp_path) not in line]  # a path is never broken
            assert max(len(line) for line in lines) <= columns, text
        assert "…" in explained and "cpu_isa" in explained  # a long value elided, its field named whole
    monkeypatch.setenv("COLUMNS", "300")
    assert "…" not in repr(tables.BundleTable(Commands(session).bundles()))
