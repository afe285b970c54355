"""Hub URLs with their password hidden, for every message, `status` and the panel."""

from __future__ import annotations

import re

# query parameters that hold a secret: a SAS token's signature pasted with a container's URL, a key, a password
_SECRET_QUERY = re.compile(r"([?&;](?:sig|key|token|secret|password|credential)[\w-]*=)[^&;#]*", re.IGNORECASE)


def redact(url: str | None) -> str:
    """The URL with any password replaced, for messages, status and the panel. Works on text that is no valid
    URL too (a typo must not print the password): whatever stands between the scheme and the last '@' is taken
    for user[:password], erring on the side of hiding."""
    if not url:
        return ""
    url = _SECRET_QUERY.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{host}"
