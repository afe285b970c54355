"""frontends/status_facts.py: one wording of the session's state for `status` (the CLI's and the magic's text), the
panel's header and the cell's last line, from a real session's status record."""

from __future__ import annotations

import dataclasses
import html

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.records import CellReport
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.frontends import wording
from jupyter_compile_cache.frontends.panel import Panel, short_path
from jupyter_compile_cache.frontends.status_facts import status_facts
from jupyter_compile_cache.frontends.tables import StatusView


def test_status_the_panel_and_the_cell_line_word_each_fact_alike(tmp_path):
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    try:
        commands = Commands(session)
        status = dataclasses.replace(
            commands.status(wait=True),
            stale_rejected=2,
            precompile_fallbacks=1,
            torch_remote="redis://cache:6379/0",
            compiler_loading=1.5,
            notebook_path=str(tmp_path / "team.ipynb"),
            notebook_error=Failure("PermissionError", "the notebook went away"),
        )
        facts = status_facts(status, short_path)  # the panel's paths from ~, their middles left out
        assert [f.label for f in facts] == [
            "torch's cache", "local store", "hub", "kernel", "torch's remote caches", "torch's compiler", "notebook",
            "precompile", "time saved",
        ]  # fmt: skip

        text = repr(StatusView(status))  # `status` says each fact whole
        assert [f"{f.label}: {f.full}" for f in status_facts(status)] == text.split("\n")[: len(facts)]
        header = html.unescape(Panel(session)._header_html(status))
        for fact in facts:
            assert f">{fact.label}<" in header and f">{fact.short}<" in header and f"title='{fact.full}'" in header

        refusals = "2 stale precompile entries refused (code changed); 1 function fell back from precompile to plain "
        refusals += "torch.compile"
        assert facts[-2].short == refusals
        cell_line = wording.cell_summary(CellReport("net", stale_rejected=2, precompile_fallbacks=1))
        assert refusals in cell_line, cell_line
    finally:
        session.close()
