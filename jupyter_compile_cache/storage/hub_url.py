"""The hub's namespace rules (what `CompileCache.namespace` and `--namespace` accept), and URLs with their password
hidden for every message. Which URLs a hub takes is each backend's to say: `storage.backends.check_url`."""

from __future__ import annotations

import re

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
