"""Where a cell's wall time goes, by sampling its thread's Python stack: cProfile's per-call cost distorts a cell
made of many small calls several times over, a sampler does not.

A thread takes the sampled thread's stack about every `interval` seconds. A sample waits while the sampled thread
holds the GIL in C, so each sample is weighted by the time since the one before it: a long C call is charged to
the Python frame that made it.
"""

from __future__ import annotations

import collections
import gc
import sys
import threading
import time


class StackSampler:
    def __init__(self, interval: float = 0.0005) -> None:
        self.interval = interval
        self.own: collections.Counter[str] = collections.Counter()  # innermost frame -> seconds
        self.inside: collections.Counter[str] = collections.Counter()  # any frame on the stack -> seconds
        self.total = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._target = threading.get_ident()
        self._switch = sys.getswitchinterval()
        self.collections: collections.Counter[int] = collections.Counter()  # generation -> garbage collections
        self.collecting: collections.Counter[int] = collections.Counter()  # generation -> seconds in them
        self._gc_start = 0.0

    def __enter__(self) -> StackSampler:
        self._target = threading.get_ident()
        sys.setswitchinterval(self.interval / 5)  # lets the sampler in while the cell runs Python
        gc.callbacks.append(self._on_gc)  # a collection is charged to whatever frame allocated last: counted apart
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        gc.callbacks.remove(self._on_gc)
        if self._thread is not None:
            self._thread.join()
        sys.setswitchinterval(self._switch)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.collecting[info["generation"]] += time.perf_counter() - self._gc_start

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self._target)
            now = time.perf_counter()
            weight, last = now - last, now
            if frame is None:
                continue
            self.total += weight
            names = []
            while frame is not None:
                code = frame.f_code
                names.append(f"{_short(code.co_filename)}:{code.co_firstlineno}({code.co_name})")
                frame = frame.f_back
            self.own[names[0]] += weight
            for name in set(names):
                self.inside[name] += weight

    def report(self, top: int = 40) -> str:
        """The functions with the most time inside them, then the innermost frames with the most time."""
        lines = [f"sampled {self.total:.3f} s"]
        lines += [
            f"garbage collections of generation {g}: {self.collections[g]}, {self.collecting[g]:.3f} s"
            for g in sorted(self.collections)
        ]
        for title, counter in (("inside (inclusive)", self.inside), ("own (innermost frame)", self.own)):
            lines.append(f"-- {title}")
            lines += [f"{seconds:8.3f}  {name}" for name, seconds in counter.most_common(top)]
        return "\n".join(lines)


def _short(path: str) -> str:
    """A frame's file without its installation's prefix; the package's own files as jcc/..."""
    for marker, prefix in (("site-packages/", ""), ("jupyter_compile_cache/", "jcc/"), ("lib/python", "")):
        if marker in path:
            return prefix + path.split(marker, 1)[1]
    return path
