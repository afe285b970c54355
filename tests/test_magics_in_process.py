"""The magics, settings and usage errors in an in-process IPython shell: no kernel, nothing compiled."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets import TraitError

import jupyter_compile_cache
from jupyter_compile_cache.hub import HubConfig, RedisHub
from jupyter_compile_cache.settings import ENV, CompileCache

NEW_OPTIONS = ("--hub URL", "--no-hub", "--namespace NS", "--ttl SECONDS", "--wait SECONDS", "--torch-remote")


@pytest.fixture
def shell(tmp_path, monkeypatch):
    for variable in ENV.values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    ip = InteractiveShell.instance()
    ip.config.CompileCache.prewarm = False  # as ipython_config.py would: no background imports in the test process

    def load():
        ip.run_line_magic("load_ext", "jupyter_compile_cache")
        return jupyter_compile_cache.get_session()

    ip.load = load
    yield ip
    if "jupyter_compile_cache" in ip.extension_manager.loaded:
        ip.run_line_magic("unload_ext", "jupyter_compile_cache")
    ip.config.pop("CompileCache", None)


def test_usage_errors_show_the_usage_line(shell):
    shell.load()
    for line, body in (("../evil", "pass"), ("ok --frobnicate", "pass"), ("", "pass"), ("x" * 129, "pass")):
        with pytest.raises(UsageError) as caught:
            shell.run_cell_magic("compile_cache", line, body)
        assert "usage: %%compile_cache [--store DIR]" in str(caught.value) and "NAME" in str(caught.value)
    for line in ("frobnicate", "enable nosuchlayer", "explain a/b", "gc --max-size lots", "hub http://x", "rm 'a"):
        with pytest.raises(UsageError) as caught:
            shell.run_line_magic("compile_cache", line)
        assert "usage: %compile_cache status | list [--store DIR] | explain" in str(caught.value), line


def test_usage_and_help_are_generated_from_the_parsers(shell):
    shell.load()
    with pytest.raises(UsageError) as caught:
        shell.run_cell_magic("compile_cache", "--frobnicate", "pass")
    for option in NEW_OPTIONS:
        assert option in str(caught.value)
    help_text = shell.find_cell_magic("compile_cache").__doc__
    for option in NEW_OPTIONS:
        assert option in help_text
    assert "wait for a collaborator compiling the same NAME" in help_text
    line_help = shell.find_line_magic("compile_cache").__doc__
    assert "hub URL|off|status" in line_help or "URL|off|status" in line_help


def test_settings_come_from_config_then_environment_then_defaults(shell, monkeypatch, capsys, caplog):
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_NAMESPACE", "from-env")
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_HUB_TIMEOUT", "3")
    monkeypatch.setenv("JUPYTER_COMPILE_CACHE_MAX_SIZE", "lots")
    shell.config.CompileCache.namespace = "from-config"
    session = shell.load()
    settings = session.settings
    assert settings in shell.configurables
    assert settings.namespace == "from-config"  # config beats the environment
    assert settings.hub_timeout == 3.0  # the environment beats the default
    assert settings.max_size == "20G" and settings.prewarm is False
    assert "JUPYTER_COMPILE_CACHE_MAX_SIZE: not a size: 'lots'" in capsys.readouterr().err  # told once, at load

    shell.run_line_magic("config", "CompileCache.max_size = '5G'")
    assert settings.max_bytes == 5 << 30
    shell.run_line_magic("config", "CompileCache.max_size = 'lots'")  # IPython logs the TraitError
    assert "not a size: 'lots'" in caplog.text
    assert settings.max_bytes == 5 << 30  # a bad value changes nothing
    shell.run_line_magic("config", "CompileCache.precompile = False")
    assert session.precompile_default is False
    shell.run_line_magic("config", "CompileCache")
    listing = capsys.readouterr().out
    for name in ("store_dir", "hub", "namespace", "secret", "hub_timeout", "max_size", "precompile", "prewarm"):
        assert f"CompileCache.{name}" in listing
    assert session.status()["settings"]["namespace"] == "from-config"


def test_hub_subcommand_sets_the_hub_setting(shell, capsys):
    session = shell.load()
    shell.run_line_magic("compile_cache", "hub redis://127.0.0.1:1/0")  # nothing listens: status says so
    assert session.settings.hub == "redis://127.0.0.1:1/0"
    assert "unreachable" in capsys.readouterr().out
    shell.run_line_magic("compile_cache", "hub off")
    assert session.settings.hub == "" and session.hub_link.for_cell(jupyter_compile_cache.CellOptions()) is None


def test_unload_undoes_what_the_session_changed(shell):
    import os

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    session = shell.load()
    before = (inductor_config.fx_graph_remote_cache, functorch_config.enable_remote_autograd_cache)
    os.environ.pop("TORCHINDUCTOR_REDIS_URL", None)
    session.hub_link.point_torch_at(RedisHub(HubConfig(url="redis://127.0.0.1:1/0")))  # what --torch-remote does
    assert inductor_config.fx_graph_remote_cache is True and os.environ["TORCHINDUCTOR_REDIS_URL"]
    settings = session.settings
    shell.run_line_magic("unload_ext", "jupyter_compile_cache")
    assert (inductor_config.fx_graph_remote_cache, functorch_config.enable_remote_autograd_cache) == before
    assert "TORCHINDUCTOR_REDIS_URL" not in os.environ
    assert settings not in shell.configurables
    assert shell.find_cell_magic("compile_cache") is None


def test_settings_validate_what_they_are_given():
    settings = CompileCache()
    with pytest.raises(TraitError, match="not a Redis URL"):
        settings.hub = "http://cache:6379"
    with pytest.raises(TraitError, match="must not be negative"):
        settings.hub_timeout = -1
    settings.hub = "off"
    assert settings.hub == ""
