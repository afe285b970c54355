"""What a restored entry checks on every call: torch's guards (its C++ guard manager), the identity guards precompile
dropped put back as ID_MATCH leaves of that tree where their source is a plain chain, and at most one Python check of
ours for the rest. Their number must not grow with the model: counted on the live entries of a restored kernel,
never timed."""

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
# lambda guards it runs, how many clauses ours has, and how many of our guards sit in torch's C++ tree.
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
    in_tree, stack = [], [root]
    while stack:
        node = stack.pop()
        stack.extend(node.get_child_managers())
        in_tree += [p for g in node.get_leaf_guards() if type(g).__name__ != "LAMBDA_GUARD"
                    for p in g.verbose_code_parts() if p.startswith("jupyter_compile_cache:")]
    counted.append({"python_guards": len(python), "our_clauses": len(ours), "parts": ours, "in_tree": in_tree})
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
    # The dropped guards are the globals and attributes the forward reads (the helper, `self.act`, `iter`, the
    # modules torch imports): plain chains, so they are ID_MATCH leaves of torch's C++ tree, with the one guard
    # that the objects they name still live; no Python check of ours runs. A check per layer would be 12 more.
    assert entry["python_guards"] == compiled["python_guards"] and entry["our_clauses"] == 0, (compiled, entry)
    identities = [p for p in entry["in_tree"] if p.endswith("unchanged since restore")]
    assert 1 <= len(identities) <= 8 and len(entry["in_tree"]) == len(identities) + 1, entry
    assert any("G['helper']" in p for p in identities) and any("L['self'].act" in p for p in identities), entry


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


def _tree() -> object:
    from torch._dynamo.guards import GuardManagerWrapper

    return GuardManagerWrapper()


def test_plain_chains_become_id_match_leaves_of_the_tree_and_the_rest_stays_in_python():
    from jupyter_compile_cache.torch_adapter.identity_checks import into_tree

    def helper():
        return 2

    owner = _Owner()
    owner.fn, owner.builtin = helper, len
    owner.table, owner.pair = {"k": helper}, (len, helper)
    runtime_globals = {"owner": owner}
    values = {
        "G['owner'].fn": helper,
        "G['owner'].builtin": len,
        "G['owner'].table['k']": helper,
        "G['owner'].pair[1]": helper,
        # as torch writes a class attribute's source: the class's own dict
        "dict(type(G['owner']).__dict__)['method']": _Owner.__dict__["method"],
        "dict.__getitem__(G['owner'].table, 'k')": helper,  # not a plain chain
        "G['later']": helper,  # not in the globals yet (torch installs some names later): checked in Python
    }
    guard_manager = _tree()
    left = into_tree(guard_manager, values, runtime_globals, {})
    assert set(left) == {"dict.__getitem__(G['owner'].table, 'k')", "G['later']"}
    assert str(guard_manager).count("unchanged since restore") == 5 and "ID_MATCH" in str(guard_manager)

    assert guard_manager.check({}) is True
    for swap in (
        lambda: setattr(owner, "fn", lambda: 2),
        lambda: owner.table.update(k=len),
        lambda: setattr(owner, "pair", (len, len)),
        lambda: setattr(_Owner, "method", lambda self: 3),
    ):
        saved = (owner.fn, dict(owner.table), owner.pair, _Owner.__dict__["method"])
        swap()
        assert guard_manager.check({}) is False
        owner.fn, owner.table, owner.pair, _Owner.method = saved[0], saved[1], saved[2], saved[3]
        assert guard_manager.check({}) is True
    del runtime_globals["owner"]  # a source that no longer resolves fails the check, it does not raise
    assert guard_manager.check({}) is False


def test_a_chain_that_does_not_end_at_the_verified_object_makes_no_node():
    from jupyter_compile_cache.torch_adapter.identity_checks import into_tree

    owner = _Owner()
    owner.fn = len
    guard_manager = _tree()
    before = str(guard_manager)
    assert into_tree(guard_manager, {"G['owner'].fn": print}, {"owner": owner}, {}) == {"G['owner'].fn": print}
    assert str(guard_manager) == before  # no accessor left behind, looked up on every call for nothing


def test_an_object_that_dies_fails_its_tree_guard_for_good():
    """A freed object's address can be the next object's: its ID_MATCH alone could pass for a new function. The
    tree's liveness guard fails the entry from the moment one of its objects is freed."""
    import gc

    from jupyter_compile_cache.torch_adapter.identity_checks import into_tree

    def make():
        def helper():
            return 2

        return helper

    owner = _Owner()
    owner.fn = make()
    runtime_globals = {"owner": owner}
    guard_manager = _tree()
    assert into_tree(guard_manager, {"G['owner'].fn": owner.fn}, runtime_globals, {}) == {}
    assert guard_manager.check({}) is True
    owner.fn = None
    gc.collect()
    alive, _held = guard_manager.jcc_identity_objects
    assert alive == {}
    for _ in range(20):  # whatever function comes to hold the path, at whatever address
        owner.fn = make()
        assert guard_manager.check({}) is False


def test_a_local_chain_goes_into_the_tree_only_under_a_node_torch_has_for_it():
    from jupyter_compile_cache.torch_adapter.identity_checks import into_tree

    owner = _Owner()
    owner.act = len
    guard_manager = _tree()
    left = into_tree(guard_manager, {"L['self'].act": len}, {}, {"self": owner})
    assert left == {"L['self'].act": len}  # no L['self'] node: its frame-locals index is torch's to know


def test_a_decorated_method_s_module_is_its_wrapper_s_first_positional_argument():
    """HF's forward is `wrapper(*args, **kwargs)`: the module a bound call passes is L['args'][0], so the dropped guards
    under it resolve at load (into the tree) instead of at the first call (in Python)."""
    import functools

    from jupyter_compile_cache.torch_adapter.identity_checks import load_scope, resolve

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    class Model:
        @decorate
        def forward(self, x):
            return x

        def plain(self, x):
            return x

    model = Model()
    scope = load_scope({}, model.forward)
    assert scope.local_scope["args"] == (model,) and scope.local_scope["fn"] is Model.forward.__wrapped__
    from jupyter_compile_cache.torch_adapter.code_digest import code_digest

    split = resolve({"L['args'][0].__class__": code_digest(Model), "L['args'][1]": "x"}, {}, scope.local_scope)
    assert split is not None and split[0] == {"L['args'][0].__class__": Model} and list(split[1]) == ["L['args'][1]"]
    assert load_scope({}, model.plain).local_scope == {"self": model}


def test_an_item_of_a_dict_torch_guards_by_key_index_stays_in_the_python_check():
    """torch makes a dict whose keys it guards a DictGuardManager, which takes no item accessor: the source under it
    keeps the Python check (and is checked there), it is not dropped."""
    from torch._dynamo.guards import GuardManagerType

    from jupyter_compile_cache.torch_adapter.identity_checks import identity_check, into_tree

    table = {"k": len}
    runtime_globals = {"table": table}
    guard_manager = _tree()
    root_globals = guard_manager.root.globals_dict_manager(
        f_globals=runtime_globals, source="G", example_value=runtime_globals,
        guard_manager_enum=GuardManagerType.GUARD_MANAGER,
    )  # fmt: skip
    root_globals.dict_getitem_manager(
        key="table", source="G['table']", example_value=table, guard_manager_enum=GuardManagerType.DICT_GUARD_MANAGER
    )
    left = into_tree(guard_manager, {"G['table']['k']": len}, runtime_globals, {})
    assert left == {"G['table']['k']": len}
    check, _ = identity_check(left, {}, runtime_globals)
    assert check({}) is True
    table["k"] = print
    assert check({}) is False
