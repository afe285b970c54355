"""Which files a cell opens, and how many processes it starts, while it runs.

The standard library's functions that open a file or start a process are wrapped for exactly as long as a cell is
recorded (an audit hook would see the same events, but cannot be removed, and CPython would build every audited event
of the kernel's life for it):

* opens: `open` (builtins and io), `os.open`, and `io.open_code`, through which imports read torch's generated modules;
* process starts: `subprocess.Popen`, `os.fork`, `os.forkpty`, `os.posix_spawn[p]`, `os.system`, `os.execv[e]` (the
  other `os.exec*` and `os.spawn*` call those) and multiprocessing's spawn, less those torch's compiler or Triton make
  for this process's own compiles.

Files opened in C (`dlopen`, C++ streams) are out of sight here; capture.py finds loaded libraries another way.
"""

from __future__ import annotations

import _io
import builtins
import functools
import io
import multiprocessing.util
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

_OPENERS: tuple[tuple[Any, str], ...] = (
    (builtins, "open"),
    (io, "open"),
    (os, "open"),
    (io, "open_code"),
    (_io, "open_code"),  # what importlib calls
)
_STARTERS: tuple[tuple[Any, str], ...] = (
    (subprocess.Popen, "__init__"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (os, "execv"),
    (os, "execve"),
    (multiprocessing.util, "spawnv_passfds"),
)


def _started_by_the_compiler(frame: FrameType | None) -> bool:
    """Whether the process being started (by the code at `frame`) is torch's compiler's own (a C++ compiler, a
    compile worker) or Triton's: those run for this process's compiles, which its counters see. A launcher in torch
    (torch.multiprocessing, elastic) starts workers of the user's: those count. Process starts are rare: the stack
    is walked each time."""
    homes = []
    for name, sub in (("torch", "_inductor"), ("triton", "")):
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str):
            homes.append(os.path.join(os.path.dirname(path), sub).rstrip(os.sep) + os.sep)
    while frame is not None and homes:
        if frame.f_code.co_filename.startswith(tuple(homes)):
            return True
        frame = frame.f_back
    return False


class OpenRecorder:
    """Records while started: the paths opened under `prefixes` into `opened`, and the processes started."""

    def __init__(self) -> None:
        self.opened: set[str] = set()
        self.prefixes: tuple[str, ...] = ()
        self.processes = 0
        self._placed: list[tuple[Any, str, Callable[..., Any]]] = []  # (owner, name, our wrapper)
        self._starting = threading.local()  # Popen calling posix_spawn is one start

    def start(self, prefixes: tuple[str, ...]) -> None:
        self.opened = set()
        self.prefixes = prefixes
        self.processes = 0
        if self._placed:  # a cell inside a cell: the wrappers are in place
            return
        for owner, name in _OPENERS:
            self._place(owner, name, self._opening)
        for owner, name in _STARTERS:
            self._place(owner, name, self._counting)

    def stop(self) -> None:
        """Puts each function back, unless something wrapped it since: then ours stays, passing calls through."""
        placed, self._placed = self._placed, []
        for owner, name, wrapper in reversed(placed):
            if owner.__dict__.get(name) is wrapper:
                setattr(owner, name, wrapper.__wrapped__)  # pyright: ignore[reportFunctionMemberAccess]

    def _place(self, owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = owner.__dict__.get(name)
        if original is None:  # not on this platform
            return
        known = {id(w.__wrapped__): w for o, n, w in self._placed}  # pyright: ignore[reportFunctionMemberAccess]
        wrapper = known.get(id(original)) or functools.wraps(original)(make(original))  # builtins.open is io.open
        setattr(owner, name, wrapper)
        self._placed.append((owner, name, wrapper))

    def _opening(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def opening(file: Any, *args: Any, **kwargs: Any) -> Any:
            if self._placed:
                path = os.fsdecode(file) if isinstance(file, (str, bytes, os.PathLike)) else None
                if path is not None and path.startswith(self.prefixes):
                    self.opened.add(path)
            return original(file, *args, **kwargs)

        return opening

    def _counting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def starting(*args: Any, **kwargs: Any) -> Any:
            if not self._placed or getattr(self._starting, "active", False):
                return original(*args, **kwargs)
            self.processes += not _started_by_the_compiler(sys._getframe(1))
            self._starting.active = True
            try:
                return original(*args, **kwargs)
            finally:
                self._starting.active = False

        return starting
