"""The time the hub reads: expiry stamps that other machines compare (a folder's and S3's keys), the intervals of
a push's and a lease's renewals, and the lease's waits between them. One object, so that a test can drive time
instead of sleeping against a TTL; everything else uses `SYSTEM_CLOCK`."""

from __future__ import annotations

import threading
import time


class Clock:
    """The system's clock."""

    def time(self) -> float:
        """Seconds since the epoch, as stamped into an expiry other machines read."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds for intervals within this process."""
        return time.monotonic()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until `event` is set (True) or `seconds` have passed (False)."""
        return event.wait(seconds)


SYSTEM_CLOCK = Clock()
