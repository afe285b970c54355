"""Hub keys as a backend sees them: text parts joined by `:`, `jcc:GROUP:KIND:...` (the layout is storage/hub.py's).

GROUP is the second part: one bundle (`NS/NAME`) or one namespace's list of names (`NS/`). Every key of one backend
call shares it. A Redis writes the group in braces, `jcc:{GROUP}:...`, its hash tag, so a Redis Cluster keeps a
bundle in one slot; a folder hub keeps the same braces in its folder names, the layout it has always had.
"""

from __future__ import annotations


def braced(key: str) -> str:
    """KEY with its group in braces; a prefix that ends inside the group gets the opening brace only."""
    head, sep, rest = key.partition(":")
    if not sep:
        return key
    group, sep, tail = rest.partition(":")
    return f"{head}:{{{group}}}:{tail}" if sep else f"{head}:{{{group}"


def unbraced(key: str) -> str:
    """The key `braced` made KEY from (a key without braces comes back as it is)."""
    head, sep, rest = key.partition(":{")
    group, close, tail = rest.partition("}:")
    return f"{head}:{group}:{tail}" if sep and close else key
