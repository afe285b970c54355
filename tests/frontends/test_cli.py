"""The CLI and the script API (`with jupyter_compile_cache.cell(...)`), in fresh Python processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import json, torch, jupyter_compile_cache as jcc
    from torch._dynamo.utils import counters

    def f(a):
        return (a.sin() + a.cos()).relu() * 3

    torch.manual_seed(0)
    x = torch.randn(64)
    with jcc.cell("script_fn") as report:
        y = torch.compile(f)(x)
    # compiled sin/cos differ from eager's in the last bits (plain torch.compile too): compare with a tolerance
    assert torch.allclose(y, f(x), atol=1e-5)
    print("REPORT", json.dumps({"saved": report.saved_version is not None,
                                "restored": bool(report.restore and report.restore.restored),
                                "fx_miss": counters["inductor"]["fxgraph_cache_miss"]}))
    """
)


def _python(args, env, **kw):
    return subprocess.run(
        [sys.executable, *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=600, **kw
    )


def _report(proc):
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")][-1]
    import json

    return json.loads(line[len("REPORT ") :])


def _stats(env):
    import json

    out = _python(["-m", "jupyter_compile_cache", "stats", "--json"], env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_script_api_then_cli_export_import_on_another_store(tmp_path):
    store_a, store_b = tmp_path / "store_a", tmp_path / "store_b"
    env_a = {"JUPYTER_COMPILE_CACHE_DIR": str(store_a), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache_a")}
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    first = _report(_python([str(script)], env_a))
    assert first == {"saved": True, "restored": False, "fx_miss": first["fx_miss"]} and first["fx_miss"] >= 1

    stats_a = _stats(env_a)  # the store counts what its cells did (ccache -s)
    assert (stats_a["cells"], stats_a["compiled"], stats_a["saved_bundles"], stats_a["restored_local"]) == (1, 1, 1, 0)
    assert stats_a["misses"] >= 1 and stats_a["saved_bytes"] > 0 and stats_a["store_bytes"] > 0, stats_a

    listing = _python(["-m", "jupyter_compile_cache", "list"], env_a)
    assert listing.returncode == 0 and "script_fn" in listing.stdout
    shown = _python(["-m", "jupyter_compile_cache", "explain", "script_fn"], env_a)
    assert "WOULD RESTORE" in shown.stdout

    exported = tmp_path / "script_fn.jcc"
    out = _python(["-m", "jupyter_compile_cache", "export", "script_fn", str(exported)], env_a)
    assert out.returncode == 0 and exported.stat().st_size > 0
    env_b = {"JUPYTER_COMPILE_CACHE_DIR": str(store_b), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache_b")}
    out = _python(["-m", "jupyter_compile_cache", "import", str(exported)], env_b)
    assert out.returncode == 0, out.stderr

    # a "colleague" with the imported store and an empty cache dir gets every graph from the bundle
    second = _report(_python([str(script)], env_b))
    assert second == {"saved": False, "restored": True, "fx_miss": 0}
    stats_b = _stats(env_b)
    assert (stats_b["cells"], stats_b["restored_local"], stats_b["compiled"], stats_b["misses"]) == (1, 1, 0, 0)
    assert stats_b["hits"] >= 1 and stats_b["hit_rate"] == 1.0 and stats_b["restored_bytes"] > 0, stats_b
    assert stats_b["seconds_saved"] > 0, stats_b  # the cold time recorded in the bundle, less this run
    zeroed = _python(["-m", "jupyter_compile_cache", "stats", "--zero"], env_b)
    assert zeroed.returncode == 0 and "(now zeroed)" in zeroed.stdout, zeroed.stdout  # shows what it zeroes
    assert re.search(r"^cells run +1$", zeroed.stdout, re.M), zeroed.stdout
    after = _stats(env_b)
    assert after["cells"] == 0 and after["since"] is not None and after["store_bytes"] == stats_b["store_bytes"]

    out = _python(["-m", "jupyter_compile_cache", "gc", "--max-size", "0"], env_b)  # would empty the store
    assert out.returncode == 3 and "run again with --yes" in out.stderr and "would remove 1 version" in out.stdout
    out = _python(["-m", "jupyter_compile_cache", "gc", "--max-size", ""], env_b)
    assert out.returncode == 2 and "argument --max-size: not a size: ''" in out.stderr
    out = _python(["-m", "jupyter_compile_cache", "gc", "--max-size", "0", "--yes"], env_b)
    assert out.returncode == 0 and "removed 1 version" in out.stdout and "freeing" in out.stdout
    out = _python(["-m", "jupyter_compile_cache", "rm", "script_fn"], env_a)
    assert out.returncode == 0
    out = _python(["-m", "jupyter_compile_cache", "rm", "script_fn"], env_a)
    assert out.returncode == 1 and "no bundle" in out.stderr


def test_cli_refuses_bad_names_and_foreign_files(tmp_path):
    env = {"JUPYTER_COMPILE_CACHE_DIR": str(tmp_path / "s")}
    out = _python(["-m", "jupyter_compile_cache", "show", "../x"], env)
    assert out.returncode == 2 and "invalid bundle name" in out.stderr
    junk = tmp_path / "junk.jcc"
    junk.write_bytes(b"not a tar")
    out = _python(["-m", "jupyter_compile_cache", "import", str(junk)], env)
    assert out.returncode == 5 and out.stderr.strip() == f"error: {junk} is not a bundle exported by " + (
        "jupyter_compile_cache (not a tar file)"
    )


def test_cli_speaks_the_magics_words_takes_options_anywhere_and_lists_fast(tmp_path):
    store, other = tmp_path / "store", tmp_path / "other"
    env = {"JUPYTER_COMPILE_CACHE_DIR": str(store)}
    out = _python(["-m", "jupyter_compile_cache", "--version"], env)
    from jupyter_compile_cache import __version__

    assert out.returncode == 0 and out.stdout.strip() == f"jupyter-compile-cache {__version__}"

    # an empty store lists without importing torch, nor our torch side or the kernel's session, and says so
    code = (
        "import sys; from jupyter_compile_cache.frontends.cli import main; rc = main(sys.argv[1:]); "
        "print('TORCH', 'torch' in sys.modules); "
        "print('OURS', sorted(m for m in sys.modules if m.startswith('jupyter_compile_cache.torch_adapter.') "
        "or m == 'jupyter_compile_cache.core.session')); raise SystemExit(rc)"
    )
    out = _python(["-c", code, "list", "--store", str(other)], env)
    assert out.returncode == 0 and "no bundles" in out.stdout and "TORCH False" in out.stdout, out
    assert "OURS []" in out.stdout, out.stdout

    # the same exit status for a missing name, whatever the command; `explain`, as in the magic (`show` too)
    for command in ("explain", "show", "rm", "export"):
        args = [command, "nothing_here"] + (["out.jcc"] if command == "export" else [])
        out = _python(["-m", "jupyter_compile_cache", *args], env)
        assert out.returncode == 1 and "no bundle named 'nothing_here'" in out.stderr, (command, out.stderr)

    # --store after the subcommand is the same as before it
    from helpers.store import make_bundle  # a real bundle in the store, without compiling

    from jupyter_compile_cache.storage.store import LocalStore

    make_bundle(LocalStore(str(other)), "listed", size=2048)
    before = _python(["-m", "jupyter_compile_cache", "--store", str(other), "list"], env)
    after = _python(["-m", "jupyter_compile_cache", "list", "--store", str(other)], env)
    assert before.returncode == after.returncode == 0
    assert "listed" in after.stdout and re.sub(r"\d+s ago", "", after.stdout) == re.sub(r"\d+s ago", "", before.stdout)
    assert "local: 1 version of 1 bundle, 2.1 KB" in after.stdout, after.stdout
    # gc by age and by what can restore here; each says what it removes, --dry-run first
    from jupyter_compile_cache.torch_adapter import fingerprint

    make_bundle(LocalStore(str(other)), "fits_here", size=2048, now=fingerprint.current(with_gpu=True))
    out = _python(["-m", "jupyter_compile_cache", "gc", "--incompatible", "--dry-run", "--store", str(other)], env)
    assert out.returncode == 0 and "would remove 1 version" in out.stdout and "listed" in out.stdout, out
    assert "fits_here" not in out.stdout
    out = _python(["-m", "jupyter_compile_cache", "gc", "--older-than", "30d", "--store", str(other)], env)
    assert out.returncode == 0 and "nothing to remove" in out.stdout, out  # both were used just now
    out = _python(["-m", "jupyter_compile_cache", "gc", "--older-than", "soon", "--store", str(other)], env)
    assert out.returncode == 2 and "argument --older-than: not an age: 'soon'" in out.stderr, out.stderr
    out = _python(["-m", "jupyter_compile_cache", "gc", "--incompatible", "--store", str(other)], env)
    assert out.returncode == 0 and "removed 1 version" in out.stdout, out
    assert "fits_here" in _python(["-m", "jupyter_compile_cache", "list", "--store", str(other)], env).stdout
    # a store with a bundle lists without importing torch too, and still knows it fits (torch's build from its files)
    out = _python(["-c", code, "list", "--store", str(other)], env)
    assert out.returncode == 0 and "TORCH False" in out.stdout, out
    assert re.search(r"fits_here .* yes\n", out.stdout), out.stdout
    # of our torch side only the machine's fingerprint, which says whether it fits
    assert "OURS ['jupyter_compile_cache.torch_adapter.fingerprint']" in out.stdout, out.stdout
    # outside a kernel the inductor config is not known, and explain says so instead of "differs {}"
    out = _python(["-c", code, "explain", "fits_here", "--store", str(other)], env)
    assert "TORCH False" in out.stdout and "WOULD RESTORE" in out.stdout, out.stdout
    assert re.search(r"inductor_config +not known \(compiler not loaded\)", out.stdout), out.stdout

    hub_after = _python(["-m", "jupyter_compile_cache", "hub", "ls", "--hub", "redis://127.0.0.1:1/0"], env)
    assert hub_after.returncode == 4 and "unrecognized" not in hub_after.stderr, hub_after.stderr
    assert "nothing answers at that address: is the server running" in hub_after.stderr, hub_after.stderr
    # any command's options before it, as the README says: the same words as after it
    as_json = _python(["-m", "jupyter_compile_cache", "--json", "list", "--store", str(other)], env)
    assert as_json.returncode == 0 and [row["name"] for row in json.loads(as_json.stdout)] == ["fits_here"]
    for words in (["--hub", "redis://127.0.0.1:1/0", "hub", "ls"], ["--hub", "redis://127.0.0.1:1/0", "list"]):
        before = _python(["-m", "jupyter_compile_cache", *words, "--store", str(other)], env)
        assert before.returncode == 4 and "unrecognized" not in before.stderr, (words, before.stderr)
        assert "invalid choice" not in before.stderr and "hub redis://127.0.0.1:1/0" in before.stderr, before.stderr


def test_read_commands_speak_json_and_a_closed_pipe_is_quiet(tmp_path):
    import json

    from helpers.store import make_bundle

    from jupyter_compile_cache.storage.store import LocalStore

    store = LocalStore(str(tmp_path / "store"))
    for i in range(40):
        make_bundle(store, f"net{i}", size=1_000)
    env = {"JUPYTER_COMPILE_CACHE_HUB": ""}
    listed = _python(["-m", "jupyter_compile_cache", "--store", store.root, "list", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted(row["name"] for row in rows) == sorted(f"net{i}" for i in range(40))
    assert {row["where"] for row in rows} == {"local"} and all(row["bytes"] > 0 for row in rows)
    explained = _python(["-m", "jupyter_compile_cache", "explain", "net3", "--json", "--store", store.root], env)
    assert explained.returncode == 0 and json.loads(explained.stdout)["name"] == "net3", explained.stderr

    # `list | head -1`: the reader goes away before we write; we end quietly, as cat or git would
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_compile_cache", "--store", store.root, "list"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(60)
    assert err == "" and proc.returncode in (0, -13), (proc.returncode, err)


def test_rm_takes_a_version_prefix_and_import_says_when_it_had_the_version(tmp_path):
    from helpers.store import make_bundle

    from jupyter_compile_cache.storage.bundle import short_id
    from jupyter_compile_cache.storage.store import LocalStore

    store = LocalStore(str(tmp_path / "store"))
    older, newer = make_bundle(store, "net", size=2_000), make_bundle(store, "net", size=2_000)
    cli = ["-m", "jupyter_compile_cache", "--store", store.root]
    env = {"JUPYTER_COMPILE_CACHE_HUB": ""}

    exported = _python([*cli, "export", "net", str(tmp_path / "net.jcc")], env)
    assert exported.returncode == 0 and short_id(newer.version) in exported.stdout, exported.stderr
    again = _python([*cli, "import", str(tmp_path / "net.jcc")], env)
    assert again.returncode == 0 and again.stdout.startswith("already in the store: 'net'"), again.stdout

    ambiguous = _python([*cli, "rm", "net", "--version", older.version[:4]], env)  # both start so
    assert ambiguous.returncode == 2 and "ambiguous" in ambiguous.stderr, ambiguous.stderr
    assert len(store.versions("net")) == 2
    prefix = older.version[:24]  # the time and the machine: enough to tell it from the newer one
    dry = _python([*cli, "rm", "net", "--version", prefix, "--dry-run"], env)
    shown = (short_id(older.version), short_id(newer.version))
    assert dry.returncode == 0 and shown[0] in dry.stdout and shown[1] not in dry.stdout, dry.stdout
    removed = _python([*cli, "rm", "net", "--version", prefix], env)
    assert removed.returncode == 0 and "removed 1 version" in removed.stdout, removed.stderr
    assert [m.version for m in store.versions("net")] == [newer.version]
    fresh = _python(
        ["-m", "jupyter_compile_cache", "--store", str(tmp_path / "other"), "import", str(tmp_path / "net.jcc")], env
    )
    assert fresh.returncode == 0 and fresh.stdout.startswith("imported 'net'"), fresh.stderr


def test_the_version_list_shows_is_one_rm_takes(tmp_path):
    from helpers.store import make_bundle

    from jupyter_compile_cache.storage.bundle import short_id
    from jupyter_compile_cache.storage.store import LocalStore

    store = LocalStore(str(tmp_path / "store"))
    kept, dropped = make_bundle(store, "net", size=2_000), make_bundle(store, "net", size=2_000)
    cli = ["-m", "jupyter_compile_cache", "--store", store.root]
    shown = _python([*cli, "list"], {"JUPYTER_COMPILE_CACHE_HUB": ""}).stdout
    assert short_id(dropped.version) in shown and short_id(kept.version) in shown
    assert len(short_id(kept.version)) == 7 and kept.version not in shown  # git-like: short, and enough
    as_json = json.loads(_python([*cli, "list", "--json"], {"JUPYTER_COMPILE_CACHE_HUB": ""}).stdout)
    assert {row["short_id"] for row in as_json} == {short_id(kept.version), short_id(dropped.version)}
    # A version that is not there is said to be unknown, with the versions there are; the store is untouched.
    unknown = _python([*cli, "rm", "net", "--version", "zzzzzzz"], {})
    assert unknown.returncode == 1 and "'net' has no version 'zzzzzzz'" in unknown.stderr, unknown.stderr
    assert short_id(kept.version) in unknown.stderr and len(store.versions("net")) == 2
    removed = _python([*cli, "rm", "net", "--version", short_id(dropped.version)], {})
    assert removed.returncode == 0, removed.stderr
    assert [m.version for m in store.versions("net")] == [kept.version]


def test_a_store_that_does_not_exist_a_bad_size_and_plurals_are_said_plainly(tmp_path):
    from helpers.store import make_bundle

    from jupyter_compile_cache.storage.store import LocalStore

    missing = tmp_path / "typo"
    no_hub = {"JUPYTER_COMPILE_CACHE_HUB": ""}
    listed = _python(["-m", "jupyter_compile_cache", "--store", str(missing), "list"], no_hub)
    assert listed.returncode == 0 and f"no store at {missing}" in listed.stderr and not missing.exists()
    bad = _python(["-m", "jupyter_compile_cache", "gc", "--max-size", "-5G"], {})
    assert bad.returncode == 2 and "argument --max-size: not a size: '-5G' (use e.g. 500M, 2G)" in bad.stderr
    store = LocalStore(str(tmp_path / "store"))
    make_bundle(store, "net", size=1_000)
    stats = _python(["-m", "jupyter_compile_cache", "--store", store.root, "stats"], {})
    assert "1 version of 1 bundle" in stats.stdout, stats.stdout


def test_explain_a_notebook_says_what_run_all_will_restore(tmp_path):
    import json

    notebook = tmp_path / "nb.ipynb"
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": source}
        for source in ("import torch", "%%compile_cache net\ny = torch.compile(f)(x)", "%%compile_cache bad/name\n")
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    env = {"JUPYTER_COMPILE_CACHE_DIR": str(tmp_path / "store"), "JUPYTER_COMPILE_CACHE_HUB": ""}
    out = _python(["-m", "jupyter_compile_cache", "explain", "--notebook", str(notebook)], env)
    assert out.returncode == 0, out.stderr
    assert f"Run All will restore 0 of 1 %%compile_cache cell of {notebook}" in out.stdout
    assert "no bundle saved yet" in out.stdout and "cell 3: invalid bundle name 'bad/name'" in out.stdout
    as_json = ["-m", "jupyter_compile_cache", "explain", "--notebook", str(notebook), "--json"]
    record = json.loads(_python(as_json, env).stdout)
    assert [(c["index"], c["name"], c["restores"]) for c in record["cells"]] == [(2, "net", False)]
    out = _python(["-m", "jupyter_compile_cache", "explain"], env)
    assert out.returncode == 2 and "explain needs a NAME, or --notebook PATH" in out.stderr
    out = _python(["-m", "jupyter_compile_cache", "explain", "--notebook", str(tmp_path / "none.ipynb")], env)
    assert out.returncode == 1 and out.stderr == f"error: no such file: {tmp_path / 'none.ipynb'}\n", out.stderr
    (tmp_path / "list.ipynb").write_text("[]")  # JSON, but no notebook: one line, no plan of nothing before it
    out = _python(["-m", "jupyter_compile_cache", "explain", "--notebook", str(tmp_path / "list.ipynb")], env)
    assert out.returncode == 5 and out.stdout == "", out.stdout
    assert out.stderr == f"error: not a notebook: {tmp_path / 'list.ipynb'} (its JSON has no list of cells)\n"


@pytest.mark.parametrize(
    ("argv", "told"),
    [
        (["gc", "--dry-rn"], "--dry-rn: did you mean --dry-run?"),
        (["gc", "--dry"], "--dry: did you mean --dry-run?"),  # never taken as an abbreviation
        (["lst"], "did you mean list?"),
        (["hub", "ls", "--namespce", "x"], "--namespce: did you mean --namespace?"),
        (["rm", "mlp", "--yes"], "--yes is an option of `gc`, `hub rm` only"),  # never "did you mean --yes?"
    ],
)
def test_a_typo_is_an_error_that_names_the_nearest_option(argv, told, capsys):
    from jupyter_compile_cache.frontends import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and told in capsys.readouterr().err


def test_every_message_says_what_to_do_next_and_each_exit_status_means_one_thing(tmp_path, capsys):
    """In this process (no torch is imported by these paths): not found names the near matches or points to `list`,
    raw OS and client errors become one line with the cause and the fix, and the exit status is the README's."""
    from helpers.store import make_bundle

    from jupyter_compile_cache.frontends import cli
    from jupyter_compile_cache.storage.store import LocalStore

    empty = ["--store", str(tmp_path / "empty")]
    assert cli.main([*empty, "list"]) == cli.OK
    assert capsys.readouterr().out.strip() == "no bundles"  # and no empty table under it

    store = ["--store", str(tmp_path / "store")]
    make_bundle(LocalStore(str(tmp_path / "store")), "resnet")
    assert cli.main([*store, "rm", "resnt"]) == cli.NOT_FOUND
    assert "no bundle named 'resnt'" in (err := capsys.readouterr().err) and "did you mean 'resnet'?" in err, err
    assert cli.main([*store, "explain", "zzz"]) == cli.NOT_FOUND
    assert "`list` shows the 1 bundle there" in capsys.readouterr().err
    assert cli.main([*empty, "rm", "zzz"]) == cli.NOT_FOUND
    assert "which holds no bundle yet" in capsys.readouterr().err

    assert cli.main([*store, "import", str(tmp_path / "nonexist.jcc")]) == cli.NOT_FOUND
    assert capsys.readouterr().err.strip() == f"error: no such file: {tmp_path / 'nonexist.jcc'}"

    assert cli.main([*store, "explain"]) == cli.USAGE
    err = capsys.readouterr().err
    assert "explain needs a NAME, or --notebook PATH" in err and "JPY_SESSION_NAME" not in err  # not a kernel here

    assert cli.main([*store, "hub", "ls", "--hub", "redis://127.0.0.1:1/0"]) == cli.HUB_FAILED
    assert "nothing answers at that address: is the server running" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exited:
        cli.main(["export", "--help"])
    assert exited.value.code == cli.OK and "NAME FILE" in capsys.readouterr().out


def test_list_takes_the_hub_it_lists(tmp_path, capsys):
    # `list --hub URL` was "unrecognized arguments", though `list` shows the hub's bundles too
    from helpers.store import make_bundle

    from jupyter_compile_cache.frontends import cli
    from jupyter_compile_cache.storage.hub import Hub, HubConfig
    from jupyter_compile_cache.storage.sources import HubSource
    from jupyter_compile_cache.storage.store import LocalStore

    share = tmp_path / "share"
    share.mkdir()
    author = LocalStore(str(tmp_path / "author"))
    HubSource(Hub(HubConfig(url=f"file://{share}", namespace="team"))).push(make_bundle(author, "shared"), author)
    mine = ["--store", str(tmp_path / "mine")]
    assert cli.main([*mine, "list", "--hub", f"file://{share}", "--namespace", "team", "--json"]) == cli.OK
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["where"]) for r in rows] == [("shared", "hub")]
    assert cli.main([*mine, "list", "--hub", f"file://{share}", "--json"]) == cli.OK  # another namespace: nothing
    assert json.loads(capsys.readouterr().out) == []


def test_each_exit_status_means_one_thing_across_the_commands(tmp_path, capsys, redis_server):
    """The README's table, one row per way out, in this process: what each command prints on stderr names the
    thing to fix, in our words (no traceback, no errno, no client library's text)."""
    import errno

    from helpers.store import make_bundle

    from jupyter_compile_cache.frontends import cli, wording
    from jupyter_compile_cache.storage.store import LocalStore

    store = LocalStore(str(tmp_path / "store"))
    make_bundle(store, "resnet")
    mine = ["--store", store.root]
    assert cli.main([*mine, "export", "resnet", str(tmp_path / "r.jcc")]) == cli.OK
    whole = (tmp_path / "r.jcc").read_bytes()
    (tmp_path / "cut.jcc").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "notes.ipynb").write_text("not a notebook")
    damaged = make_bundle(store, "damaged")
    with open(store.payload_path(damaged), "r+b") as payload:  # cut short in the store, as a full disk leaves it
        payload.truncate(payload.seek(0, 2) // 2)
    share = tmp_path / "share"
    share.mkdir()
    assert cli.main([*mine, "hub", "--hub", f"file://{share}", "push", "resnet"]) == cli.OK
    capsys.readouterr()
    import http.server
    import threading

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)  # not Redis
    threading.Thread(target=web.serve_forever, daemon=True).start()
    not_redis = f"redis://127.0.0.1:{web.server_address[1]}/0"
    table = [
        ([*mine, "list"], cli.OK, ""),
        ([*mine, "rm", "resnt"], cli.NOT_FOUND, "did you mean 'resnet'?"),
        ([*mine, "import", str(tmp_path / "nowhere.jcc")], cli.NOT_FOUND, "no such file"),
        ([*mine, "explain"], cli.USAGE, "explain needs a NAME"),
        ([*mine, "list", "--hub", "ftp://x/y"], cli.USAGE, "not a hub URL"),
        ([*mine, "hub", "--hub", f"file://{share}", "rm", "resnet"], cli.REFUSED, "--yes"),
        ([*mine, "hub", "--hub", f"file://{share}", "pull", "resnt"], cli.NOT_FOUND, "did you mean 'resnet'?"),
        ([*mine, "hub", "--hub", f"file://{share}", "pull", "zzz"], cli.NOT_FOUND, "`hub ls` shows the 1 bundle"),
        ([*mine, "hub", "--hub", "redis://127.0.0.1:1/0", "ls"], cli.HUB_FAILED, "refused the connection"),
        ([*mine, "list", "--hub", "redis://127.0.0.1:1/0"], cli.HUB_FAILED, "refused the connection"),
        ([*mine, "hub", "--hub", not_redis, "ls"], cli.HUB_FAILED, "a Redis server"),
        ([*mine, "hub", "--hub", redis_server.url[:-2] + "/99", "check"], cli.HUB_FAILED, "failed: the server has no"),
        ([*mine, "import", str(tmp_path / "cut.jcc")], cli.ERROR, f"{tmp_path / 'cut.jcc'} is cut short or damaged"),
        ([*mine, "export", "damaged", str(tmp_path / "d.jcc")], cli.ERROR, "is damaged (payload has"),
        ([*mine, "explain", "--notebook", str(tmp_path / "notes.ipynb")], cli.ERROR, "not a notebook: "),
        ([*mine, "explain", "--notebook", str(tmp_path / "none.ipynb")], cli.NOT_FOUND, "no such file: "),
        (["demo", "--dir", str(tmp_path / "nowhere" / "x")], cli.ERROR, "is not a folder"),
    ]
    for argv, status, words in table:
        try:
            got = cli.main(argv)
        except SystemExit as exited:  # argparse's own usage errors
            got = exited.code
        out, err = capsys.readouterr()
        said = err if argv[-1] != "check" else out  # `hub check` reports the hub's state, its failure included
        assert got == status and words in said, (argv, got, out, err)
        assert "Traceback" not in err and "Errno" not in err and "Error 111" not in err, (argv, err)
    web.shutdown()
    assert not (tmp_path / "d.jcc").exists() and store.versions("damaged") == []  # nothing written, set aside
    # an OSError of a store the user cannot write, as every command says it
    refused = OSError(errno.EROFS, "Read-only file system", f"{store.root}/.lock")
    assert wording.error_text(refused) == f"the folder is read-only: {store.root}/.lock"


def test_the_cli_and_the_magic_take_one_vocabulary():
    """Every command both front ends have takes the same options; the ones only one has are named here, each with
    why (the magic's own act on the kernel; the CLI's own start processes or install)."""
    import argparse

    from jupyter_compile_cache.frontends import cli, magics

    def commands(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
        found = {}
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                continue
            for name, sub in action.choices.items():
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if nested:
                    found.update({f"{name} {k}": v for k, v in commands(sub).items()})
                else:
                    found[name] = {o for a in sub._actions for o in (a.option_strings or [a.dest])} - {"-h", "--help"}
        return found

    shell, kernel = commands(cli._parser()), commands(magics.line_parser())
    kernel_only = {"enable", "disable", "panel", "hub set", "hub off"}  # the kernel's torch, hub and widgets
    shell_only = {"run", "demo", "install-kernel", "show"}  # processes, the kernel spec; `show`: explain's old name
    different = {"status"}  # the kernel's layers and cells; in a shell, `config`
    assert set(kernel) - set(shell) == kernel_only and set(shell) - set(kernel) == shell_only
    for name in set(shell) & set(kernel) - different:
        assert shell[name] == kernel[name], (name, shell[name] ^ kernel[name])
    assert {"export", "import", "config", "hub check", "hub status", "hub push", "hub publish"} <= set(kernel)
