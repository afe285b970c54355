"""dispatch_state.py: the dispatch keys an entry was compiled under are in force again while its guards are rebuilt
(torch 2.11 and 2.13 rebuilt them with the keys in force where the function was wrapped, outside `autocast`).

The whole restore under autocast and inference_mode, in real kernels: tests/end_to_end/test_model_families.py (on
torch 2.14 and later torch keeps these keys itself, and `in_force` leaves them to it)."""

from __future__ import annotations

import types

import torch

from jupyter_compile_cache.torch_adapter import dispatch_state


def _now() -> list[int]:
    return [
        torch._C._dispatch_tls_local_include_set().raw_repr(),
        torch._C._dispatch_tls_local_exclude_set().raw_repr(),
    ]


def test_the_keys_saved_under_autocast_and_inference_mode_are_in_force_outside_them_and_only_while_asked():
    outside = dispatch_state.current()
    assert outside == _now()
    for block in (torch.autocast("cpu", dtype=torch.bfloat16), torch.inference_mode()):
        with block:
            saved = dispatch_state.current()
        assert saved != outside  # autocast takes AutocastCPU out of the excluded keys; inference_mode more
        with dispatch_state.in_force(types.SimpleNamespace(), saved):  # a guard state without torch's own
            assert _now() == saved
        assert _now() == outside  # put back exactly


def test_nothing_is_forced_where_torch_keeps_the_state_itself_or_the_record_has_none():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        saved = dispatch_state.current()
    outside = _now()
    for guards_state, keys in (
        (types.SimpleNamespace(local_state=object()), saved),  # torch 2.14 and later: its own
        (types.SimpleNamespace(), None),  # a record saved before the keys were kept
        (types.SimpleNamespace(), ["not", "keys"]),
    ):
        with dispatch_state.in_force(guards_state, keys):
            assert _now() == outside
