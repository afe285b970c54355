"""What precompile_fixes.py puts right in torch's precompile, on the workloads it was found on, in real kernels at tiny
width: a Qwen2's static-cache `generate` with `model.forward = torch.compile(model.forward, mode="reduce-overhead",
fullgraph=True)` and transformers' own compile of the call (its recipe), a compiled `flex_attention`, and a training
step with a compiled forward, backward and AdamW step (torch's compiled-optimizer recipe).

Cold in one kernel, then restored in a new kernel on an empty cache dir: every function restores through precompile
(no fallback), nothing misses, nothing new is saved, and every answer equals the cold run's and eager's. The
compiled optimizer step is the one torch will not package ("Graph contains named parameters due to static
addresses"): it is told once, traced again, and still compiles nothing. transformers' own compile of `generate`
wraps torch's `Module._wrapped_call_impl`, of which Dynamo traces nothing: no entry, and no miss either. The decode
comes back with the CUDA-graph setting of its mode.

A torch without Dynamo's precompile (2.9, 2.10) runs the same cells: there the restored kernel traces again and
every compiled graph comes from torch's AOTAutograd and FX graph caches, with no miss and the same answers.
"""

from __future__ import annotations

import re

import pytest
from helpers.kernels import misses

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytestmark = pytest.mark.slow

SETUP = """
import copy, warnings
import torch
warnings.filterwarnings("ignore")
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.generation import CompileConfig
from torch.nn.attention.flex_attention import flex_attention
torch.manual_seed(0)
qcfg = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=1, max_position_embeddings=48)
qwen = Qwen2ForCausalLM(qcfg).eval()
qwen_eager = copy.deepcopy(qwen)
prompts = [torch.randint(0, 96, (1, n)) for n in (12, 19)]
generate_compiled = CompileConfig(fullgraph=True)
generate_compiled._compile_all_devices = True  # transformers compiles generate's own call on the CPU too
q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
net_eager = copy.deepcopy(net)
opt, opt_eager = (torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (net, net_eager))
x, y = torch.randn(8, 16), torch.randn(8, 4)
def show(tag, t):
    print(tag, [round(float(v), 5) for v in t.flatten()[:8].tolist()])
# outside our cells: eager flex_attention compiles itself with backend="eager", whose entries torch saves without
# a backend to load them with ("Backend not found"): a %%compile_cache cell leaves such an entry out, and says so
show("FLEX_EAGER", flex_attention(q, k, v))
"""

CELLS = {
    # transformers' recipe with its own compile of the model's call on top: Dynamo traces nothing of that function
    # (torch's `Module._wrapped_call_impl`), which must not count as a miss on restore.
    "generate": """%%compile_cache fix-generate
qwen.forward = torch.compile(qwen.forward, mode="reduce-overhead", fullgraph=True)
with torch.no_grad():
    for n, p in enumerate(prompts):
        kw = dict(max_new_tokens=4, cache_implementation="static", do_sample=False)
        show(f"GENERATE{n}", qwen.generate(p, compile_config=generate_compiled, **kw)[:, -8:])
        show(f"GENERATE{n}_EAGER", qwen_eager.generate(p, **kw)[:, -8:])
""",
    "flex": """%%compile_cache fix-flex
show("FLEX", torch.compile(flex_attention)(q, k, v))
""",
    "adamw": """%%compile_cache fix-adamw
@torch.compile(fullgraph=False)
def opt_step():
    opt.step()
torch.nn.functional.mse_loss(torch.compile(net)(x), y).backward()
opt_step()
torch.nn.functional.mse_loss(net_eager(x), y).backward()
opt_eager.step()
show("ADAMW", net[0].weight)
show("ADAMW_EAGER", net_eager[0].weight)
""",
}


def _values(out: str) -> dict[str, list[float]]:
    return {m.group(1): eval(m.group(2)) for m in re.finditer(r"^([A-Z_0-9]+) (\[.*\])$", out, re.M)}


def _close(a: list[float], b: list[float], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b))


def test_decode_flex_and_compiled_optimizer_restore_whole(kernel_factory, dirs):
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    precompiled = PrecompileGuard.available()  # else every function is traced again, its graphs from torch's caches
    outputs, cudagraph_skips = {}, {}
    for run in ("cold", "restored"):
        if run == "restored":
            k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})  # a new kernel, EMPTY cache dir
        k.run("%load_ext jupyter_compile_cache").check()
        setup = k.run(SETUP).check().output
        out = "".join(k.run(cell).check().output for cell in CELLS.values())
        assert "fell back" not in out and "precompile failed" not in out, out
        if precompiled:
            assert out.count("torch does not package a function") == 1, out  # the optimizer step, told once
            assert "Graph contains named parameters" in out, out  # torch words the rest differently by version
        outputs[run] = _values(setup + out)
        cudagraph_skips[run] = k.counters().get("inductor", {}).get("cudagraph_skips", 0)
        if run == "restored":
            assert all(f"restored 'fix-{name}'" in out for name in CELLS), out
            assert out.count("nothing new to save") == len(CELLS), out
            counters = k.counters()
            assert misses(counters) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
            assert "no saved entry" not in out and "restored entry failed" not in out, out  # none missed or retraced
            assert counters.get("jupyter_compile_cache", {}).get("precompile_fallback", 0) == 0
            if precompiled:
                assert counters["dynamo_cache"]["dynamo_cache_hit"] >= 4, counters  # the decode, flex, forward, step
            else:
                hits = counters["inductor"].get("fxgraph_cache_hit", 0)
                assert hits + counters["aot_autograd"].get("autograd_cache_hit", 0) >= 4, counters
    # The decode's reduce-overhead comes back with it: a restored graph makes the CUDA-graph decision its cold
    # compile made (on the CPU, torch counts each graph it does not capture). torch alone restores with CUDA graphs
    # off, whatever the mode.
    assert cudagraph_skips["restored"] == cudagraph_skips["cold"] > 0, cudagraph_skips
    cold, restored = outputs["cold"], outputs["restored"]
    assert set(cold) == {"FLEX", "FLEX_EAGER", "ADAMW", "ADAMW_EAGER"} | {
        f"GENERATE{n}{eager}" for n in (0, 1) for eager in ("", "_EAGER")
    }, cold
    assert restored == cold  # the restored kernel computes exactly what the cold one did
    assert cold["GENERATE0"] == cold["GENERATE0_EAGER"] and cold["GENERATE1"] == cold["GENERATE1_EAGER"]
    assert _close(cold["FLEX"], cold["FLEX_EAGER"]) and _close(cold["ADAMW"], cold["ADAMW_EAGER"]), cold


NOTHING_TO_COMPILE = """
import sys, torch
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.session import get_session
i = 0
with get_session().cell("noop", CellOptions(store_dir=sys.argv[1], no_hub=True)) as report:
    print("VALUES", torch.compile(lambda x: x + i)(torch.ones(2)).tolist())
from jupyter_compile_cache.frontends.wording import cell_summary
print("SUMMARY", cell_summary(report))
"""


@pytest.mark.skipif(not PrecompileGuard.available(), reason="the bundled AOTAutograd entries of precompile")
def test_a_graph_with_nothing_to_compile_runs_in_a_cell_and_after_a_restore(tmp_path):
    # torch 2.15's precompile raised "expected OutputCode, got <class 'method'>" into the cell for this graph.
    import subprocess
    import sys

    script = tmp_path / "noop.py"
    script.write_text(NOTHING_TO_COMPILE)
    for cache in ("cold", "restored"):
        env = {**__import__("os").environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / cache), "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "store")], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "VALUES [1.0, 1.0]" in done.stdout, done.stdout


CLEAN_COPY = """
import pickle, sys, torch
from torch._functorch._aot_autograd.aot_autograd_result import deserialize_bundled_cache_entry
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.session import get_session
def f(x):
    return torch.sin(x) * 2 + 1
x = torch.arange(4.0)
copying, copies = [], []
def watch(frame, event, arg):  # the deepcopy calls of torch's copy of the entry: all of them, recursion included
    code = frame.f_code
    if code.co_name != "deepcopy" or not code.co_filename.endswith("copy.py"):
        return
    caller = frame.f_back.f_code
    top = caller.co_name == "deserialize_bundled_cache_entry" and caller.co_filename.endswith("aot_autograd_result.py")
    if event == "call" and (top or copying):
        copies.append(1)
        copying.append(1)
    elif event == "return" and copying:
        copying.pop()
sys.setprofile(watch)
with get_session().cell("copy", CellOptions(store_dir=sys.argv[1], no_hub=True)) as report:
    print("VALUES", [round(v, 5) for v in torch.compile(f)(x).tolist()])
sys.setprofile(None)
print("EAGER", [round(v, 5) for v in f(x).tolist()])
print("HITS", report.layers["dynamo_precompile"]["hits"])
print("DEEP_COPIES", len(copies))
for name, backend in list(globals().items()):
    if name.startswith("__compiled_fn") and hasattr(backend, "serialize"):
        entry = backend.serialize()  # the clean copy torch keeps for saving the function again
        print("HOOK_LEFT", "__deepcopy__" in vars(entry))
        again = deserialize_bundled_cache_entry(pickle.loads(pickle.dumps(entry)))
        out = again(x)
        print("AGAIN", [round(v, 5) for v in (out[0] if isinstance(out, (list, tuple)) else out).tolist()])
"""


@pytest.mark.skipif(not PrecompileGuard.available(), reason="the bundled AOTAutograd entries of precompile")
def test_a_restored_backend_keeps_a_clean_copy_that_loads_again(tmp_path):
    # The copy torch keeps of a restored backend is made by a pickle round trip (one deepcopy call, which the hook
    # answers): it must be an entry as saved, which loads again and computes the same answer, with no trace of the
    # hook.
    import subprocess
    import sys

    script = tmp_path / "clean_copy.py"
    script.write_text(CLEAN_COPY)
    outputs = {}
    for cache in ("cold", "restored"):
        env = {**__import__("os").environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / cache), "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "store")], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[cache] = _values(done.stdout)
        if cache == "restored":
            assert "HITS 1" in done.stdout, done.stdout
            assert "HOOK_LEFT False" in done.stdout, done.stdout
            # torch's deepcopy of the entry recurses through every object in it; the round trip is one call
            assert "DEEP_COPIES 1\n" in done.stdout, done.stdout
    eager = outputs["cold"]["EAGER"]
    assert _close(outputs["cold"]["VALUES"], eager)
    assert _close(outputs["restored"]["VALUES"], eager)
    assert _close(outputs["restored"]["AGAIN"], eager)


# A function turned into an object of a class made inside a function, and a model holding its own instance of that
# class, as the `kernels` package does for transformers 5.25's Llama, Qwen2 and Mistral (`_create_func_module`); and a
# config whose property makes a new view at each look, read through its own `__getattribute__`, as transformers 5.2x's
# `config.per_layer_config`.
LOCAL_CLASS_MODULE = """
import torch
from collections.abc import Sequence
class PerLayer(Sequence):
    def __init__(self, config):
        self._config = config
    def __len__(self):
        return 2
    def __getitem__(self, i):
        return self._config
class Config:
    scale = 3.0
    def __getattribute__(self, key):
        return super().__getattribute__(key)
    @property
    def per_layer(self):
        return PerLayer(self)
def _module_of(func):
    class Func(torch.nn.Module):
        def forward(self, *args):
            return func(*args)
    Func.__module__ = func.__module__
    return Func
def _rotate(t, k=2.0):
    return t.roll(1, -1) * k
rotate = _module_of(_rotate)()
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.funcs = {"rotate": type(rotate)()}
        self.config = Config()
    def forward(self, t):
        return self.funcs["rotate"](self.lin(t)) * self.config.per_layer[0].scale
"""
LOCAL_CLASS_CELL = """
import sys, torch
sys.path.insert(0, sys.argv[2])
from torch._dynamo.utils import counters
from jupyter_compile_cache.core.options import CellOptions
from jupyter_compile_cache.core.session import get_session
import funcs
torch.manual_seed(0)
net, x = funcs.Net(), torch.randn(2, 8)
with get_session().cell("local", CellOptions(store_dir=sys.argv[1], no_hub=True)), torch.no_grad():
    y = torch.compile(net)(x)
print("MATCHES_EAGER", torch.allclose(y, net(x)))
fallbacks = counters["jupyter_compile_cache"]["precompile_fallback"]
print("TRACED", counters["stats"]["unique_graphs"], "FALLBACKS", fallbacks)
"""


@pytest.mark.skipif(not PrecompileGuard.available(), reason="Dynamo precompile: torch 2.11 on")
def test_local_function_classes_and_per_layer_config_views_restore_and_an_edit_recompiles(tmp_path):
    # torch refused the guard on the local class ("defined in local scope"), then rebuilt the model's instance as a
    # plain nn.Module, whose class has no `forward` closure to guard on: the model traced again at every restore.
    # torch 2.11 refused the saved guards of the view ("Guarded object must be identical": its two builds of them saw
    # two live views), and the model traced again at every restore.
    import os
    import subprocess
    import sys

    script, module = tmp_path / "cell.py", tmp_path / "mods" / "funcs.py"
    script.write_text(LOCAL_CLASS_CELL)
    module.parent.mkdir()
    runs = {}
    for run, edit in (("cold", ""), ("restored", ""), ("edited", "k=3.0")):
        module.write_text(LOCAL_CLASS_MODULE.replace("k=2.0", edit or "k=2.0"))
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / run), "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "store"), str(module.parent)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "MATCHES_EAGER True" in done.stdout, done.stdout + done.stderr[-3000:]
        runs[run] = re.findall(r"TRACED (\d+) FALLBACKS (\d+)", done.stdout)[0]
    assert runs == {"cold": ("1", "0"), "restored": ("0", "0"), "edited": ("1", "0")}, runs
