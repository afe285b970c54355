"""Hub keys as a backend sees them: text parts joined by `:`, `jcc:GROUP:KIND:...` (the layout is storage/hub.py's).

GROUP is the second part: one bundle (`NS/NAME`) or one namespace's list of names (`NS/`). Every key of one backend
call shares it. A Redis writes the group in braces, `jcc:{GROUP}:...`, its hash tag, so a Redis Cluster keeps a
bundle in one slot; a folder hub keeps the same braces in its folder names, the layout it has always had.
"""

from __future__ import annotations

from urllib.parse import quote, unquote


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


def object_name(prefix: str, key: str) -> str:
    """The object an object store (S3, GCS, Azure) keeps KEY in: PREFIX/ then the key's parts, each percent-quoted
    (so a namespace's `/` never makes a folder of its own), joined by `/`."""
    parts = [quote(part, safe="._-") for part in key.split(":")]
    return "/".join([prefix, *parts]) if prefix else "/".join(parts)


def key_of(prefix: str, name: str) -> str | None:
    """The key an object's NAME holds (`object_name` reversed), None for an object that is none of ours."""
    if prefix:
        if not name.startswith(prefix + "/"):
            return None
        name = name[len(prefix) + 1 :]
    return ":".join(unquote(part) for part in name.split("/"))
