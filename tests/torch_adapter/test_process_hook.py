"""The process hook handed to the processes a cell starts (torch_adapter/process_hook.py): the cell's environment for
them and its end, the records they leave (their counts, and with precompile carried, its entries), and real processes
started under it (the ranks themselves are tests/end_to_end/test_worker_processes.py's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from jupyter_compile_cache.failure import Failure
from jupyter_compile_cache.torch_adapter import process_hook
from jupyter_compile_cache.torch_adapter.miss_reasons import PrecompileStep


def test_the_environment_is_the_cells_only_while_its_body_runs(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.delenv(process_hook.RECORDS_ENV, raising=False)
    monkeypatch.delenv(process_hook.PRECOMPILE_ENV, raising=False)
    carried = process_hook.Carried(precompile=True)
    carried.start()
    assert os.environ["PYTHONPATH"] == process_hook.START_DIR + os.pathsep + "/somewhere/else"
    assert os.environ[process_hook.RECORDS_ENV] == carried.records and os.environ[process_hook.PRECOMPILE_ENV] == "1"
    carried.stop()
    assert os.environ["PYTHONPATH"] == "/somewhere/else" and process_hook.RECORDS_ENV not in os.environ
    assert process_hook.PRECOMPILE_ENV not in os.environ
    monkeypatch.delenv("PYTHONPATH")
    carried.start()
    assert os.environ["PYTHONPATH"] == process_hook.START_DIR
    carried.stop()
    assert "PYTHONPATH" not in os.environ
    carried.discard()
    assert not os.path.exists(carried.records)


def test_the_records_are_summed_a_cut_short_one_is_not_counted_and_each_trouble_is_told_once():
    carried = process_hook.Carried(precompile=True)
    trouble = {"step": "install", "error": {"kind": "NameError", "message": "x"}, "fallback": True}
    starting = {"step": "start_in_process", "error": "y", "fallback": True}  # a record of another version's
    records = [
        {
            "carried": True,
            "hits": 2,
            "traced": 0,
            "stale": 0,
            "bypassed": [],
            "troubles": [trouble],
            "layers": {"fx_graph": {"hits": 2, "misses": 0}},
        },
        {
            "carried": True,
            "hits": 1,
            "traced": 3,
            "stale": 1,
            "bypassed": ["no graph"],
            "troubles": [trouble],
            "layers": {"fx_graph": {"hits": 1, "misses": 3}, "aot_autograd": {"misses": 1}},
        },
        {"carried": False, "hits": 0, "traced": 0, "troubles": [starting]},
    ]
    for pid, record in enumerate(records):
        with open(os.path.join(carried.records, f"{pid}.json"), "w") as f:
            json.dump(record, f)
    with open(os.path.join(carried.records, "9.json"), "w") as f:
        f.write('{"carried": true, "hits": 5')  # a process killed while writing
    out = carried.collect()
    assert (out.processes, out.hits, out.traced, out.stale, out.bypassed) == (2, 3, 3, 1, ["no graph"])
    assert out.layers == {"fx_graph": {"hits": 3, "misses": 3}, "aot_autograd": {"misses": 1}}
    assert [(t.step, t.error, t.fallback) for t in out.troubles] == [
        (PrecompileStep.INSTALL, Failure("NameError", "x"), True),
        (PrecompileStep.START_IN_PROCESS, Failure("", "y"), True),
    ]
    assert not os.path.exists(carried.records)


def _under_the_hook(
    monkeypatch, code: str, theirs: str | None = None, precompile: bool = True
) -> tuple[str, list[dict]]:
    """CODE's output in a process started under the hook (after THEIRS on its PYTHONPATH; what it logs after a line
    `--- stderr`), and the records left."""
    if theirs:
        monkeypatch.setenv("PYTHONPATH", theirs)
    else:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    carried = process_hook.Carried(precompile)
    carried.start()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    finally:
        carried.stop()
    assert done.returncode == 0, done.stderr
    records = []
    for name in sorted(os.listdir(carried.records)):
        with open(os.path.join(carried.records, name)) as f:
            records.append(json.load(f))
    carried.discard()
    return done.stdout + "--- stderr\n" + done.stderr, records


def test_a_process_that_never_imports_torch_runs_the_sitecustomize_ours_shadows_and_imports_nothing_of_torch(
    monkeypatch, tmp_path
):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("MARK = 'theirs ran'\n")
    code = "import sys, sitecustomize; print(sitecustomize.MARK, 'torch' in sys.modules, len(sys.meta_path))"
    out, records = _under_the_hook(monkeypatch, code, str(theirs))
    plain = subprocess.run([sys.executable, "-c", "import sys; print(len(sys.meta_path))"], capture_output=True,
                           text=True, env=dict(os.environ, PYTHONPATH=str(theirs)))  # fmt: skip
    # theirs ran; torch was not imported; the hook waits for torch with one finder of its own
    assert out.split()[:4] == ["theirs", "ran", "False", str(int(plain.stdout) + 1)]
    assert records == []


def test_a_process_that_imports_torch_but_compiles_nothing_pays_nothing_and_leaves_no_record(monkeypatch):
    code = (
        "import sys, torch; from jupyter_compile_cache.torch_adapter import process_hook as h; "
        "print(hasattr(torch.compile, '__wrapped__'), 'torch._dynamo.package' in sys.modules, h._PROCESS, "
        "any(isinstance(f, h._AfterImport) for f in sys.meta_path), torch.__spec__.loader is torch.__loader__)"
    )
    out, records = _under_the_hook(monkeypatch, code)
    # torch.compile waits to be called; nothing of precompile was imported; the import system is as it was
    assert out.split()[:5] == ["True", "False", "None", "False", "True"]
    assert records == []


def test_each_local_rank_keys_its_entries_apart_and_a_process_of_no_launcher_keeps_torchs_keys():
    from torch._dynamo.package import CompilePackage

    def f(x):
        return x + 1

    torch_key = CompilePackage.source_id_from_fn(f)
    assert process_hook._keys_per_local_rank(None) == []
    keys = {}
    for rank in ("0", "1"):
        patches = process_hook._keys_per_local_rank(rank)
        try:
            keys[rank] = CompilePackage.source_id_from_fn(f)
        finally:
            for patch in patches:
                patch.undo()
    assert len({torch_key, keys["0"], keys["1"]}) == 3 and all(len(key) == 64 for key in keys.values())
    assert CompilePackage.source_id_from_fn(f) == torch_key  # undone


def test_without_precompile_a_process_that_compiles_counts_its_hits_and_misses_and_torch_saves_no_entry(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    code = (
        "import torch; from torch._dynamo.utils import counters; "
        "f = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2); f(torch.ones(4)); "
        "from torch._inductor import config; print(counters['inductor']['fxgraph_cache_miss'], "
        "counters['inductor']['fxgraph_cache_hit'], bool(getattr(config, 'caching_precompile', False)))"
    )
    cold, (record,) = _under_the_hook(monkeypatch, code, precompile=False)
    # torch's own counters in the process, ours in its record: the same; precompile stays off; a CUDA build of torch
    # on a machine without a GPU says nothing of it (tests/torch_adapter/test_compiler.py: a plain process does)
    assert cold.split()[:3] == ["1", "0", "False"] and "No CUDA runtime" not in cold
    assert record["carried"] is False and record["troubles"] == []
    assert record["layers"]["fx_graph"]["misses"] == 1 and record["layers"]["fx_graph"]["hits"] == 0
    warm, (record,) = _under_the_hook(monkeypatch, code, precompile=False)
    assert warm.split()[:3] == ["0", "1", "False"] and record["layers"]["fx_graph"]["hits"] == 1
    assert record["layers"]["fx_graph"]["misses"] == 0
    assert not os.path.exists(tmp_path / "cache" / "dynamo")  # no precompile entry written
    # what it read, for the cell's bundle: the FX graph it hit, and the compiled module's files
    assert any(os.sep + "fxgraph" + os.sep in path for path in record["used"]), record["used"]


def test_a_process_that_could_not_start_the_hook_or_has_no_precompile_leaves_a_record_that_says_so():
    carried = process_hook.Carried(precompile=True)
    process_hook.failed_to_arm(carried.records, RuntimeError("no finder"))
    with open(os.path.join(carried.records, "1.json"), "w") as f:
        json.dump({"carried": False, "troubles": [], "torch_without_precompile": "2.9.1"}, f)
    out = carried.collect()
    assert (out.processes, out.torch_without_precompile) == (0, "2.9.1")
    assert [(t.step, t.error, t.fallback) for t in out.troubles] == [
        (PrecompileStep.START_IN_PROCESS, Failure("RuntimeError", "no finder"), True)
    ]
