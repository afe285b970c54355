"""What a restored entry checks on every call: torch's guards (its C++ guard manager) plus at most one Python check of
ours, whose clauses are the identity guards precompile dropped. Their number must not grow with the model: counted
on the live entries of a restored kernel, never timed."""

from __future__ import annotations

import pytest

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PrecompileGuard.available(), reason="torch 2.11 on: restored precompile entries"),
]

# A deep model: each of its 12 layers is a module of a ModuleList, and the forward calls a global helper and a
# callable attribute, which precompile's dropped guards watch. A check per layer would show as 12 clauses or more.
DEFINE = """
import torch
torch.manual_seed(0)
def helper(t):
    return t.sin()
class Net(torch.nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(depth))
        self.act = torch.relu
    def forward(self, t):
        for layer in self.layers:
            t = self.act(helper(layer(t)))
        return t
model = Net(12)
x = torch.randn(4, 16)
"""
COMPILE = """%%compile_cache guards
with torch.no_grad():
    out = torch.compile(model)(x)
print("OUT", out.sum().item())
"""
# Per live entry of Net.forward (torch keeps restored ones apart from those it compiles): how many Python-level
# lambda guards it runs, and how many clauses ours has.
COUNT = """
from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list, _debug_get_precompile_entries
with torch.no_grad():
    torch.compile(model)(x)  # the entry has run again (a deferred clause binds at its first call)
counted = []
code = Net.forward.__code__
entries = [*_debug_get_precompile_entries(code), *_debug_get_cache_entry_list(code)]  # restored, then fresh
for entry in entries:
    leaves = entry.guard_manager.root.get_leaf_guards()
    python = [g for g in leaves if type(g).__name__ == "LAMBDA_GUARD"]
    ours = [p for g in python for p in g.verbose_code_parts() if p.startswith("jupyter_compile_cache:")]
    counted.append({"python_guards": len(python), "our_clauses": len(ours), "parts": ours})
print("COUNTED", counted)
"""


def _count(k) -> list[dict]:
    return eval(next(x for x in k.run(COUNT).check().stdout.splitlines() if x.startswith("COUNTED"))[len("COUNTED") :])


def test_a_restored_entry_runs_one_small_python_check_not_one_per_layer(kernel_factory, dirs):
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(DEFINE).check()
    cold = k.run(COMPILE).check().stdout
    assert "saved" in cold, cold
    [compiled] = _count(k)  # torch's own entry: its guards, none of ours
    assert compiled["our_clauses"] == 0, compiled

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(DEFINE).check()
    restored = k.run(COMPILE).check().stdout
    assert "restored 'guards'" in restored and "nothing new to save" in restored, restored
    assert [x for x in cold.splitlines() if x.startswith("OUT")] == [
        x for x in restored.splitlines() if x.startswith("OUT")
    ]
    [entry] = _count(k)  # the restored entry, and none compiled afresh beside it
    # One Python check more than torch's own entry runs; everything else stays in torch's C++ guard manager.
    assert entry["python_guards"] == compiled["python_guards"] + 1, (compiled, entry)
    # Its clauses are the globals and attributes the forward reads (the helper, `self.act`, `iter`, the modules
    # torch imports): a check per layer of the 12 would be 12 more.
    assert 1 <= entry["our_clauses"] <= 8, entry
