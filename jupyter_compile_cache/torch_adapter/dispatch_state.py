"""The dispatch keys a thread's state adds to and takes from every tensor (autocast, inference_mode), as they were
when an entry was compiled, and in force again while its guards are rebuilt on restore.

A tensor guard compares a tensor's dispatch keys, with the thread's included and excluded keys applied, against
what they were at compile time, and torch applies the thread's keys as they are when the guard is built. A restored
entry's guards are built when `torch.compile` wraps the function, outside the `torch.autocast` or
`torch.inference_mode` block it was compiled and is called in: every guard then failed ("dispatch key set mismatch",
torch 2.11 and 2.13) and Dynamo traced the function again at every restore. torch 2.14 saves this state with the
entry itself; for earlier releases our record carries it.
"""

from __future__ import annotations

import contextlib
from typing import Any


def current() -> list[int]:
    """This thread's included and excluded dispatch keys, as two raw key sets."""
    import torch

    state = torch._C
    return [state._dispatch_tls_local_include_set().raw_repr(), state._dispatch_tls_local_exclude_set().raw_repr()]


def in_force(guards_state: Any, saved: Any) -> contextlib.AbstractContextManager[Any]:
    """While a restored entry's guards are built: the keys SAVED (from `current` at compile time) in force, where
    torch's GUARDS_STATE does not carry them itself (torch 2.14 and later do: nothing to do)."""
    import torch

    force = getattr(torch._C, "_ForceDispatchKeyGuard", None)
    if getattr(guards_state, "local_state", None) is not None or force is None:
        return contextlib.nullcontext()
    if not (isinstance(saved, list) and len(saved) == 2 and all(isinstance(raw, int) for raw in saved)):
        return contextlib.nullcontext()  # a record saved before we kept them: torch builds them as it always did
    include, exclude = (torch._C.DispatchKeySet.from_raw_repr(raw) for raw in saved)
    return force(include, exclude)
