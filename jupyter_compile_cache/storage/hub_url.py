"""The hub's URL and namespace rules: what `CompileCache.hub`, `--hub` and `--namespace` accept, and URLs with their
password hidden for every message."""

from __future__ import annotations

import re
import sys
from urllib.parse import parse_qs, urlsplit

HUB_SCHEMES = ("redis://", "rediss://", "unix://")


# Namespaces become part of Redis keys (inside a cluster hash tag): no braces, spaces or empty path components.
NAMESPACE_RE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


def check_namespace(namespace: str) -> str:
    """A hub namespace: letters, digits, '.', '_', '-', parts joined by '/', at most 128 characters."""
    if not isinstance(namespace, str) or len(namespace) > 128 or not NAMESPACE_RE.match(namespace):
        raise ValueError(
            f"invalid namespace {namespace!r}: use letters, digits, '.', '_', '-', parts joined by '/' "
            "(at most 128 characters)"
        )
    return namespace


def redact(url: str | None) -> str:
    """The URL with any password replaced, for messages, status and the panel. Works on text that is no valid
    URL too (a typo must not print the password): whatever stands between the scheme and the last '@' is taken
    for user[:password], erring on the side of hiding."""
    if not url:
        return ""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"


def check_hub_url(url: str) -> str:
    """A Redis URL redis-py can open: redis://[user:password@]host[:port][/db], rediss://..., unix:///path."""
    value = str(url).strip()
    shown = redact(value)
    usage = "(redis://host:port/db, rediss://... for TLS, or unix:///path/to/socket)"
    if not value.startswith(HUB_SCHEMES) or any(c.isspace() for c in value):
        raise ValueError(f"not a Redis URL: {shown!r} {usage}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number in range)
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {shown!r}: {exc} {usage}") from None
    if parts.scheme == "unix":
        if not parts.path:
            raise ValueError(f"not a Redis URL: {shown!r}: no socket path {usage}")
    elif not parts.hostname:
        raise ValueError(f"not a Redis URL: {shown!r}: no host {usage}")
    db = (parts.path.strip("/") if parts.scheme != "unix" else "") or parse_qs(parts.query).get("db", ["0"])[0]
    if not db.isdigit():
        raise ValueError(f"not a Redis URL: {shown!r}: the database {db!r} is not a number {usage}")
    # redis-py's own rules for the rest (query options), when it is loaded already: importing it here would add
    # 0.25 s to `%load_ext` (the variable is read at start-up); a URL it refuses is a HubError at first use anyway.
    connection = sys.modules.get("redis.connection")
    if connection is None:
        return value
    try:
        connection.parse_url(value)
    except ValueError as exc:
        raise ValueError(f"not a Redis URL: {shown!r}: {exc} {usage}") from None
    return value
