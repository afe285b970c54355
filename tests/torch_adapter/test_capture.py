"""capture.py: which files of torch's cache dirs one cell compiled or used, found by watching real file operations
(a listing before and after, the opens open_recorder.py sees) in a cache dir of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from jupyter_compile_cache.torch_adapter import capture, layers


def _write(root, rel: str, data: bytes = b"x") -> str:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _roots(tmp_path) -> dict[str, str]:
    inductor = os.path.realpath(tmp_path / "inductor")
    os.makedirs(inductor)
    return {"inductor": inductor, "triton": os.path.join(inductor, "triton", "0")}


def test_a_cell_takes_what_it_wrote_and_what_it_read_and_nothing_else(tmp_path):
    roots = _roots(tmp_path)
    old_graph = _write(roots["inductor"], "fxgraph/aa/old-graph", b"old")
    untouched = _write(roots["inductor"], "fxgraph/bb/other-graph", b"other")
    outside = str(tmp_path / "elsewhere.txt")
    watcher = capture.CellCapture(roots)
    watcher.start()
    _write(roots["inductor"], "aotautograd/cc/new-entry", b"new")
    _write(roots["inductor"], "triton/0/KEY/kernel.cubin", b"\0" * 10)
    _write(roots["inductor"], "locks/some.lock")  # bookkeeping: never bundled
    with open(old_graph, "rb") as f:  # read, not written: a cache hit the next kernel needs too
        f.read()
    with open(outside, "w") as f:
        f.write("not torch's")
    files = watcher.collect()
    assert sorted(files.files) == [
        "inductor/aotautograd/cc/new-entry",
        "inductor/fxgraph/aa/old-graph",
        "inductor/triton/0/KEY/kernel.cubin",
    ]
    assert files.new_by_layer == {"aot_autograd": 1, "kernels": 1}  # what it read is used, not new
    assert untouched not in files.files.values()
    assert files.layer_bytes() == {"aot_autograd": 3, "fx_graph": 3, "kernels": 10}


def test_a_file_read_through_a_symlinked_cache_dir_is_taken(tmp_path, monkeypatch):
    """TORCHINDUCTOR_CACHE_DIR a symlink to the real folder (a scratch disk): torch opens its files by the link's
    name, the roots are resolved; a cache hit read that way is the cell's all the same (it used to be missed, and a
    cell that only hit torch's caches saved nothing even with --force-save)."""
    real = tmp_path / "scratch"
    real.mkdir()
    link = tmp_path / "cache-link"
    link.symlink_to(real)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(link))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    roots = capture.cache_roots()
    assert roots["inductor"] == os.path.realpath(real)
    graph = _write(str(real), "fxgraph/aa/graph", b"graph")
    watcher = capture.CellCapture(roots)
    watcher.start()
    with open(os.path.join(link, "fxgraph", "aa", "graph"), "rb") as f:
        f.read()
    files = watcher.collect()
    assert files.files == {"inductor/fxgraph/aa/graph": os.path.realpath(graph)}


def test_links_inside_the_cache_dir_that_lead_out_of_it_are_never_taken(tmp_path):
    """A file or a folder under the root that is a link to somewhere else: its target is not torch's cache, so it
    is not bundled, whichever way the link was made; a plain file written beside them is."""
    roots = _roots(tmp_path)
    secret = tmp_path / "home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not torch's")
    watcher = capture.CellCapture(roots)
    watcher.start()
    os.makedirs(os.path.join(roots["inductor"], "fxgraph", "aa"))
    os.symlink(secret, os.path.join(roots["inductor"], "fxgraph", "aa", "linked-file"))
    os.symlink(secret.parent, os.path.join(roots["inductor"], "fxgraph", "linked-folder"))
    _write(roots["inductor"], "fxgraph/bb/graph", b"graph")
    files = watcher.collect()
    assert files.files == {"inductor/fxgraph/bb/graph": os.path.join(roots["inductor"], "fxgraph", "bb", "graph")}


def test_only_the_cells_own_precompile_entries_are_taken(tmp_path):
    roots = _roots(tmp_path)
    watcher = capture.CellCapture(roots)
    watcher.start()
    _write(roots["inductor"], "dynamo/mine/entry")
    _write(roots["inductor"], "dynamo/another-cells/entry")
    _write(roots["inductor"], "dynamo/code_state_mine.pkl")  # automatic-dynamic memory: its own layer (pgo)
    files = watcher.collect(dynamo_keys={"mine"})
    assert sorted(files.files) == ["inductor/dynamo/code_state_mine.pkl", "inductor/dynamo/mine/entry"]
    assert {"mine", "another-cells"} <= capture.all_precompile_keys(roots)  # the API's save bundles every entry


def test_a_restored_entry_is_carried_forward_only_if_the_cell_used_it(tmp_path):
    roots = _roots(tmp_path)
    used = _write(roots["inductor"], "fxgraph/aa/used")
    stale = _write(roots["inductor"], "fxgraph/bb/stale")  # the graph of code since edited: never opened
    kernel = _write(roots["inductor"], "ab/kernel.so")  # not keyed: loaded through dlopen, carried as restored
    watcher = capture.CellCapture(roots, restored=[used, stale, kernel])
    watcher.start()
    with open(used, "rb") as f:
        f.read()
    files = watcher.collect()
    assert sorted(files.files) == ["inductor/ab/kernel.so", "inductor/fxgraph/aa/used"]
    assert files.new_by_layer == {}


def test_another_versions_files_restored_during_the_cell_are_not_its_work(tmp_path):
    # A function's code matched an entry of another version, installed while the cell ran: its files are carried
    # only if used, and never count as new work; what the cell itself wrote still does.
    roots = _roots(tmp_path)
    watcher = capture.CellCapture(roots)
    watcher.start()

    def placed(rel: str) -> str:  # as a restore writes: staged, then renamed into place (no open of the final path)
        final = os.path.join(roots["inductor"], rel)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(_write(str(tmp_path / "staging"), rel.replace("/", "_")), final)
        return final

    used, unused = placed("fxgraph/aa/their-graph"), placed("fxgraph/bb/their-other-graph")
    aside = placed("dynamo/.jcc-versions/v1/key/entry")  # entries beside torch's: never taken
    watcher.add_restored([used, unused, aside])
    with open(used, "rb") as f, open(aside, "rb") as g:
        f.read(), g.read()
    _write(roots["inductor"], "aotautograd/cc/mine")
    files = watcher.collect(dynamo_keys=set())
    assert sorted(files.files) == ["inductor/aotautograd/cc/mine", "inductor/fxgraph/aa/their-graph"]
    assert files.new_by_layer == {"aot_autograd": 1}


def test_new_files_count_as_new_work_only_when_a_graph_layer_missed(tmp_path):
    roots = _roots(tmp_path)
    watcher = capture.CellCapture(roots)
    watcher.start()
    _write(roots["inductor"], "triton/0/KEY/kernel.cubin")  # torch writes kernels out of a cached graph too
    files = watcher.collect()
    nothing = {name: {"hits": 0, "misses": 0, "bypasses": 0} for name in layers.GRAPH_LAYERS}
    graph_hit = nothing | {"fx_graph": {"hits": 1, "misses": 0, "bypasses": 0}}
    graph_miss = nothing | {"fx_graph": {"hits": 0, "misses": 1, "bypasses": 0}}
    assert not files.compiled_new(graph_hit, frames=1)
    assert files.compiled_new(graph_miss, frames=1)
    # Nothing compiled in this process: kernels written out of cached graphs (by the processes a cell started)
    # are no new work.
    assert not files.compiled_new(nothing, frames=0)


def test_what_processes_the_cell_started_compiled_is_new_work_and_their_unfinished_files_are_left_out(tmp_path):
    roots = _roots(tmp_path)
    _write(roots["inductor"], "fxgraph/aa/old-graph/0")
    _write(roots["inductor"], "cc/restored-kernel.so")
    watcher = capture.CellCapture(roots)
    watcher.start()
    subprocess.run(["true"], check=True)  # a process started in the cell (its writes are not this process's)
    _write(roots["inductor"], "cc/restored-kernel.so")  # rewritten where it was: a rank that loaded it
    nothing = {name: {"hits": 0, "misses": 0, "bypasses": 0} for name in layers.GRAPH_LAYERS}
    rewritten = watcher.collect()
    assert rewritten.processes == 1 and rewritten.compiled_elsewhere() == 0
    assert not rewritten.compiled_new(nothing, frames=0)
    # the session adds each layer's files written to its counts: those are no lookups of this process
    assert not rewritten.compiled_new({name: {**c, "written": 1} for name, c in nothing.items()}, frames=0)
    watcher.start()
    subprocess.run(["true"], check=True)
    _write(roots["inductor"], "fxgraph/bb/rank0-graph/0")  # as ranks write them: new paths
    _write(roots["inductor"], "dd/rank1-kernel.so")
    _write(roots["inductor"], "fxgraph/ee/.4242.139.tmp")  # a rank killed mid-write
    _write(roots["inductor"], "triton/1/tmp.pid_4242_77/kernel.cubin")
    files = watcher.collect()
    assert sorted(files.files) == ["inductor/dd/rank1-kernel.so", "inductor/fxgraph/bb/rank0-graph/0"]
    assert files.compiled_elsewhere() == 2
    assert files.compiled_new(nothing, frames=0)
    assert files.compiled_new(nothing, frames=0, restored=True)  # a new graph entry: new work after a restore too
    # After a restore, ranks that only rebuilt kernels (torch re-tunes them at run time) compiled nothing new.
    watcher.start()
    subprocess.run(["true"], check=True)
    _write(roots["inductor"], "triton/0/NEWKEY/triton_per_fused_sum_0.cubin")
    _write(roots["inductor"], "ff/retuned-kernel.py")
    retuned = watcher.collect()
    assert retuned.compiled_elsewhere() == 2 and retuned.created_graphs == 0
    assert not retuned.compiled_new(nothing, frames=0, restored=True)
    assert retuned.compiled_new(nothing, frames=0)  # nothing restored: what the ranks built is the bundle


def test_a_process_without_torchs_compiler_tells_its_isa_probes_apart_without_importing_torch(tmp_path):
    """The parent of a job's processes (jupyter-compile-cache run) never imports torch: the probes' sources are read
    from torch's file, and they are exactly the module's."""
    from torch._inductor import cpu_vec_isa

    probe = cpu_vec_isa.VecISA._avx_code
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "probe.cpp").write_text(probe)
    (tmp_path / "ab" / "probe.so").write_bytes(b"so")
    (tmp_path / "ab" / "kernel.cpp").write_text('extern "C" void kernel() {}')
    code = (
        "import json, sys; from jupyter_compile_cache.torch_adapter import capture; "
        f"paths = {{str(p) for p in __import__('pathlib').Path({str(tmp_path)!r}).rglob('*.*')}}; "
        "found = capture._isa_probe_programs(paths); snippets = capture.probe_snippets(); "
        "print(json.dumps([sorted(found), sorted(s.decode() for s in snippets), 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found, snippets, imported = json.loads(out.stdout)
    assert not imported
    assert found == [str(tmp_path / "ab" / "probe.cpp"), str(tmp_path / "ab" / "probe.so")]
    assert set(snippets) == {s.decode() for s in capture.probe_snippets()}  # this process has the module loaded


def test_cache_roots_follow_torchs_environment_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "ind"))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    roots = capture.cache_roots()
    inductor = os.path.realpath(tmp_path / "ind")
    assert roots == {"inductor": inductor, "triton": os.path.join(inductor, "triton", "0")}
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "tri"))
    assert capture.cache_roots()["triton"] == os.path.realpath(tmp_path / "tri")
    assert capture.member_name(os.path.join(inductor, "fxgraph", "a"), capture.cache_roots()) == "inductor/fxgraph/a"
    assert capture.member_name(str(tmp_path / "nowhere"), capture.cache_roots()) is None
