"""Hub backends, chosen by the hub URL's scheme.

A backend is one module here with `SCHEMES` (the URL schemes it serves), `USAGE` (what its URLs look like),
`check_url(url)` (raise ValueError for a URL it cannot open) and a class implementing `base.Backend`; adding one is
that file and one line in `BACKENDS`. Our modules import their client library (redis-py, ...) only when a hub is
first used.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import cast

from .base import Backend, HubError

__all__ = ["BACKENDS", "Backend", "HubError", "check_url", "open_backend", "schemes"]

# module -> its backend class
BACKENDS = {
    "redis": "RedisBackend",
    "folder": "FolderBackend",
}


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def schemes() -> dict[str, str]:
    """scheme -> the module that serves it."""
    return {scheme: name for name in BACKENDS for scheme in _module(name).SCHEMES}


def usage() -> str:
    """What the hub URLs look like, from every backend's USAGE."""
    return "(" + ", ".join(_module(name).USAGE for name in BACKENDS) + ")"


def check_url(url: str) -> str:
    """The URL, stripped, if a backend serves its scheme and takes it; else a ValueError saying what a hub URL is
    (without its password)."""
    from ..hub_url import redact

    value = str(url).strip()
    shown = redact(value)
    scheme, sep, _rest = value.partition("://")
    served = schemes()
    if not sep or scheme not in served or any(c.isspace() for c in value):
        raise ValueError(f"not a hub URL: {shown!r} {usage()}")
    try:
        _module(served[scheme]).check_url(value)
    except ValueError as exc:
        raise ValueError(f"not a hub URL: {shown!r}: {exc} {usage()}") from None
    return value


def open_backend(url: str, connect_timeout: float = 2.0, timeout: float = 10.0) -> Backend:
    """The backend for URL (checked first: an unknown scheme is a HubError naming the supported ones)."""
    try:
        check_url(url)
    except ValueError as exc:
        raise HubError(str(exc)) from None
    name = schemes()[url.strip().partition("://")[0]]
    cls = getattr(_module(name), BACKENDS[name])
    return cast(Backend, cls(url.strip(), connect_timeout=connect_timeout, timeout=timeout))
