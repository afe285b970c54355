"""No connection survives a fork. A forked process (a warm kernel forked from its template, a DataLoader worker,
accelerate's `notebook_launcher`) inherits the parent's sockets and the client objects around them; used from both
sides, one process reads the other's replies. Every backend that holds connections registers here, and in the child
each one forgets its client, so its first call connects anew.

The forgotten clients are kept, never collected: collecting one closes its connections, and in the child those are
the parent's sockets (redis-py's `Redis.__del__` closes the client's pool).
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol


class HoldsConnections(Protocol):
    def forget_connections(self) -> Any:
        """Drop the client without closing it (a fresh lock too: a parent's thread may have held it at the fork);
        returns what was dropped."""
        ...


_backends: weakref.WeakSet[Any] = weakref.WeakSet()
_forgotten: list[Any] = []


def track(backend: HoldsConnections) -> None:
    _backends.add(backend)


def _in_child() -> None:
    for backend in list(_backends):
        _forgotten.append(backend.forget_connections())


os.register_at_fork(after_in_child=_in_child)
