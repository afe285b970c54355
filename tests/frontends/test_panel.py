"""The widget panel's state in plain pytest: real session, real torch config, real compile on the CPU."""

from __future__ import annotations

import html
import re

import pytest
import torch

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.records import short_id
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends.panel import Panel
from jupyter_compile_cache.frontends.tables import STATUS_HEADERS, StatusView


def _grid_rows(grid):
    """A GridBox's rows after its header, each cell's text (an HTML cell without its markup; a widget as itself)."""
    width = len(re.findall(r"minmax\([^)]*\)|\S+", grid.layout.grid_template_columns))
    cells = grid.children
    assert len(cells) % width == 0  # a full grid: every column lines up
    rows = [cells[i : i + width] for i in range(width, len(cells), width)]
    return [[html.unescape(re.sub(r"<[^>]+>", "", c.value)) if hasattr(c, "value") and isinstance(c.value, str)
             else c for c in row] for row in rows]  # fmt: skip


def _row(panel, title):
    """A layer's row, by the status table's headers (its "enabled" cell: the toggle)."""
    for row in _grid_rows(panel.layer_box):
        if row[1] == title:
            return dict(zip(STATUS_HEADERS, row))
    raise AssertionError(title)


def _bundle_names(panel):
    return [row[0] for row in _grid_rows(panel.bundle_box)]


@pytest.fixture
def session(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JUPYTER_COMPILE_CACHE_HUB", raising=False)
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    yield session
    session.close()  # puts torch back: the next test's session patches torch afresh


def test_toggle_flips_torchs_switch_and_says_so(session):
    import torch._inductor.config as inductor_config

    panel = Panel(session)
    before = inductor_config.fx_graph_cache
    try:
        panel.toggles["fx_graph"].value = not before
        assert inductor_config.fx_graph_cache is (not before)
        assert "fx_graph_cache = " in panel.messages.outputs[-1]["text"]
        panel.toggles["fx_graph"].value = before
        assert inductor_config.fx_graph_cache is before
    finally:
        inductor_config.fx_graph_cache = before
    assert panel.toggles["kernels"].disabled  # no torch switch: shown, not clickable


def test_panel_refreshes_after_a_cell_and_delete_needs_confirmation(session):
    panel = Panel(session)
    assert "no bundles yet" in panel.bundle_note.value and _bundle_names(panel) == []
    misses_before = _row(panel, "FX graph")["misses"]
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    with session.cell("paneltest", CellOptions(quiet=True)), torch.no_grad():
        torch.compile(model)(torch.randn(4, 16))
    # the session listener updated the panel: new counters and the new bundle
    assert _row(panel, "FX graph")["misses"] != misses_before or _row(panel, "Dynamo precompile")["misses"] != "0"
    assert _bundle_names(panel) == ["paneltest"] and "no bundles yet" not in panel.bundle_note.value
    # the layers' files in the store add up to the store's size, with the archive headers
    rows = {row[1]: row for row in _grid_rows(panel.layer_box)}
    sizes = [int(re.search(r'data-(?:bytes|other|total)="(\d+)"', c.value).group(1))
             for c in panel.layer_box.children if re.search(r'data-(?:bytes|other|total)="', str(c.value))]  # fmt: skip
    assert sum(sizes[:-1]) == sizes[-1] == session.store().usage()[0] > 0, (sizes, rows)
    # one status table: the panel's is `status`'s, but for the toggles and the switches' last names
    status = Commands(session).status(wait=True)
    shown = [{h: str(v) for h, v in zip(STATUS_HEADERS, row) if h not in ("enabled", "torch switch")}
             for row in _grid_rows(panel.layer_box)]  # fmt: skip
    told = [{h: str(v) for h, v in zip(STATUS_HEADERS, row) if h not in ("enabled", "torch switch")}
            for row in StatusView(status).rows()]  # fmt: skip
    assert shown == told and told[-1]["layer"] == "total: the local store" and told[-1]["saved"].endswith(" s")
    panel.bundle_buttons[("local", "paneltest", session.store().versions("paneltest")[0].version, "delete")].click()
    assert session.store().versions("paneltest")  # not yet: asks first
    yes, _no = panel.confirm_buttons
    yes.click()
    assert session.store().versions("paneltest") == []
    assert "removed 1 version from" in panel.messages.outputs[-1]["text"]  # worded as `rm` words it


def test_errors_in_callbacks_are_shown_in_the_panel(session):
    panel = Panel(session)
    panel._guarded(lambda: 1 / 0)()
    assert "ZeroDivisionError" in panel.messages.outputs[-1]["text"]


def test_bundles_show_age_and_use_push_needs_a_hub_and_gc_previews_before_it_removes(session, monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    with session.cell("panelgc", CellOptions(quiet=True)), torch.no_grad():
        torch.compile(model)(torch.randn(2, 8))
    # the same cell again, in a fresh cache dir: restored, and the chart's restored time includes the restore
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(session.store().root + "-cache2"))
    with session.cell("panelgc", CellOptions(quiet=True)) as again, torch.no_grad():
        torch.compile(model)(torch.randn(2, 8))
    assert again.restore is not None and again.restore.restored
    (cell,) = Commands(session).time_saved().cells
    assert cell.restored == again.body_seconds + again.restore.seconds + again.restore.pull_seconds

    panel = Panel(session)
    assert "of the 20.0 GB cap" in panel.header.value
    (row,) = [r for r in _grid_rows(panel.bundle_box) if r[0] == "panelgc"]
    name, where, version, _size, made, _writer, fits, _buttons = row
    assert (where, version, fits) == ("local", short_id(again.saved_version or again.restore.version), "yes")
    assert re.fullmatch(r"\d+s ago", made)
    actions = {key[-1] for key in panel.bundle_buttons}
    assert "push" not in actions and {"restore", "delete", "explain"} == actions  # no hub: nothing to push to

    panel.free_button.click()  # everything here restores on this machine and is under the cap
    assert "nothing to remove" in panel.messages.outputs[-1]["text"] and panel._pending_gc is None
    panel.clear_button.click()
    assert "would remove 1 version" in panel.messages.outputs[-1]["text"]
    assert session.store().versions("panelgc")  # only a preview so far
    yes, _no = panel.confirm_buttons
    assert yes.description.startswith("remove 1 version")
    yes.click()
    assert session.store().versions("panelgc") == []
    assert "removed 1 version" in panel.messages.outputs[-1]["text"]


def test_a_restore_from_the_panel_shows_its_progress_then_hides_it(session):
    from helpers.store import make_bundle

    from jupyter_compile_cache.torch_adapter import fingerprint

    # 8 files of 5 MB: a restore reports per batch of files of up to 8 MB, so 8 updates
    make_bundle(session.store(), "big", size=40 << 20, files=8, now=fingerprint.current())
    panel = Panel(session)
    seen = []
    panel.progress.observe(lambda change: seen.append(change["new"]), "value")
    panel.bundle_buttons[("local", "big", session.store().versions("big")[0].version, "restore")].click()
    # in the cell's words (wording.restore_line)
    said = panel.messages.outputs[-1]["text"]
    assert said.startswith("restored 'big' from the local store (") and " files, 40.0 MB) in " in said, said
    assert seen[-1] == 1.0 and len(seen) >= 4 and seen == sorted(seen)  # as the bytes land, never backwards
    assert panel.progress.layout.display == "none" and "big: 40.0 MB / 40.0 MB" in panel.progress.description


def test_the_panel_takes_the_sessions_events_it_says_warnings_and_updates_after_a_cell(session):
    panel = Panel(session)
    try:
        updated, refreshed = [], []
        panel.update = lambda: updated.append(True)  # count them; the real ones are tested above and below
        panel.refresh = lambda: refreshed.append(True)
        session.warn("could not save bundle 'net' to /s: disk full; the cell's result stands")
        assert panel.messages.outputs[-1]["text"] == (
            "warning: could not save bundle 'net' to /s: disk full; the cell's result stands\n"
        )
        with session.cell("quiet_one", CellOptions(quiet=True, save=False)):  # a quiet cell updates it too
            pass
        assert updated == [True] and refreshed == []  # the hub is asked on Refresh only
    finally:
        session.listeners.remove(panel._on_event)  # (panel.close() needs a kernel's comms)


def test_after_a_cell_the_panel_asks_the_hub_nothing_refresh_asks_it(tmp_path, monkeypatch, redis_server):
    """A cell may hold the hub's lease while it runs: the panel's update after it reads this machine only. Counted
    by the Redis server itself (INFO's commands processed; each INFO counts as one)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB", redis_server.url)
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    client = redis_server.client()

    def commands_processed():
        return int(client.info("stats")["total_commands_processed"])

    try:
        panel = Panel(session)
        before = commands_processed()
        panel.update()
        assert commands_processed() - before == 1  # the INFO above, nothing from the panel
        before = commands_processed()
        panel.refresh()
        assert commands_processed() - before > 1  # ping and listing
        assert "hub asked at" in panel.hub_asked.value
        session.listeners.remove(panel._on_event)
    finally:
        session.close()


def test_the_panel_says_what_run_all_will_restore_in_the_kernels_notebook(session, tmp_path):
    import json

    from jupyter_compile_cache.core.notebook import read_cells
    from jupyter_compile_cache.frontends.cell_line import parse_cell_line

    path = tmp_path / "nb.ipynb"
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": "%%compile_cache net\ny = f(x)"}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    session.notebook.start(str(path), lambda: read_cells(str(path), parse_cell_line))
    session.notebook.join()
    header = Panel(session).header.value
    assert "Run All will restore 0 of 1 %%compile_cache cell of nb.ipynb; not cell 1 &#x27;net&#x27;" in header
