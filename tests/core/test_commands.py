"""commands.py: what the front ends show besides a cell, here the one size of the store that every view agrees on."""

from __future__ import annotations

from helpers.store import make_bundle

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.session import CompileCacheSession


def test_status_list_and_stats_give_the_store_one_size(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JUPYTER_COMPILE_CACHE_HUB", raising=False)
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    try:
        store = session.store()
        make_bundle(store, "a", size=100_000)
        make_bundle(store, "b", size=50_000, files=3)
        store.save_run("a", {"ok": True})  # files beside the bundles (a run record, the statistics) are no bundle
        store.add_stats({"cells": 1})
        commands = Commands(session)
        rows = commands.bundles()
        listed = sum(row.bytes for row in rows if row.where == "local")
        assert len(rows) == 2 and listed > 150_000
        assert commands.status().store_bytes == listed == commands.stats().store_bytes
    finally:
        session.close()
