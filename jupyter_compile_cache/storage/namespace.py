"""The hub's namespace rules: what `CompileCache.namespace` and `--namespace` accept."""

from __future__ import annotations

import re

# A namespace is part of every hub key (storage/backends/keys.py): no braces, colons, spaces or empty parts.
NAMESPACE_RE = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")  # whole (fullmatch: `$` takes a last "\n")


def check_namespace(namespace: str) -> str:
    """A hub namespace: letters, digits, '.', '_', '-', parts joined by '/', at most 128 characters."""
    if not isinstance(namespace, str) or len(namespace) > 128 or not NAMESPACE_RE.fullmatch(namespace):
        raise ValueError(
            f"invalid namespace {namespace!r}: use letters, digits, '.', '_', '-', parts joined by '/' "
            "(at most 128 characters)"
        )
    return namespace
