"""Hub backends, chosen by the hub URL's scheme.

A backend is one module here: a class implementing `base.Backend`, with `SCHEMES` (the URL schemes it serves),
`USAGE` (what its URLs look like) and `check_url(url)` (raise ValueError for a URL it cannot open). Adding one is
that file and one line in `KINDS`. The modules import their client library (redis-py, obstore) only when a hub is
first used, so importing them here costs nothing.
"""

from __future__ import annotations

from ..clock import SYSTEM_CLOCK, Clock
from .base import Backend, HubError, HubRefused
from .folder import FolderBackend
from .https import HttpsBackend
from .object_store import ObjectStoreBackend
from .redis import RedisBackend
from .url import redact

__all__ = ["Backend", "HubError", "HubRefused", "check_url", "open_backend", "redact", "schemes", "usage"]

KINDS: tuple[type[Backend], ...] = (RedisBackend, ObjectStoreBackend, FolderBackend, HttpsBackend)


def schemes() -> dict[str, type[Backend]]:
    """scheme -> the backend that serves it."""
    return {scheme: kind for kind in KINDS for scheme in kind.SCHEMES}


def usage() -> str:
    """What the hub URLs look like, from every backend's USAGE."""
    return "(" + ", ".join(kind.USAGE for kind in KINDS) + ")"


def check_url(url: str) -> str:
    """The URL, stripped, if a backend serves its scheme and takes it; else a ValueError saying what a hub URL is
    (without its password)."""
    value = str(url).strip()
    shown = redact(value)
    scheme, sep, _rest = value.partition("://")
    served = schemes()
    if not sep or scheme not in served or any(c.isspace() for c in value):
        raise ValueError(f"not a hub URL: {shown!r} {usage()}")
    try:
        served[scheme].check_url(value)
    except ValueError as exc:
        raise ValueError(f"not a hub URL: {shown!r}: {exc} {usage()}") from None
    return value


def open_backend(url: str, connect_timeout: float = 2.0, timeout: float = 10.0, clock: Clock = SYSTEM_CLOCK) -> Backend:
    """The backend for URL (checked first: an unknown scheme is a HubError naming the supported ones); `clock`
    stamps and reads the expiries a backend keeps itself (a folder's, S3's)."""
    try:
        value = check_url(url)
    except ValueError as exc:
        raise HubError(str(exc)) from None
    backend = schemes()[value.partition("://")[0]]
    return backend(value, connect_timeout=connect_timeout, timeout=timeout, clock=clock)
