"""open_recorder.py: what a cell opens and how many processes it starts, seen through the standard library's own
functions, wrapped only while a cell is recorded."""

from __future__ import annotations

import _io
import builtins
import importlib
import io
import multiprocessing
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import pathlib
import subprocess
import sys

import pytest

from jupyter_compile_cache.torch_adapter.open_recorder import OpenRecorder


def _now() -> dict:
    return {
        "open": builtins.open,
        "io.open": io.open,
        "os.open": os.open,
        "open_code": _io.open_code,
        "Popen": subprocess.Popen.__init__,
        "fork": os.fork,
        "system": os.system,
        "spawnv_passfds": multiprocessing.util.spawnv_passfds,
    }


ORIGINALS = _now()


@pytest.fixture
def recorder():
    out = OpenRecorder()
    yield out
    out.stop()
    assert _now() == ORIGINALS


def _child() -> None:
    pass


def test_every_way_python_opens_a_file_under_the_roots_is_seen_and_nothing_else(tmp_path, recorder, monkeypatch):
    root = tmp_path / "cache"
    (root / "pkg").mkdir(parents=True)
    for name in ("a", "b", "c", "d"):
        (root / name).write_bytes(b"x")
    (root / "pkg" / "generated_wrapper.py").write_text("VALUE = 42\n")
    outside = tmp_path / "elsewhere"
    outside.write_text("not torch's")
    monkeypatch.syspath_prepend(str(root / "pkg"))
    recorder.start((str(root) + os.sep,))
    with open(root / "a", "rb") as f:
        f.read()
    with io.open(str(root / "b").encode(), "rb") as f:  # noqa: UP020 (the name pathlib calls)
        f.read()
    (root / "c").read_bytes()  # pathlib
    os.close(os.open(root / "d", os.O_RDONLY))
    assert importlib.import_module("generated_wrapper").VALUE == 42  # read through io.open_code
    outside.read_text()
    with open(os.open(root / "a", os.O_RDONLY), "rb") as f:  # a descriptor: its path was seen at os.open
        f.read()
    recorder.stop()
    (root / "later").write_text("after the cell")
    expected = {str(root / name) for name in ("a", "b", "c", "d")} | {str(root / "pkg" / "generated_wrapper.py")}
    assert expected <= recorder.opened  # with the import's look for its .pyc
    assert all(path.startswith(str(root) + os.sep) for path in recorder.opened)
    assert _now() == ORIGINALS  # nothing of ours is left between cells
    sys.modules.pop("generated_wrapper", None)


def test_each_process_the_cell_starts_counts_once_whichever_way_it_starts(recorder):
    multiprocessing.resource_tracker.ensure_running()  # a process of its own, which spawn starts once
    recorder.start(("/nonexistent/",))
    subprocess.run(["true"], check=True)  # Popen, which may call os.posix_spawn under it: one start
    assert recorder.processes == 1
    os.system("true")
    assert recorder.processes == 2
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert recorder.processes == 3
    process = multiprocessing.get_context("spawn").Process(target=_child)  # torch.multiprocessing.spawn's way
    process.start()
    process.join()
    assert process.exitcode == 0 and recorder.processes == 4


def test_processes_torchs_compiler_starts_for_its_own_compiles_do_not_count(recorder):
    torch = pytest.importorskip("torch")
    inductor = os.path.join(os.path.dirname(torch.__file__), "_inductor")
    recorder.start(("/nonexistent/",))
    # code whose file is in torch's compiler, as its C++ builds and compile workers are started
    exec(compile("import subprocess\nsubprocess.run(['true'], check=True)", os.path.join(inductor, "x.py"), "exec"))
    assert recorder.processes == 0
    subprocess.run(["true"], check=True)
    assert recorder.processes == 1


def test_a_wrapper_placed_over_ours_during_the_cell_is_left_working(tmp_path, recorder):
    path = tmp_path / "file"
    path.write_text("text")
    seen = []
    recorder.start((str(tmp_path) + os.sep,))
    ours = builtins.open

    def theirs(*args, **kwargs):  # another tool's patch, made during the cell
        seen.append(args[0])
        return ours(*args, **kwargs)

    builtins.open = theirs
    try:
        recorder.stop()
        assert builtins.open is theirs and io.open is ORIGINALS["io.open"]
        with open(path) as f:  # ours, under theirs, now passes calls through
            assert f.read() == "text"
        assert seen == [path] and recorder.opened == set()
    finally:
        builtins.open = ORIGINALS["open"]


def test_a_second_start_inside_a_recording_keeps_one_layer_of_wrappers(tmp_path, recorder):
    recorder.start((str(tmp_path) + os.sep,))
    wrapped = builtins.open
    recorder.start((str(tmp_path) + os.sep,))
    assert builtins.open is wrapped and builtins.open is io.open
    pathlib.Path(tmp_path / "f").write_text("x")
    assert recorder.opened == {str(tmp_path / "f")}
