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
    root = entry.guard_manager.root
    leaves = [*root.get_leaf_guards(), *getattr(root, "get_epilogue_lambda_guards", list)()]
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


class _CountingGlobals(dict):
    reads = 0

    def __getitem__(self, key):
        type(self).reads += 1
        return super().__getitem__(key)


class _Owner:
    def method(self):
        return 1


def test_the_check_reads_a_shared_part_once_and_fails_on_any_swapped_object():
    from jupyter_compile_cache.torch_adapter.code_digest import code_digest
    from jupyter_compile_cache.torch_adapter.identity_checks import identity_check

    def helper():
        return 2

    owner = _Owner()
    owner.fn, owner.builtin = helper, len  # a function (held weakly) and a builtin (no weak reference: held)
    runtime_globals = _CountingGlobals(owner=owner)
    values = {
        "G['owner'].fn": helper,
        "G['owner'].builtin": len,
        # as torch writes a class attribute's source: a copy of the class's dict, read here in place
        "dict(type(G['owner']).__dict__)['method']": _Owner.__dict__["method"],
    }
    check, parts = identity_check(values, {"L['arg']": code_digest(helper)}, runtime_globals)
    assert len(parts) == 4 and all(p.startswith("jupyter_compile_cache: ") for p in parts)

    assert check({"arg": helper}) is True  # the deferred source binds at the first call
    _CountingGlobals.reads = 0
    assert check({"arg": helper}) is True
    assert _CountingGlobals.reads == 1  # G['owner'] once for its three sources
    assert check({"arg": lambda: 2}) is False  # another object than the one verified and bound

    owner.fn = lambda: 2
    assert check({"arg": helper}) is False
    owner.fn = helper
    original = _Owner.method
    _Owner.method = lambda self: 3
    assert check({"arg": helper}) is False
    _Owner.method = original
    assert check({"arg": helper}) is True
    del runtime_globals["owner"]  # a source that no longer resolves fails the check, it does not raise
    assert check({"arg": helper}) is False


def test_a_deferred_object_that_differs_at_the_first_call_fails_the_check_from_then_on():
    from jupyter_compile_cache.torch_adapter.code_digest import code_digest
    from jupyter_compile_cache.torch_adapter.identity_checks import identity_check

    def compiled_for(t):
        return t + 1

    def edited(t):
        return t + 2

    check, _ = identity_check({}, {"L['fn']": code_digest(compiled_for)}, {})
    assert check({"fn": edited}) is False
    assert check({"fn": compiled_for}) is False  # refused once: torch compiles this code anew
