"""The private folder where this user's warm templates listen, and whether a process of ours is alive.

`$JUPYTER_COMPILE_CACHE_RUNTIME_DIR` if set, else `$XDG_RUNTIME_DIR/jupyter_compile_cache`, else
`/tmp/jupyter_compile_cache-<uid>`. Never `$TMPDIR`: a launch's TMPDIR may differ from the last one's, and both
must find the same templates. The folder must be this user's own with mode 0700: a socket in a folder others can
write to could be anybody's process, so without such a folder there are no templates (kernels start plain).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

RUNTIME_DIR_ENV = "JUPYTER_COMPILE_CACHE_RUNTIME_DIR"


def runtime_dir(env: Mapping[str, str] | None = None) -> str | None:
    """This user's private folder for templates (made if missing); None where it cannot be made private."""
    if os.name != "posix":
        return None
    variables: Mapping[str, str] = os.environ if env is None else env
    path = variables.get(RUNTIME_DIR_ENV)
    if not path:
        xdg = variables.get("XDG_RUNTIME_DIR")
        path = os.path.join(xdg, "jupyter_compile_cache") if xdg else f"/tmp/jupyter_compile_cache-{os.getuid()}"
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def process_alive(pid: int) -> bool:
    """A process of ours with that pid runs (a zombie does not: a killed template's parent, init in a container,
    may never reap it)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OverflowError):  # gone, or the pid reused by another user's
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc here
        return True


def rss_bytes(pid: int) -> int | None:
    """A process's resident memory (Linux's /proc), None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
