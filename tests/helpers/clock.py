"""A clock a test moves: the real clock, plus the jumps the test made, so that a TTL passes when the test says so
instead of while it sleeps. Real time still passes (so expiries another process stamped with the real clock compare
with it, and nothing stops when a test makes no jump)."""

from __future__ import annotations

import threading
import time

from jupyter_compile_cache.storage.clock import Clock


class JumpingClock(Clock):
    def __init__(self) -> None:
        self.jumped = 0.0
        self._moved = threading.Condition()

    def time(self) -> float:
        return time.time() + self.jumped

    def monotonic(self) -> float:
        return time.monotonic() + self.jumped

    def jump(self, seconds: float) -> None:
        with self._moved:
            self.jumped += seconds
            self._moved.notify_all()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        deadline = self.monotonic() + seconds
        while not event.is_set():
            left = deadline - self.monotonic()
            if left <= 0:
                return False
            with self._moved:  # a jump wakes it; the event is looked at every 10 ms (it cannot wake a condition)
                self._moved.wait(min(left, 0.01))
        return True
