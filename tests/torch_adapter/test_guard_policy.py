"""guard_policy.py: which guards precompile drops from a saved entry (and our record gives back), read on the guard
kinds torch really builds for a function."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from jupyter_compile_cache.torch_adapter import guard_policy

SCALE = torch.ones(3)


def _scaled(x):
    return torch.sigmoid(x) * SCALE + 1


def test_identity_guards_are_dropped_and_value_checks_are_kept():
    torch._dynamo.reset()
    try:
        guards = torch._dynamo.explain(_scaled)(torch.ones(3)).out_guards
    finally:
        torch._dynamo.reset()
    kinds = {guard.create_fn_name() for guard in guards}
    assert "TENSOR_MATCH" in kinds, kinds  # the input's and the global's dtype, shape, device: kept
    for kind in kinds:
        entry = SimpleNamespace(guard_type=kind, derived_guard_types=(), name=kind)
        assert guard_policy.is_dropped(entry) == (kind in guard_policy.DROPPED_KINDS), kind
    # a guard built on an identity check goes with it
    assert guard_policy.is_dropped(SimpleNamespace(guard_type="EQUALS_MATCH", derived_guard_types=("ID_MATCH",)))
    assert not guard_policy.is_dropped(SimpleNamespace(guard_type="TENSOR_MATCH", derived_guard_types=None))


def test_a_guards_source_is_the_expression_torch_evaluates():
    entry = SimpleNamespace(name="act", orig_guard=SimpleNamespace(name="L['self'].act"))
    assert guard_policy.guard_source(entry) == "L['self'].act"
    assert guard_policy.guard_source(SimpleNamespace(name="G['SCALE']")) == "G['SCALE']"
