"""Single flight on a hub: a lease on one key that its holder's thread renews while the cell compiles, so that a
collaborator compiling the same bundle waits for it instead of compiling it too (hub.py hands them out)."""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

from .backends import Backend
from .backends.base import HubError, HubRefused
from .clock import SYSTEM_CLOCK, Clock

LEASE_TTL = 30
HOST = socket.gethostname()


class Lease:
    """A lease on one key that a thread renews while the cell runs; a dead holder's lease simply expires. Taking,
    renewing and releasing are each one atomic step of the backend, so an old holder never touches a lease a
    collaborator took since."""

    def __init__(
        self,
        backend: Backend,
        key: str,
        holder: str,
        ttl: int = LEASE_TTL,
        refused: Callable[[HubRefused], HubRefused] = lambda exc: exc,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.backend, self.key, self.ttl, self._refused, self.clock = backend, key, ttl, refused, clock
        # host and pid: a collaborator on the same machine can tell a holder that died from one still compiling
        token = {"holder": holder, "since": clock.time(), "id": uuid.uuid4().hex, "host": HOST, "pid": os.getpid()}
        self.token = json.dumps(token)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._due = 0.0  # the clock's monotonic time of the next renewal

    def acquire(self) -> dict[str, Any] | None:
        """Take the lease; returns None on success, else the current holder's info."""
        try:
            holder = self.backend.acquire(self.key, self.token.encode(), self.ttl)
        except HubRefused as exc:
            raise self._refused(exc) from None
        if holder is None:
            self._due = self.clock.monotonic() + self.ttl / 3  # from the taking, however late its thread starts
            self._thread = threading.Thread(target=self._renew, name="jcc-lease", daemon=True)
            self._thread.start()
            return None
        try:
            info = json.loads(holder)
            return info if isinstance(info, dict) else {"holder": "unknown", "since": self.clock.time()}
        except ValueError:
            return {"holder": "unknown", "since": self.clock.time()}

    def _renew(self) -> None:
        while not self.clock.wait(self._stop, max(0.0, self._due - self.clock.monotonic())):
            self._due = self.clock.monotonic() + self.ttl / 3
            try:
                if not self.backend.renew(self.key, self.token.encode(), self.ttl):
                    return  # expired and maybe taken by someone else: not ours to extend
            except HubError:  # the hub went away: the lease expires by itself
                return

    def held(self) -> bool:
        """Whether anyone holds this lease now (a holder that finished or died has let it go)."""
        return self.backend.get([self.key])[0] is not None

    def release(self) -> None:
        self._stop.set()
        if self._thread is None:
            return
        try:
            self.backend.release(self.key, self.token.encode())
        except HubError:  # the hub went away: the lease expires by itself
            pass


def process_alive(pid: int) -> bool:
    """Whether PID runs on this machine (another user's process counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
