"""commands.py: what the front ends show besides a cell, here the one size of the store that every view agrees on."""

from __future__ import annotations

from helpers.store import make_bundle

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.events import NotListed
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


def test_a_hub_listing_leaves_out_what_the_user_may_not_read_and_says_how_many(tmp_path, monkeypatch, acl_hub):
    """A user an admin opened only some of team-a's bundles to: `hub ls` and `list` show those, and each says how
    many it left out, never an error."""
    from helpers.hubs import hub_at, local_bundle

    for name in ("open-net", "secret-net", "secret-cnn"):
        store, manifest = local_bundle(tmp_path, size=100_000, name=name)
        hub_at(acl_hub.url("team-a"), namespace="team-a").push(manifest, store.payload_path(manifest))
    acl_hub.server.client().execute_command(
        *"ACL SETUSER guest reset on >pw-of-guest %R~jcc:{team-a/}:* %R~jcc:{team-a/open-* -@all +@connection "
        "+info +scan +get +exists".split()
    )
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB", acl_hub.url("guest", "pw-of-guest"))
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_NAMESPACE", "team-a")
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    told = []
    session.reporter = told.append
    try:
        commands = Commands(session)
        hub = commands.hub(None, None, None)
        assert [row.name for row in commands.hub_bundles(hub).rows] == ["open-net"]
        assert [row.name for row in commands.bundles() if row.where == "hub"] == ["open-net"]
        assert told[0] == NotListed(hub.where, ("secret-cnn", "secret-net")), told
    finally:
        session.close()
