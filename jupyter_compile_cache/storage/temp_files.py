"""Temporary files that name their writer, so one left by a writer that died can be removed at once.

A save or a pull writes its payload under a temporary name and renames it into place when complete. A kernel killed
in the middle leaves the temporary file: hundreds of MB for a large model. Its name holds the writer's host and
process id (`.tmp-HOST-PID-RANDOM.pack`), so the next process to open the store (or sweep the hub's folder) sees
that the writer no longer runs and removes the file. A file of a live writer, or of another machine (a shared
folder), is left alone; those go after an hour, as before.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
import time
import uuid

STALE_SECONDS = 3600  # a temporary file nobody can vouch for (another machine's, an old name) goes after this

_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"
_NAME = re.compile(r"tmp-(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)-")


def name(prefix: str, suffix: str = "") -> str:
    """A fresh temporary name for this process: PREFIX + `tmp-HOST-PID-RANDOM` + SUFFIX."""
    return f"{prefix}tmp-{_HOST}-{os.getpid()}-{uuid.uuid4().hex}{suffix}"


def create(directory: str, prefix: str, suffix: str = "") -> tuple[int, str]:
    """Create a temporary file in DIRECTORY named for this process (as `tempfile.mkstemp`: an open fd and its path,
    the file readable by its owner only)."""
    return tempfile.mkstemp(prefix=f"{prefix}tmp-{_HOST}-{os.getpid()}-", suffix=suffix, dir=directory)


def writer_is_gone(filename: str) -> bool:
    """Whether the process that named FILENAME (`name`) ran on this machine and no longer runs."""
    match = _NAME.search(filename)
    if match is None or match["host"] != _HOST:
        return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # runs, as another user
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed child its parent has not reaped yet still has a pid: it writes nothing more."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def is_leftover(path: str, stale_seconds: float = STALE_SECONDS) -> bool:
    """Whether the temporary file at PATH is nobody's any more: its writer is gone, or it is older than
    `stale_seconds` (False if it vanished meanwhile)."""
    if writer_is_gone(os.path.basename(path)):
        return True
    try:
        return time.time() - os.stat(path).st_mtime > stale_seconds
    except FileNotFoundError:
        return False
