"""render.py: one renderer per record type, for the magic, the CLI and --json alike."""

from __future__ import annotations

import typing

from helpers.store import make_bundle

from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.options import GcOptions, RemoveOptions
from jupyter_compile_cache.core.records import Removed
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends import render, tables
from jupyter_compile_cache.torch_adapter import fingerprint


def test_every_record_a_command_returns_has_one_renderer():
    kinds = [k for k in typing.get_args(render.Record) if typing.get_origin(k) is None]
    assert kinds, render.Record
    for kind in kinds:
        assert (kind in render._VIEWS) != (kind in render._LINES), kind  # exactly one of the two


def test_a_refused_change_shows_its_plan_and_says_why_once(tmp_path):
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    make_bundle(session.store(), "net", now=fingerprint.current())
    commands = Commands(session)
    refused = commands.gc(GcOptions(max_size=0))
    assert isinstance(refused, Removed) and refused.refused
    shown = repr(render.view(refused))
    assert shown.startswith("would remove 1 version from") and "dry run" not in shown  # the refusal says that
    assert render.refusal(refused) == "this empties the store: nothing removed; run again with --yes"
    done = commands.remove(RemoveOptions("net"))
    assert render.refusal(done) is None and isinstance(render.view(done), tables.Lines)
    assert repr(render.view(done)).startswith("removed 1 version from")
    assert render.as_json(done)["removals"][0]["name"] == "net"


def test_what_a_layer_switch_changed_is_worded_once_for_the_magic_and_the_panel():
    """Golden lines: `enable` / `disable` as the magic prints them and the panel says them (from where
    `Commands.switch_scope` says the layer applies)."""
    from jupyter_compile_cache.core.records import SwitchScope
    from jupyter_compile_cache.torch_adapter import layers

    precompile, fx = layers.resolve("precompile"), layers.resolve("fx")
    assert render.switch_line(precompile, SwitchScope.OFF) == "Dynamo precompile off (CompileCache.precompile = False)"
    assert render.switch_line(precompile, SwitchScope.CELLS).startswith(
        "Dynamo precompile on in %%compile_cache cells only (CompileCache.precompile = True;"
    )
    assert "unset TORCH_CACHING_PRECOMPILE" in render.switch_line(precompile, SwitchScope.EVERYWHERE)
    value = fx.switch_value()
    assert render.switch_line(fx, SwitchScope.KERNEL if value else SwitchScope.OFF) == (
        f"FX graph {'on' if value else 'off'} in this kernel (torch._inductor.config.fx_graph_cache = {value})"
    )


def test_config_says_what_a_warming_template_is_doing_at_each_step():
    from jupyter_compile_cache.core.records import Configuration, Setting, WarmingTemplate

    steps = ("quiet", "importing", "importing_busy")
    warming = [WarmingTemplate(100 + i, 300_000_000, 12.0, step, 20.0) for i, step in enumerate(steps)]
    config = Configuration([Setting("hub", "", "default")], "/store", 0, 1 << 30, [], None, warming)
    lines = [line for line in repr(render.view(config)).splitlines() if line.startswith("warm kernel template warming")]
    assert [line.split(", ", 3)[3].split(";")[0] for line in lines] == [
        "waiting for a quiet machine (at most 20 s), then importing torch and its compiler",
        "importing torch and its compiler on idle CPU time",
        "importing torch and its compiler at a low priority (the machine stayed busy)",
    ]
