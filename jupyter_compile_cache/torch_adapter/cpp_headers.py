"""torch's check of its precompiled C++ headers: the calls a kernel made, made again by a warm template.

Before Inductor loads a CPU kernel's module, even one already built (every restored CPU cell's), torch's
`_precompile_header` runs `g++ -E` over its prefix header and `openssl sha512` over the output, to pick the
precompiled header that fits. torch keeps the answer for the life of the process (`functools.cache`), so each new
kernel pays it again: most of a restored CPU cell on a small machine (benchmarks/results/warm_restart_cpu_2026-11-28/).
A session records the calls its cells make, with torch's own arguments (`recording`); a template makes the same
calls before it forks (`replay`), and a kernel forked from it starts with torch's answers, as one that had made the
calls itself would. A call is kept together with the digest of the Inductor settings torch's C++ builder reads, and
made again only under the same digest: the answer also depends on settings that are not among its arguments (the
compiler torch runs, say).
"""

from __future__ import annotations

import functools
import hashlib
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .patch import Patch


@dataclass(frozen=True)
class HeaderCall:
    """One call of torch's `_precompile_header`, as pickled bytes of (args, kwargs), and the config it ran under."""

    arguments: bytes
    config: str


# Inductor's settings that torch's C++ builder reads (cpp_builder.py): the compiler, its flags, AOT Inductor's.
BUILDER_SETTINGS = ("cpp.", "cpp_", "aot_inductor.", "test_configs.")

# The calls made in this process (and, in a forked kernel, in its template), by their arguments: torch answers them
# from its cache, so they are not kept again (and a restored cell takes no digest of the config for them).
_made: set[bytes] = set()


def config_digest() -> str:
    """A digest of Inductor's settings that its C++ builder reads. Not all of them: a compile patches others (the
    mode's) while it runs, which would keep a call from ever being made again."""
    from torch._inductor import config

    settings = sorted((k, v) for k, v in config.save_config_portable().items() if k.startswith(BUILDER_SETTINGS))
    return hashlib.sha256(repr(settings).encode()).hexdigest()[:16]


def recording(sink: Callable[[HeaderCall], None]) -> Patch | None:
    """Wrap torch's check so that every call that succeeds also goes to `sink`; undo with the patch's `undo`. None
    where this torch has no such cached function."""
    from torch._inductor import codecache

    original = getattr(codecache, "_precompile_header", None)
    if original is None or not hasattr(original, "cache_info"):
        return None

    @functools.wraps(original)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            arguments = pickle.dumps((args, kwargs))
        except Exception:  # an argument that does not pickle: this call is not kept, torch's answer stands
            return result
        if arguments not in _made:
            _made.add(arguments)
            sink(HeaderCall(arguments, config_digest()))
        return result

    for name in ("cache_info", "cache_clear"):  # torch's function stays usable as the cached function it is
        setattr(recorded, name, getattr(original, name))
    return Patch(codecache, "_precompile_header", recorded)


def replay(calls: list[HeaderCall]) -> int:
    """Make the calls made under this process's Inductor config; returns how many were made. A call that fails is
    skipped: a kernel that needs its answer computes it, as torch always does."""
    from torch._inductor import codecache

    check = getattr(codecache, "_precompile_header", None)
    if check is None or not calls:
        return 0
    config = config_digest()
    made = 0
    for call in calls:
        if call.config != config:
            continue
        try:
            args, kwargs = pickle.loads(call.arguments)
            check(*args, **kwargs)
        except Exception:  # recorded by another torch, or a compiler gone since: nothing made, nothing lost
            continue
        _made.add(call.arguments)
        made += 1
    return made
