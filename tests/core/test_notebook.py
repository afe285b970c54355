"""core/notebook.py: the notebook a kernel serves, its plan (which `%%compile_cache` cells Run All will restore, and
why not), and its bundles fetched from the hub before the cells run; in real kernels with a shared-folder hub."""

from __future__ import annotations

import json
import os
import time

import pytest
from helpers.cells import COMPILE, DEFINE
from helpers.kernels import misses

from jupyter_compile_cache.core.notebook import notebook_path, plan, read_cells, source_digest
from jupyter_compile_cache.core.plans import NotRestoring, PlanTrouble
from jupyter_compile_cache.core.session import CompileCacheSession
from jupyter_compile_cache.frontends.cell_line import parse_cell_line
from jupyter_compile_cache.storage.bundle import Manifest
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.torch_adapter import fingerprint

SESSION = "__import__('jupyter_compile_cache').get_session()"


def write_notebook(path, sources: list[str]) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# A notebook\n"]}]
    for source in sources:
        lines = source.splitlines(keepends=True)
        cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": lines})
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return str(path)


def test_the_kernel_finds_its_notebook_from_the_server_or_vs_code(tmp_path):
    nb = tmp_path / "work" / "train.ipynb"
    nb.parent.mkdir()
    nb.write_text("{}")
    folder = str(nb.parent)
    assert notebook_path({}, {"JPY_SESSION_NAME": str(nb)}, "/") == str(nb)  # jupyter_server 2: absolute
    assert notebook_path({}, {"JPY_SESSION_NAME": "work/train.ipynb"}, str(tmp_path)) == str(nb)  # relative to root
    assert notebook_path({}, {"JPY_SESSION_NAME": "elsewhere/train.ipynb"}, folder) == str(nb)  # the kernel's cwd
    assert notebook_path({"__vsc_ipynb_file__": str(nb)}, {}, "/") == str(nb)
    assert notebook_path({}, {"JPY_SESSION_NAME": "console-1"}, folder) is None  # a console, not a notebook
    assert notebook_path({}, {"JPY_SESSION_NAME": str(tmp_path / "gone.ipynb")}, "/") is None
    assert notebook_path({}, {}, folder) is None


def test_a_cells_identity_ignores_blank_lines_and_trailing_spaces_not_code():
    body = "y = model(x)\nprint(y)\n"
    assert source_digest(body) == source_digest("\ny = model(x)   \n\nprint(y)")
    assert source_digest(body) != source_digest("y = model(x * 2)\nprint(y)\n")


def test_the_notebooks_cells_are_read_with_the_magics_parser(tmp_path):
    path = write_notebook(
        tmp_path / "nb.ipynb",
        [
            "import torch",
            "%%compile_cache net --no-hub\ny = f(x)\n",
            "%%compile_cache bad/name\ny = g(x)\n",
            "%%compile_cache other --store /somewhere --no-restore\nz = g(x)",
            "%compile_cache status",  # a line magic: not a compiled cell
        ],
    )
    cells, problems = read_cells(path, parse_cell_line)
    assert [(c.index, c.name) for c in cells] == [(2, "net"), (4, "other")]
    assert cells[0].options.no_hub and cells[0].digest == source_digest("y = f(x)\n")
    assert cells[1].options.store_dir == "/somewhere" and not cells[1].options.restore
    [problem] = problems
    assert (problem.trouble, problem.where) == (
        PlanTrouble.BAD_CELL_LINE,
        "3",
    ) and "invalid bundle name" in problem.detail
    (tmp_path / "broken.ipynb").write_text("{not json")
    cells, problems = read_cells(str(tmp_path / "broken.ipynb"), parse_cell_line)
    assert cells == [] and problems[0].trouble is PlanTrouble.UNREADABLE_NOTEBOOK


def _bundle(store: LocalStore, name: str, body: str, now: dict, tmp_path) -> Manifest:
    """A version of NAME saved from a cell whose body was BODY, as the session's save writes it."""
    kernel = tmp_path / f"{name}.so"
    kernel.write_bytes(os.urandom(1000))
    manifest = Manifest.new(name, now, fingerprint.digest(now), "test@host", {"cell_digest": source_digest(body)})
    return store.write(manifest, {"inductor/ab/k.so": str(kernel)})


def test_the_plan_gives_each_cell_its_reason(tmp_path):
    store = LocalStore(str(tmp_path / "store"))
    now = fingerprint.current(with_gpu=False)
    other_torch = {**now, "torch": "0.0.1"}
    _bundle(store, "same", "y = f(x)", now, tmp_path)
    _bundle(store, "edited", "y = f(x)", now, tmp_path)
    _bundle(store, "elsewhere", "y = f(x)", other_torch, tmp_path)
    path = write_notebook(
        tmp_path / "nb.ipynb",
        [
            "%%compile_cache same\ny = f(x)",
            "%%compile_cache edited\ny = f(2 * x)",
            "%%compile_cache elsewhere\ny = f(x)",
            "%%compile_cache new\ny = f(x)",
            "%%compile_cache same --no-restore\ny = f(x)",
        ],
    )
    session = CompileCacheSession(store_dir=str(tmp_path / "store"))
    cells, problems = read_cells(path, parse_cell_line)
    result = plan(session, path, cells, problems)
    assert (result.restoring, len(result.cells)) == (1, 5)
    by_index = {c.index: c for c in result.cells}
    assert by_index[1].restores and by_index[1].source == "local" and by_index[1].why_not is None
    assert by_index[2].why_not is NotRestoring.CELL_CHANGED
    assert by_index[3].why_not is NotRestoring.SAVED_ELSEWHERE
    assert [(m.field, m.saved) for m in by_index[3].mismatches] == [("torch", "0.0.1")]
    assert by_index[4].why_not is NotRestoring.NOTHING_SAVED
    assert by_index[5].why_not is NotRestoring.BY_CHOICE
    # an edited cell that then ran restoring that version with no miss (it compiled nothing new) restores again
    edited = store.versions("edited")[0]
    store.save_run(
        "edited",
        {"source_digest": source_digest("y = f(2 * x)"), "restore": {"version": edited.version}, "layers": {}},
    )
    assert plan(session, path, cells).cells[1].restores


@pytest.mark.slow
def test_a_colleagues_kernel_fetches_the_notebooks_bundles_at_start_and_says_what_run_all_will_do(
    kernel_factory, tmp_path
):
    share = tmp_path / "share"
    share.mkdir()
    hub = {"JUPYTER_COMPILE_CACHE_HUB": f"file://{share}", "JUPYTER_COMPILE_CACHE_SECRET": "team"}
    compile_net = COMPILE.format(name="net", options="")
    alice = kernel_factory(
        TORCHINDUCTOR_CACHE_DIR=tmp_path / "cache_a", JUPYTER_COMPILE_CACHE_DIR=tmp_path / "store_a", **hub
    )
    alice.run("%load_ext jupyter_compile_cache").check()
    # a kernel that does not know its notebook says how to name one
    assert "UsageError: explain needs a NAME, or --notebook PATH" in alice.run("%compile_cache explain").stderr
    alice.run(DEFINE).check()
    assert "to the local store and the hub" in alice.run(compile_net).check().stdout
    edited = COMPILE.format(name="net2", options="--force-save")  # the same graphs as net: saved all the same
    alice.run(edited).check()

    notebook = write_notebook(
        tmp_path / "team.ipynb",
        [
            "%load_ext jupyter_compile_cache",
            DEFINE,
            compile_net,
            edited.replace("y = compiled(x)", "y = compiled(x) * 1"),
            COMPILE.format(name="fresh", options=""),
        ],
    )
    bob = kernel_factory(
        TORCHINDUCTOR_CACHE_DIR=tmp_path / "cache_b",
        JUPYTER_COMPILE_CACHE_DIR=tmp_path / "store_b",
        JPY_SESSION_NAME=notebook,
        **hub,
    )
    bob.run("%load_ext jupyter_compile_cache").check()
    deadline = time.time() + 120
    while bob.value(f"{SESSION}.notebook.plan is None and {SESSION}.notebook.running()") and time.time() < deadline:
        time.sleep(0.2)
    # fetched before any cell asked: both of Alice's bundles are in Bob's store now
    assert sorted(LocalStore(str(tmp_path / "store_b")).names()) == ["net", "net2"]
    status = "\n".join(bob.run("%compile_cache status").check().results)
    assert "Run All will restore 1 of 3 %%compile_cache cells of team.ipynb, 2 fetched from the hub ahead" in status
    assert "not cell 4 'net2', cell 5 'fresh'" in status
    explained = "\n".join(bob.run("%compile_cache explain").check().results)
    assert "the cell's code changed since the save" in explained and "no bundle saved yet" in explained

    bob.run(DEFINE).check()
    out = bob.run(compile_net).check()
    assert "MATCHES_EAGER True" in out.stdout and "warning" not in out.stderr
    assert "restored 'net' from the local store, pulled from the hub when the kernel started (" in out.stdout
    assert misses(bob.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}


def test_staging_that_fails_is_said_by_status_and_no_cell_waits_for_it(tmp_path):
    from jupyter_compile_cache.core.commands import Commands
    from jupyter_compile_cache.frontends.tables import StatusView

    session = CompileCacheSession(store_dir=str(tmp_path / "store"))

    def unreadable():
        raise PermissionError("the notebook went away")

    session.notebook.start(str(tmp_path / "nb.ipynb"), unreadable)
    session.notebook.join()
    assert session.notebook.wait_for("net") == 0.0
    text = repr(StatusView(Commands(session).status(wait=True)))
    assert "its bundles were not fetched ahead (PermissionError: the notebook went away); each cell fetches" in text
