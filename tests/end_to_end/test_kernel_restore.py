"""The restart story in real kernels: compile, restart on an EMPTY cache dir, restore, and never run stale code.

Every test here drives ipykernel through jupyter_client and compiles with real torch.compile on the CPU.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil

import pytest
from helpers.cells import COMPILE, DEFINE
from helpers.kernels import misses

from jupyter_compile_cache.storage.bundle import Member, members_digest
from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytestmark = pytest.mark.slow


def _start(kernel_factory, dirs, cache="cache_a", **env):
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs[cache], JUPYTER_COMPILE_CACHE_DIR=dirs["store"], **env)
    k.run("%load_ext jupyter_compile_cache").check()
    return k


def _compile(k, name="net", options="", define=DEFINE):
    k.run(define).check()
    out = k.run(COMPILE.format(name=name, options=options)).check()
    assert "MATCHES_EAGER True" in out.stdout, out.output
    return out


def test_restart_on_empty_cache_dir_restores_with_no_misses(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    first = _compile(k)
    assert "saved" in first.stdout
    cold = k.counters()
    assert cold["inductor"]["fxgraph_cache_miss"] >= 1  # it really compiled

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})  # a new kernel on an EMPTY cache dir
    assert os.listdir(dirs["cache_b"]) == []
    k.run("%load_ext jupyter_compile_cache").check()
    second = _compile(k)
    assert "restored 'net' from the local store" in second.stdout
    assert "nothing new to save" in second.stdout
    warm = k.counters()
    assert misses(warm) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    # through precompile where this torch's is used (2.11 on); torch 2.10 restores the FX graph and AOTAutograd layers
    precompiled = PrecompileGuard.available()
    assert warm.get("dynamo_cache", {}).get("dynamo_cache_hit", 0) >= 1 if precompiled else "dynamo_cache" not in warm

    # torch issue: after a precompile entry is installed, the next fresh compile in __main__ used to fail with
    # "Name '__builtins_dict___0' already exists in scope". It must compile and run.
    out = k.run(
        "f = torch.compile(lambda a: a.cos() + 1)\nprint('OK', float(f(x).sum()) == float((x.cos() + 1).sum()))"
    )
    assert "OK True" in out.check().stdout

    status = k.value("[(r.layer, r.hits) for r in __import__('jupyter_compile_cache').status().layers]")
    assert dict(status)["dynamo_precompile"] >= 1 if precompiled else dict(status)["aot_autograd"] >= 1


# CI runs on the CPU; JCC_TEST_DEVICE=cuda runs this one on a GPU.
DEVICE = os.environ.get("JCC_TEST_DEVICE", "cpu")
SHAPES = """
import torch
torch.manual_seed(0)
def decode_step(t):
    return (t.sin() * 2).cumsum(0) + t.cos()
short, long = torch.randn(6, device={device!r}), torch.randn(9, device={device!r})
"""
# One function compiled in the first cell (as the decode recipe does) and called at two input sizes by two cells:
# the second size recompiles with a dynamic length (torch's automatic dynamic), and the second cell's bundle holds
# the function's entry with both graphs.
SHORT = "%%compile_cache short\nstep = torch.compile(decode_step)\nwith torch.no_grad():\n    a = step(short)\n"
SHORT += "print('A', a.tolist())"
LONG = "%%compile_cache long\nwith torch.no_grad():\n    b = step(long)\nprint('B', b.tolist())"
# How many compiled graphs torch loaded (its own timer, one entry a load).
LOADS = (
    "len(__import__('torch._dynamo.utils', fromlist=['x']).compilation_time_metrics['AOTAutogradCache.inductor_load'])"
)
TRACES = "__import__('torch._dynamo.utils', fromlist=['counters']).counters['stats']['unique_graphs']"


# Reductions that Triton tunes at their first run (several configs each), their results kept in `.best_config` files.
TUNED = """
import torch
torch.manual_seed(0)
w = torch.randn(512, 2048, device="cuda")
x, rows = torch.randn(256, 512, device="cuda"), torch.randn(64, 65536, device="cuda")
def scores(t, r):
    h = torch.softmax(t @ w, dim=-1)
    return torch.nn.functional.layer_norm(h, h.shape[-1:]).sum(-1), r.pow(2).mean(-1)
"""
TUNED_CELL = (
    "%%compile_cache tuned\nf = torch.compile(scores)\na, b = f(x, rows)\n"
    "print('OUT', [float.hex(v) for v in (a.sum().item(), b.sum().item())])"
)


def _best_configs(cache_dir) -> dict[str, str]:
    return {os.path.basename(p): open(p).read() for p in glob.glob(os.path.join(cache_dir, "*", "*.best_config"))}


@pytest.mark.skipif(DEVICE != "cuda", reason="only Triton kernels (a GPU: JCC_TEST_DEVICE=cuda) are tuned at run time")
def test_a_restored_triton_kernel_keeps_its_tuned_config_in_another_cache_dir(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    k.run(TUNED).check()
    cold = k.run(TUNED_CELL).check()
    tuned = _best_configs(dirs["cache_a"])
    assert tuned, "no kernel of the cell was tuned at run time: this test would show nothing"

    # A new kernel on another, empty cache dir, and the cold run's dir gone, as on a colleague's machine: the
    # kernels loaded from the FX graph cache still name their source files there.
    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    shutil.rmtree(dirs["cache_a"])
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(TUNED).check()
    warm = k.run(TUNED_CELL).check()
    assert "restored 'tuned'" in warm.stdout
    assert misses(k.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    # No kernel was tuned again: torch saved no new result, here or in the old dir.
    assert _best_configs(dirs["cache_b"]) == tuned
    assert not os.path.exists(dirs["cache_a"])
    assert re.findall(r"OUT .*", warm.stdout) == re.findall(r"OUT .*", cold.stdout)


def test_a_later_cells_input_size_restores_without_a_new_trace(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    k.run(SHAPES.format(device=DEVICE)).check()
    cold = [k.run(cell).check().stdout for cell in (SHORT, LONG)]
    assert k.value(TRACES) == 2 and all("saved" in out for out in cold)

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(SHAPES.format(device=DEVICE)).check()
    restored = [k.run(cell).check().stdout for cell in (SHORT, LONG)]
    # plain torch.compile's answers, to the bit: the same graphs the cold kernel ran
    for before, after in zip(cold, restored):
        assert [x for x in before.splitlines() if x[:2] in ("A ", "B ")] == [
            x for x in after.splitlines() if x[:2] in ("A ", "B ")
        ]
    assert "restored 'long'" in restored[1] and "nothing new to save" in restored[1]
    counters = k.counters()
    assert misses(counters) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    if PrecompileGuard.available():  # torch 2.11 on: no size is traced again
        assert k.value(TRACES) == 0
        # The second cell's entry holds both graphs; the one the function already had is not loaded again.
        assert k.value(LOADS) == 2


# Every instance: each `torch.compile` makes a package of its own, and torch keeps one entry per function, the last
# package's; a class at two sizes (its objects differ) and a function wrapped twice, at two dtypes (one code, one
# object), in one cell, then a third dtype and a third size in a later cell.
INSTANCES = """
class Block(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = torch.nn.Linear(n, n)
    def forward(self, t):
        return self.lin(t).relu() * 2
small, big = Block(8), Block(24)
"""
TWO = (
    "%%compile_cache two\nwith torch.no_grad():\n"
    "    outs = [torch.compile(small)(torch.ones(3, 8)), torch.compile(big)(torch.ones(3, 24)),\n"
    "            torch.compile(decode_step)(short), torch.compile(decode_step)(short.double())]\n"
    "print('TWO', [o.sum().item() for o in outs])"
)
THIRD = (
    "%%compile_cache third\nwith torch.no_grad():\n    o = torch.compile(decode_step)(short.bfloat16())\n"
    "    o2 = torch.compile(Block(40))(torch.ones(3, 40))\n"
    "print('THIRD', o.float().sum().item(), o2.sum().item() > 0)"
)


@pytest.mark.skipif(not PrecompileGuard.available(), reason="torch 2.11 on: Dynamo's entries restored")
def test_every_instance_of_one_code_restores_without_a_trace(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    k.run(SHAPES.format(device=DEVICE) + INSTANCES).check()
    cold = [k.run(cell).check().stdout for cell in (TWO, THIRD)]
    assert k.value(TRACES) == 6 and all("saved" in out for out in cold)

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(SHAPES.format(device=DEVICE) + INSTANCES).check()
    restored = [k.run(cell).check().stdout for cell in (TWO, THIRD)]
    assert [re.findall(r"(?:TWO|THIRD) .*", out) for out in restored] == [
        re.findall(r"(?:TWO|THIRD) .*", out) for out in cold
    ]
    assert misses(k.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
    assert k.value(TRACES) == 0, restored


@pytest.mark.skipif(not PrecompileGuard.available(), reason="torch 2.11 on: entries installed into live functions")
def test_an_older_or_narrower_bundle_never_drops_graphs_the_live_function_has(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    k.run(SHAPES.format(device=DEVICE)).check()
    for cell in (SHORT, LONG):
        k.run(cell).check()

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(SHAPES.format(device=DEVICE)).check()
    k.run(SHORT).check()
    # A graph this kernel compiles for itself (float64), not in any bundle.
    k.run("%%compile_cache wide\nwith torch.no_grad():\n    w = step(short.double())").check()
    assert k.value(TRACES) == 1
    # 'long' holds the short and long graphs but not this kernel's float64 one: taking it would drop that graph
    # from what the function saves. The function keeps its graphs; the long size is traced (its compiled graph
    # still comes from the bundle's FX and AOTAutograd entries: 0 misses).
    out = k.run(LONG).check()
    assert "0 misses" in out.stdout
    traces = k.value(TRACES)
    k.run("with torch.no_grad():\n    w2 = step(short.double())").check()
    assert k.value(TRACES) == traces  # the float64 graph is still there
    # A cell under the first name brings back its older entry (the short graph alone): the live function keeps
    # what it has, and the long size is not traced again.
    out = k.run("%%compile_cache short --no-save\nwith torch.no_grad():\n    b2 = step(long)").check()
    assert "restored 'short'" in out.stdout
    assert k.value(TRACES) == traces
    assert k.value("torch.equal(b2, step(long))")


@pytest.mark.parametrize(
    "edit",
    [
        (".sin()", ".tanh()"),  # the measured hazard: same class, same line, new body
        ("x.relu()", "x.abs()"),  # a helper the forward calls
        ("SCALE = 2.0", "SCALE = 3.0"),  # a global it reads
    ],
    ids=["forward", "helper", "global"],
)
def test_edited_code_never_runs_stale_compiled_code(kernel_factory, dirs, edit):
    k = _start(kernel_factory, dirs)
    _compile(k)
    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    out = _compile(k, options="--no-save", define=DEFINE.replace(*edit))  # asserts MATCHES_EAGER True
    assert "restored 'net'" in out.stdout
    if PrecompileGuard.available():  # without precompile (torch 2.10) the edited graph simply misses the caches
        assert re.search(r"stale precompile entr(y|ies) refused", out.stdout), out.stdout
        assert k.counters()["jupyter_compile_cache"]["precompile_stale_rejected"] == 1


def test_training_step_restores_forward_and_backward(kernel_factory, dirs):
    train = """%%compile_cache train
compiled = torch.compile(model)
loss = compiled(x).pow(2).mean()
loss.backward()
grad = model.l1.weight.grad.clone()
model.zero_grad()
model(x).pow(2).mean().backward()
print("GRAD_MATCHES", torch.allclose(grad, model.l1.weight.grad, atol=1e-5))
"""
    k = _start(kernel_factory, dirs)
    k.run(DEFINE).check()
    assert "GRAD_MATCHES True" in k.run(train).check().stdout
    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(DEFINE).check()
    out = k.run(train).check()
    assert "GRAD_MATCHES True" in out.stdout and "restored 'train'" in out.stdout
    assert misses(k.counters()) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}


def test_without_precompile_fx_and_aot_layers_hit(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    _compile(k, options="--no-precompile")
    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    _compile(k, options="--no-precompile")
    c = k.counters()
    assert c["inductor"]["fxgraph_cache_hit"] >= 1 or c["aot_autograd"]["autograd_cache_hit"] >= 1
    assert misses(c) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}


# torch makes a function's precompile package when torch.compile is called: a model compiled in an earlier, plain
# cell has none, and restores through torch's graph caches (traced again, compiled nothing). A torch without
# precompile restores every function that way: there is nothing to say.
COMPILED_BEFORE = DEFINE + "compiled = torch.compile(model)\n"
CALL = """%%compile_cache net
with torch.no_grad():
    y = compiled(x)
print("MATCHES_EAGER", torch.allclose(y, model(x), atol=1e-5))
"""


def test_a_model_compiled_before_the_cell_restores_through_the_graph_caches_and_says_why(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    told = 1 if PrecompileGuard.available() else 0
    k.run(COMPILED_BEFORE).check()
    out = k.run(CALL).check()
    assert "MATCHES_EAGER True" in out.stdout and "saved" in out.stdout, out.output
    assert out.output.count("given to torch.compile outside a %%compile_cache cell") == told, out.output
    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(COMPILED_BEFORE).check()
    out = k.run(CALL).check()
    assert "MATCHES_EAGER True" in out.stdout and "restored 'net'" in out.stdout, out.output
    assert ("call torch.compile in the cell" in out.output) == bool(told)  # why the restored kernel traced again
    c = k.counters()
    assert c["inductor"].get("fxgraph_cache_hit", 0) + c["aot_autograd"].get("autograd_cache_hit", 0) >= 1, c
    assert {k: v for k, v in misses(c).items() if k != "dynamo_cache_miss"} == {
        "fxgraph_cache_miss": 0,
        "autograd_cache_miss": 0,
    }


def test_failing_cell_saves_nothing_and_reraises_the_users_exception(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    k.run(DEFINE).check()
    out = k.run("%%compile_cache broken\ny = torch.compile(model)(x)\nraise ValueError('user bug 42')")
    assert out.error["ename"] == "ValueError" and out.error["evalue"] == "user bug 42"
    assert out.status == "error"
    assert k.value("[b.name for b in __import__('jupyter_compile_cache').bundles()]") == []


def test_last_expression_is_displayed_like_a_normal_cell(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    out = k.run("%%compile_cache plain --no-save\n1 + 41").check()
    assert out.results == ["42"]


def _only_version(dirs, name):
    manifests = glob.glob(str(dirs["store"] / "bundles" / name / "*.json"))
    assert len(manifests) == 1
    return manifests[0]


def _edit_manifest(dirs, name, edit):
    path = _only_version(dirs, name)
    with open(path) as f:
        manifest = json.load(f)
    edit(manifest)
    members = [Member(m["name"], m["size"], m["sha256"]) for m in manifest["members"]]
    manifest["payload_sha256"] = members_digest(members)  # a consistent manifest: its check is not what trips
    with open(path, "w") as f:
        json.dump(manifest, f)


def test_damaged_incompatible_or_unsafe_bundles_are_skipped_with_the_reason(kernel_factory, dirs):
    """Three bundles of one kernel, each spoiled its own way, restored after one restart on an empty cache dir."""
    k = _start(kernel_factory, dirs)
    _compile(k, name="damaged")
    for name in ("foreign", "unsafe"):
        # the compiled model forgotten in memory, so the cell compiles again (from torch's caches) and has files to
        # save on every torch: before 2.11 (no precompile) a cell that reuses the in-memory model has none
        k.run("torch._dynamo.reset()").check()
        out = k.run(COMPILE.format(name=name, options="--force-save")).check()
        assert "saved" in out.stdout
    payload = _only_version(dirs, "damaged").replace(".json", ".pack")
    with open(payload, "r+b") as f:
        f.truncate(os.path.getsize(payload) // 2)
    _edit_manifest(dirs, "foreign", lambda m: m["fingerprint"].update(torch="2.7.0+other"))
    _edit_manifest(dirs, "unsafe", lambda m: m["members"][0].update(name="inductor/../../escaped.py"))
    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()

    out = _compile(k, name="damaged")  # damaged: quarantined, compiled cold, saved again
    said = out.stdout + out.stderr  # the reason is said once, in the line that says it was not restored
    assert said.count(": damaged:") == 1 and "quarantine" in said, said
    assert "saved" in out.stdout
    assert glob.glob(str(dirs["store"] / "quarantine" / "damaged" / "*.reason"))
    assert k.counters()["inductor"]["fxgraph_cache_miss"] >= 1

    out = k.run(COMPILE.format(name="foreign", options="--no-save")).check()  # another torch: skipped, said why
    assert "not restored" in out.stdout and "incompatible" in out.stdout and "2.7.0+other" in out.stdout
    explained = repr(k.run("%compile_cache explain foreign").check().results)
    assert "MISMATCH" in explained and "would NOT restore" in explained

    out = k.run(COMPILE.format(name="unsafe", options="--no-save")).check()  # a path out of the cache: refused
    assert "refused (unsafe)" in out.stdout + out.stderr and "MATCHES_EAGER True" in out.stdout
    assert not list(dirs["cache_b"].parent.glob("escaped.py"))
    assert not list(dirs["cache_b"].parent.parent.glob("escaped.py"))


def test_unwritable_store_warns_and_the_cells_result_stands(kernel_factory, dirs):
    blocker = dirs["store"] / "not-a-dir"
    blocker.write_text("a file where the store should be")
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=blocker / "store")
    k.run("%load_ext jupyter_compile_cache").check()
    out = _compile(k)
    assert "could not save bundle 'net'" in out.stderr
    assert k.value("float(y.sum())") == pytest.approx(k.value("float(expected.sum())"), rel=1e-5)


def test_status_list_explain_enable_disable(kernel_factory, dirs):
    k = _start(kernel_factory, dirs, COLUMNS="40")  # a notebook's text is never wrapped, even with $COLUMNS exported
    _compile(k)
    status = repr(k.run("%compile_cache status").check().results)
    for title in ("Dynamo precompile", "AOTAutograd", "FX graph", "Inductor/Triton kernels", "Autotune", "PGO"):
        assert title in status
    listing = repr(k.run("%compile_cache list").check().results)
    assert "net" in listing and "yes" in listing
    explained = repr(k.run("%compile_cache explain net").check().results)
    assert "WOULD RESTORE" in explained and "last run of this cell" in explained
    k.run("%compile_cache disable fx_graph").check()
    assert k.value("__import__('torch._inductor.config').__dict__['_inductor'].config.fx_graph_cache") is False
    k.run("%compile_cache enable fx_graph").check()
    assert k.value("__import__('torch._inductor.config').__dict__['_inductor'].config.fx_graph_cache") is True
    k.run("%compile_cache disable precompile").check()
    assert k.value("__import__('jupyter_compile_cache').get_session().precompile_default") is False
    k.run("%compile_cache rm net").check()
    assert k.value("[b.name for b in __import__('jupyter_compile_cache').bundles()]") == []


def test_unload_removes_magics_and_hooks(kernel_factory, dirs):
    k = _start(kernel_factory, dirs)
    _compile(k)
    # its shutdown stops compile workers first (patched by the extension; in a kernel of the warm spec, already by
    # the launcher, for the kernel's whole life)
    stops_workers = "hasattr(get_ipython().kernel.do_shutdown, '_jupyter_compile_cache_stops_compile_workers')"
    assert k.value(stops_workers) is True
    k.run("%unload_ext jupyter_compile_cache").check()
    assert k.value("'do_shutdown' in vars(get_ipython().kernel)") is False  # the extension's own patch is gone
    out = k.run("%compile_cache status")
    assert out.usage_error and "not found" in out.usage_error
    hooks = "[f.__qualname__ for e in ('pre_run_cell', 'post_run_cell') for f in get_ipython().events.callbacks[e]]"
    assert not [name for name in k.value(hooks) if name.startswith("Prewarm.")]
    assert (
        k.value("'load' in vars(__import__('torch._dynamo.package').__dict__['_dynamo'].package.DynamoCache)") is False
    )
    k.run("%load_ext jupyter_compile_cache").check()  # and it comes back cleanly
    k.run("%compile_cache status").check()


def test_load_ext_without_torch_says_so(kernel_factory, dirs):
    k = kernel_factory(JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    out = k.run(
        "import sys\nsys.modules['torch'] = None  # torch absent from this kernel\n%load_ext jupyter_compile_cache"
    )
    assert out.usage_error and "needs PyTorch" in out.usage_error
