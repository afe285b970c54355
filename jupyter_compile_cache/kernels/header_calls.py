"""The header checks kernels of one installation made, kept in the runtime folder for its warm templates.

A kernel's session records torch's precompiled-header checks (torch_adapter/cpp_headers.py says what they are and
what they cost) and `keep`s the new ones in `<runtime dir>/<install stamp>.headers`; a template makes them at its
warm-up and again when the file grows (`Replayer`), so the kernels it forks find torch's answers already there. The
file is JSON: a damaged or foreign one is read as empty, and the next kernel that compiles writes it anew.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile

from ..torch_adapter.cpp_headers import HeaderCall, replay
from . import protocol
from .runtime_dir import runtime_dir
from .template_fit import install_stamp

MOST_CALLS = 64  # a file that grew beyond this keeps its newest calls (a few per compiler setting in practice)


def _path(stamp: str | None = None) -> str | None:
    directory = runtime_dir()
    return None if directory is None else protocol.header_calls_path(directory, stamp or install_stamp())


def read(path: str) -> list[HeaderCall]:
    try:
        with open(path, encoding="utf-8") as f:
            items = json.load(f)
        return [HeaderCall(base64.b64decode(item["arguments"]), str(item["config"])) for item in items]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def keep(calls: list[HeaderCall]) -> None:
    """Add CALLS to this installation's file (written whole, then renamed into place). Raises OSError."""
    if not calls:  # most cells: nothing new, and no look at the installed files (every cell's end runs this)
        return
    path = _path()
    if path is None:
        return
    kept = read(path)
    merged = kept + [call for call in calls if call not in kept]
    if merged == kept:
        return
    items = [{"arguments": base64.b64encode(c.arguments).decode(), "config": c.config} for c in merged[-MOST_CALLS:]]
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(items, f)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class Replayer:
    """A template's side: makes the calls of its installation's file, each once, whenever the file changed."""

    def __init__(self, stamp: str) -> None:
        self.path = _path(stamp)
        self.made: list[HeaderCall] = []
        self.seen: tuple[int, int] | None = None  # the file's (mtime, size) when last read

    def changed(self) -> bool:
        if self.path is None:
            return False
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        return (info.st_mtime_ns, info.st_size) != self.seen

    def replay_new(self) -> int:
        """Make the calls not made yet; how many were. Never raises: a template that cannot make them still forks
        kernels, which make them themselves."""
        if self.path is None or not self.changed():
            return 0
        with contextlib.suppress(OSError):
            info = os.stat(self.path)
            self.seen = (info.st_mtime_ns, info.st_size)
        new = [call for call in read(self.path) if call not in self.made]
        self.made += new
        try:
            return replay(new)
        except Exception:  # torch's compiler not importable here: the calls stay the kernels' own
            return 0
