"""The magics, settings and usage errors in an in-process IPython shell: no kernel, nothing compiled."""

from __future__ import annotations

import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets import TraitError

import jupyter_compile_cache
from jupyter_compile_cache.core.commands import Commands
from jupyter_compile_cache.core.settings import SETTINGS, CompileCache, SettingRefused
from jupyter_compile_cache.storage.hub import Hub, HubConfig
from jupyter_compile_cache.storage.sources import HubSource

NEW_OPTIONS = ("--hub URL", "--no-hub", "--namespace NS", "--ttl SECONDS", "--wait SECONDS", "--torch-remote")


@pytest.fixture
def shell(tmp_path, monkeypatch):
    for setting in SETTINGS:
        monkeypatch.delenv(setting.variable, raising=False)
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
        usage = "usage: %compile_cache status [--json]\n       %compile_cache list [--store DIR] [--json] [--hub URL]"
        assert usage in str(caught.value), line
        # one sub-command a line, none of them wider than a terminal's 120 columns
        assert max(len(line) for line in str(caught.value).split("usage: ")[1].splitlines()) <= 120


def test_usage_line_wraps(shell):
    shell.load()
    with pytest.raises(UsageError) as caught:
        shell.run_cell_magic("compile_cache", "", "pass")
    usage = str(caught.value).split("usage: ")[1]
    assert len(usage.splitlines()) > 1 and max(len(line) for line in usage.splitlines()) <= 100, usage


@pytest.mark.parametrize(
    ("magic", "line", "told"),
    [
        ("cell", "n --no-restor", "--no-restor: did you mean --no-restore?"),
        ("cell", "n --quite", "--quite: did you mean --quiet?"),
        ("line", "gc --dry-rn", "--dry-rn: did you mean --dry-run?"),
        ("line", "lst", "did you mean list?"),
        ("cell", "my model", "a bundle NAME is one word, without spaces: join the words (my_model)"),
    ],
)
def test_options_are_never_abbreviated_and_a_typo_gets_the_nearest(shell, magic, line, told):
    """`--no-restor` was once taken silently for `--no-restore`: now it is an error that names the nearest option,
    and the cell does not run."""
    shell.load()
    with pytest.raises(UsageError) as caught:
        if magic == "cell":
            shell.run_cell_magic("compile_cache", line, "ran = True")
        else:
            shell.run_line_magic("compile_cache", line)
    assert told in str(caught.value), str(caught.value)
    assert "ran" not in shell.user_ns


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
    assert "hub [--hub URL] [--namespace NS] URL|off|status|ls|push|pull|publish|rm|gc" in line_help


def test_help_prints_the_usage_and_runs_nothing(shell, capsys):
    shell.load()
    shell.run_line_magic("compile_cache", "--help")
    assert "usage: %compile_cache status [--json]\n       %compile_cache list" in capsys.readouterr().out
    shell.run_line_magic("compile_cache", "rm -h")
    assert "usage: %compile_cache rm [--store DIR] [--version ID] [--dry-run] NAME" in capsys.readouterr().out
    shell.run_cell_magic("compile_cache", "--help", "print('THE CELL RAN')")
    out = capsys.readouterr().out
    assert "usage: %%compile_cache [--store DIR]" in out and "THE CELL RAN" not in out


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
    result = shell.run_cell("%config CompileCache.max_size = 'lots'")  # the cell fails, as a UsageError does
    assert isinstance(result.error_in_exec, SettingRefused)
    assert "UsageError: CompileCache.max_size: not a size: 'lots'" in capsys.readouterr().out
    assert settings.max_bytes == 5 << 30  # a bad value changes nothing
    assert not caplog.text  # nothing through the root logger
    shell.run_line_magic("config", "CompileCache.precompile = False")
    assert session.precompile_default is False
    shell.run_line_magic("config", "CompileCache")
    listing = capsys.readouterr().out
    for name in ("store_dir", "hub", "namespace", "secret", "hub_timeout", "max_size", "precompile", "prewarm"):
        assert f"CompileCache.{name}" in listing
    assert Commands(session).status().settings["namespace"] == "from-config"


def test_hub_subcommand_sets_a_hub_that_answers_and_keeps_the_last_one_otherwise(shell, capsys, tmp_path):
    session = shell.load()
    share = tmp_path / "share"
    share.mkdir()
    shell.run_line_magic("compile_cache", f"hub file://{share}")
    assert session.settings.hub == f"file://{share}" and "reachable (shared folder" in capsys.readouterr().out
    shell.run_line_magic("compile_cache", "hub redis://127.0.0.1:1/0")  # nothing listens: not set, and said so
    err = capsys.readouterr().err
    assert session.settings.hub == f"file://{share}"
    assert "hub redis://127.0.0.1:1/0 not set: 127.0.0.1:1 refused the connection" in err
    assert f"the hub stays file://{share}" in err and ".;" not in err
    shell.run_line_magic("compile_cache", "hub off")
    assert session.settings.hub == "" and session.hub_policy.for_cell(jupyter_compile_cache.CellOptions()) is None


def test_unload_undoes_what_the_session_changed(shell):
    import os

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    session = shell.load()
    before = (inductor_config.fx_graph_remote_cache, functorch_config.enable_remote_autograd_cache)
    os.environ.pop("TORCHINDUCTOR_REDIS_URL", None)
    hub = HubSource(Hub(HubConfig(url="redis://127.0.0.1:1/0")))
    session.hub_policy.point_torch_at(hub)  # what --torch-remote does
    assert inductor_config.fx_graph_remote_cache is True and os.environ["TORCHINDUCTOR_REDIS_URL"]
    status = repr(shell.run_line_magic("compile_cache", "status"))
    assert "caches use the hub redis://127.0.0.1:1/0 in this whole kernel" in status  # where the switch applies
    settings = session.settings
    shell.run_line_magic("unload_ext", "jupyter_compile_cache")
    assert (inductor_config.fx_graph_remote_cache, functorch_config.enable_remote_autograd_cache) == before
    assert "TORCHINDUCTOR_REDIS_URL" not in os.environ
    assert settings not in shell.configurables
    assert shell.find_cell_magic("compile_cache") is None


def test_settings_validate_what_they_are_given():
    settings = CompileCache()
    for name, value, message in (
        ("hub", "http://cache:6379", "CompileCache.hub: not a hub URL"),
        ("hub", "redis://cache:notaport/0", "CompileCache.hub: not a hub URL"),
        ("namespace", "bad ns", "CompileCache.namespace: invalid namespace 'bad ns'"),
        ("namespace", "{slot}", "CompileCache.namespace: invalid namespace"),
        ("max_size", "abc", "CompileCache.max_size: not a size: 'abc'"),
        ("max_size", "", "CompileCache.max_size: not a size: ''"),
        ("hub_timeout", -1.0, "CompileCache.hub_timeout: must be a positive number of seconds"),
        ("hub_connect_timeout", 0.0, "CompileCache.hub_connect_timeout: must be a positive number of seconds"),
        ("hub_ttl", -5, "CompileCache.hub_ttl: must be 0"),
        ("hub_chunk_size", "1G", "CompileCache.hub_chunk_size: a chunk is 256K to 64M, not '1G'"),
        ("hub_chunk_size", "big", "CompileCache.hub_chunk_size: not a size: 'big'"),
        ("store_dir", "  ", "CompileCache.store_dir: not a directory path"),
    ):
        before = getattr(settings, name)
        with pytest.raises(TraitError, match=re.escape(message)):
            setattr(settings, name, value)
        assert getattr(settings, name) == before, name  # a refused value changes nothing
    settings.hub = "off"
    assert settings.hub == ""
    settings.hub_chunk_size = "16M"
    assert settings.hub_chunk_bytes == 16 << 20


def test_a_bad_config_value_fails_the_cell_names_the_setting_and_keeps_the_old_value(shell, capsys):
    session = shell.load()
    for line, told in (
        ("CompileCache.max_size = 'abc'", "CompileCache.max_size: not a size: 'abc' (use e.g. 500M, 2G); "
         "CompileCache.max_size stays '20G'"),
        ("CompileCache.namespace = 'bad ns'", "CompileCache.namespace: invalid namespace 'bad ns'"),
        ("CompileCache.precompile = 'x'", "expected a boolean, not the str 'x'.; CompileCache.precompile stays True"),
    ):  # fmt: skip
        result = shell.run_cell(f"%config {line}")
        assert isinstance(result.error_in_exec, SettingRefused), line
        out = capsys.readouterr().out
        assert out.startswith("UsageError: ") and told in out and "Traceback" not in out, out
    settings = session.settings
    assert (settings.max_size, settings.namespace, settings.precompile) == ("20G", "default", True)
    assert "CompileCache" not in shell.config or "max_size" not in shell.config.CompileCache  # nothing kept to reload
    assert shell.run_cell("%config CompileCache.max_size = '1G'").success and settings.max_bytes == 1 << 30


@pytest.mark.parametrize(
    "variable, value, told",
    [
        ("JUPYTER_COMPILE_CACHE_PREWARM", "maybe", "not a yes/no value: 'maybe'"),
        ("JUPYTER_COMPILE_CACHE_PRECOMPILE", "perhaps", "not a yes/no value: 'perhaps'"),
        ("JUPYTER_COMPILE_CACHE_NAMESPACE", "bad ns", "invalid namespace 'bad ns'"),
        ("JUPYTER_COMPILE_CACHE_HUB", "redis://h:99999/0", "not a hub URL"),
        ("JUPYTER_COMPILE_CACHE_HUB_TTL", "-5", "must be 0 (no expiry) or more seconds, not '-5'"),
        ("JUPYTER_COMPILE_CACHE_HUB_TIMEOUT", "0", "must be a positive number of seconds, not '0'"),
        ("JUPYTER_COMPILE_CACHE_MAX_SIZE", "", None),
        ("JUPYTER_COMPILE_CACHE_HUB_CHUNK_SIZE", "10K", "a chunk is 256K to 64M, not '10K'"),
    ],
)
def test_a_bad_environment_variable_is_named_once_and_its_default_used(monkeypatch, capsys, variable, value, told):
    from jupyter_compile_cache.core.session import CompileCacheSession

    for setting in SETTINGS:
        monkeypatch.delenv(setting.variable, raising=False)
    monkeypatch.setenv(variable, value)
    from jupyter_compile_cache.frontends.reporter import TextReporter

    settings = CompileCacheSession(settings=CompileCache(), reporter=TextReporter()).settings
    err = capsys.readouterr().err
    if told is None:  # empty means unset
        assert err == "", err
        return
    assert f"{variable}: {told}" in err and err.count(variable) == 1, err
    defaults = CompileCache().trait_defaults()
    monkeypatch.delenv(variable)
    name = next(s.name for s in SETTINGS if s.variable == variable)
    assert getattr(settings, name) == getattr(CompileCache(), name), (name, defaults)


@pytest.mark.parametrize(
    "line, told",
    [
        ("n --ttl -5", "argument --ttl: must be a whole number of seconds, 1 or more, not '-5'"),
        ("n --ttl 0", "argument --ttl: must be a whole number of seconds, 1 or more, not '0'"),
        ("n --wait -3", "argument --wait: must be a number of seconds, 0 or more, not '-3'"),
        ("n --wait nan", "argument --wait: must be a number of seconds, 0 or more, not 'nan'"),
        ("n --namespace 'bad ns'", "argument --namespace: invalid namespace 'bad ns'"),
        ("n --hub redis://:pw@h:99999/0", "argument --hub: not a hub URL: 'redis://:***@h:99999/0'"),
    ],
)
def test_bad_cell_options_are_usage_errors_naming_the_option(shell, line, told):
    shell.load()
    with pytest.raises(UsageError) as caught:
        shell.run_cell_magic("compile_cache", line, "ran = True")
    assert told in str(caught.value) and "usage: %%compile_cache" in str(caught.value)
    assert "pw" not in str(caught.value)
    assert "ran" not in shell.user_ns  # the body never ran with a refused option


def test_gc_and_rm_say_what_they_remove_and_preview_with_dry_run(shell, capsys):
    from helpers.store import make_bundle

    from jupyter_compile_cache.storage.store import LocalStore

    session = shell.load()
    store = LocalStore(session.settings.store_dir)
    for name in ("alpha", "beta"):
        make_bundle(store, name, size=20_000)
    shell.run_line_magic("compile_cache", "rm alpha --dry-run")
    out = capsys.readouterr().out
    assert "would remove 1 version" in out and "alpha" in out and "dry run: nothing was removed" in out
    assert store.names() == ["alpha", "beta"]
    with pytest.raises(UsageError, match="this empties the store: nothing removed; run again with --yes"):
        shell.run_line_magic("compile_cache", "gc --max-size 0")
    assert store.names() == ["alpha", "beta"]
    with pytest.raises(UsageError, match="argument --max-size: not a size: ''"):
        shell.run_line_magic("compile_cache", "gc --max-size ''")
    shell.run_line_magic("compile_cache", "gc --max-size 0 --dry-run")
    assert "would remove 2 versions" in capsys.readouterr().out and len(store.bundles()) == 2
    shell.run_line_magic("compile_cache", "gc --max-size 0 --yes")
    out = capsys.readouterr().out
    assert "removed 2 versions" in out and "freeing" in out and store.bundles() == []


_TOKENS = st.sampled_from(
    ["--store", "--no-restore", "--no-save", "--force-save", "--quiet", "--no-precompile", "--precompile-processes",
     "--hub", "--no-hub", "--namespace", "--ttl", "--wait", "--torch-remote", "--frobnicate", "-x", "--"]
)  # fmt: skip
_VALUES = st.sampled_from(["n", "0", "-5", "3", "1.5", "nan", "inf", "bad ns", "team/a", "redis://h:1/0",
                           "http://x", "", "'", '"', "../x", "x" * 200])  # fmt: skip


@given(st.lists(_TOKENS | _VALUES, max_size=6).map(lambda parts: " ".join(parts)) | st.text(max_size=30))
@settings(max_examples=300, deadline=None)
def test_any_cell_line_parses_to_valid_options_or_is_a_usage_error(line):
    from jupyter_compile_cache.core.options import CellOptions
    from jupyter_compile_cache.frontends.cell_line import parse_cell_line

    try:  # the magic's reading of its line (and a notebook plan's)
        name, options = parse_cell_line(line)
    except ValueError as exc:  # the magic raises it as a UsageError
        assert "usage: %%compile_cache" in str(exc)
        return
    assert isinstance(options, CellOptions) and name in shlex.split(line)  # the parser took it, and the options' checks


@given(st.lists(st.sampled_from(["status", "list", "explain", "rm", "gc", "enable", "disable", "hub", "panel",
                                 "--max-size", "--dry-run", "--yes", "--store", "n", "0", "", "-1", "lots", "'"]),
                max_size=5).map(" ".join) | st.text(max_size=30))  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_any_line_magic_parses_or_is_a_usage_error(line):
    from jupyter_compile_cache.frontends import magics

    try:
        magics.line_parser().parse_args(magics._split(line, magics.line_usage))
    except UsageError as exc:
        assert "usage: %compile_cache" in str(exc)


def test_explain_of_a_name_the_store_does_not_hold_says_so(shell, tmp_path):
    shell.load()
    with pytest.raises(UsageError) as caught:
        shell.run_line_magic("compile_cache", f"explain boom --store {tmp_path}")
    assert str(caught.value) == f"no bundle named 'boom' in the local store {tmp_path}, which holds no bundle yet"


def test_status_as_json_is_the_same_record_as_the_table(shell):
    import json

    shell.load()
    data = shell.run_line_magic("compile_cache", "status --json")
    assert {"hub", "layers", "store_dir", "store_bytes", "cache_dir"} <= set(data)
    assert {layer["layer"] for layer in data["layers"]} >= {"fx_graph", "aot_autograd"}
    json.dumps(data, default=str)  # it travels as JSON


@pytest.mark.parametrize(
    "line",
    [
        "list",
        "stats",
        "explain alpha",
        "rm alpha --dry-run",
        "gc --dry-run",
        "gc --max-size 0",
        "rm nosuch",
        "list --json",
    ],
)
def test_the_magic_and_the_cli_say_the_same_for_the_same_command(shell, capsys, line):
    """One renderer per record: the magic's text (its table, its lines after `compile_cache: `, its usage error)
    is what the CLI prints for the same words (on stdout, or on stderr for what is an error)."""
    import json

    from helpers.store import make_bundle

    from jupyter_compile_cache.frontends import cli
    from jupyter_compile_cache.storage.store import LocalStore

    session = shell.load()
    store = LocalStore(session.settings.store_dir)
    for name in ("alpha", "beta"):
        make_bundle(store, name, size=20_000)
    capsys.readouterr()
    try:
        shown = shell.run_line_magic("compile_cache", line)
        magic = json.dumps(shown, indent=1, default=str) if "--json" in line else (
            repr(shown) if shown is not None else capsys.readouterr().out.removeprefix("compile_cache: ").rstrip()
        )  # fmt: skip
    except UsageError as exc:
        magic = str(exc)
    capsys.readouterr()
    cli.main(["--store", store.root, *line.split()])
    printed = capsys.readouterr()
    assert magic == (printed.out + printed.err).rstrip(), (magic, printed)


def test_the_cell_line_hands_precompile_to_its_processes_only_when_asked():
    from jupyter_compile_cache.frontends.cell_line import parse_cell_line

    assert parse_cell_line("ranks --precompile-processes")[1].precompile_processes
    assert not parse_cell_line("ranks")[1].precompile_processes


def test_explain_of_a_file_that_is_no_notebook_is_one_usage_error(shell, tmp_path):
    shell.load()
    (tmp_path / "list.ipynb").write_text("[]")
    for path, told in ((tmp_path / "none.ipynb", "no such file: "), (tmp_path / "list.ipynb", "not a notebook: ")):
        with pytest.raises(UsageError) as caught:
            shell.run_line_magic("compile_cache", f"explain --notebook {path}")
        assert str(caught.value).startswith(told) and str(path) in str(caught.value), str(caught.value)
