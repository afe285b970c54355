"""What Dynamo remembers of a compiled function's input sizes, saved beside its precompile entry.

Plain torch.compile remembers the sizes each input of a traced function had (automatic dynamic shapes), and compiles
a dynamic graph when a later call brings another size. A function restored through precompile is never traced, so
that memory started empty and its first recompile traced a static graph the cold kernel never compiled: a miss (the
prefill of a prompt of another length, in a static-cache decode loop). So each saved entry carries the function's
memory (`jcc_frame_sizes`, torch's own `CodeState`), given back at its first call. torch keeps it on disk itself (PGO)
only with a `job_id`, keyed by a hash that changes per process for functions with a closure; we key it by the entry.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
from typing import Any

STATE_FILE = "jcc_frame_sizes"


def code_id(fn: Any) -> Any | None:
    """torch's key for `fn`'s sizes in this process (None where this torch has no automatic-dynamic memory, or `fn`
    has no code); any other failure is raised, for the caller to tell."""
    try:
        from torch._dynamo import pgo
    except ImportError:
        return None
    code = getattr(fn, "__code__", None)
    if code is None or not hasattr(pgo, "CodeId"):
        return None
    if "closure" in inspect.signature(pgo.CodeId.make).parameters:
        return pgo.CodeId.make(code, getattr(fn, "__closure__", None))
    return pgo.CodeId.make(code)


def save(entry_dir: str, key: Any) -> str | None:
    """Write what this kernel remembers of `key`'s sizes into `entry_dir`; the file's path, None if nothing."""
    from torch._dynamo import pgo

    state = pgo.get_code_state()
    if key not in state or not state[key].automatic_dynamic:  # `in` first: the defaultdict must not grow
        return None
    path = os.path.join(entry_dir, STATE_FILE)
    data = pickle.dumps(state[key])
    with contextlib.suppress(OSError):
        with open(path, "rb") as f:
            if f.read() == data:
                return path
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


def merge(entry_dir: str, key: Any) -> bool:
    """Add the saved sizes of a restored function to what this kernel remembers of it; whether there were any."""
    from torch._dynamo import pgo

    try:
        with open(os.path.join(entry_dir, STATE_FILE), "rb") as f:
            saved = pickle.load(f)
    except FileNotFoundError:
        return False
    if not isinstance(saved, pgo.CodeState):
        raise TypeError(f"{STATE_FILE} holds a {type(saved).__name__}, not torch's CodeState")
    target = pgo.get_code_state()[key].automatic_dynamic
    for source, entry in saved.automatic_dynamic.items():
        target[source] |= entry  # as torch merges the sizes of a new trace
    return True
