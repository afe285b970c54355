"""store_commands.py: the magic and the CLI take the same words for the store commands and get the same records."""

from __future__ import annotations

import shlex

import pytest
from helpers.store import make_bundle

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends import cli, magics, store_commands

LINES = [
    "list",
    "list --json",
    "explain net",
    "explain net --json",
    "rm net --dry-run",
    "rm net --version 0 --dry-run",  # a prefix of every version id (their creation time): one version here
    "gc --dry-run",
    "gc --max-size 1K --dry-run",
    "gc --older-than 0s --incompatible --dry-run --yes",
    "stats",
    "stats --json",
]


@pytest.mark.parametrize("line", LINES)
def test_the_magic_and_the_cli_parse_a_line_alike_and_get_the_same_record(tmp_path, monkeypatch, line):
    monkeypatch.delenv("JUPYTER_COMPILE_CACHE_HUB", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    try:
        make_bundle(session.store(), "net", size=4_000)
        words = shlex.split(line)
        in_magic = magics.line_parser().parse_args(words)
        in_cli = cli._parser().parse_args(words)
        shared = {k: v for k, v in vars(in_magic).items() if k != "store_dir"}
        assert {k: v for k, v in vars(in_cli).items() if k in shared} == shared
        commands = Commands(session)
        records = [store_commands.run(commands, words[0], args) for args in (in_magic, in_cli)]
        if words[0] == "stats":  # a stats record carries when it was read
            records = [{**r.to_json(), "since": None} for r in records]
        assert records[0] == records[1]
    finally:
        session.close()


def test_list_says_each_time_it_leaves_out_a_hub_that_is_down(tmp_path, monkeypatch, free_port):
    import io

    from jupyter_compile_cache.frontends.reporter import TextReporter

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB", f"redis://127.0.0.1:{free_port}/0")
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB_CONNECT_TIMEOUT", "0.5")
    err = io.StringIO()
    session = CompileCacheSession(store_dir=str(tmp_path / "store"), reporter=TextReporter(io.StringIO(), err))
    try:
        make_bundle(session.store(), "a", size=1_000)
        commands = Commands(session)
        listing = magics.line_parser().parse_args(["list"])
        assert [row.where for row in store_commands.run(commands, "list", listing)] == ["local"]
        assert "carrying on without the hub" in err.getvalue()  # the failure, told once
        rows = store_commands.run(commands, "list", listing)  # a moment later: not tried again, but said
        assert [row.where for row in rows] == ["local"]
        assert commands.bundles()  # what the panel's refresh asks: no line each time
        assert err.getvalue().count("did not answer a moment ago: only local bundles listed") == 1
    finally:
        session.close()
