"""Files hashed and written on a second thread while the caller produces the next bytes.

A restore decompresses a payload and a hub pull receives chunks; hashing (sha256) and writing what came before can
run meanwhile: hashlib and file writes release the GIL, so on two cores both halves run at once. The queue is
bounded (`depth` pieces), so memory stays flat whatever the size.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from typing import Any


class FileWriterThread:
    """Writes files one after another: `open(path)`, `write(data)`..., `close()`; `finish()` waits and returns
    the sha256 of each file in order. A failure on the thread (a full disk) is raised by the next call."""

    def __init__(self, depth: int = 8, hashing: bool = True) -> None:
        self._hashing = hashing  # off: finish() returns "" for each file (its bytes are verified elsewhere)
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._digests: list[str] = []
        self._finished = False
        self._thread = threading.Thread(target=self._run, name="jupyter-compile-cache-writer", daemon=True)
        self._thread.start()

    def open(self, path: str) -> None:
        self._put(("open", path))

    def write(self, data: bytes) -> int:
        self._put(("data", data))
        return len(data)

    def close(self) -> None:
        self._put(("close", None))

    def finish(self) -> list[str]:
        """Wait for every queued write; the sha256 of each closed file, in order. Raises the thread's error."""
        if not self._finished:
            self._finished = True
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._digests

    def _put(self, item: tuple[str, Any]) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(item)

    def _run(self) -> None:
        out: Any = None
        sha: Any = None
        try:
            while (item := self._queue.get()) is not None:
                kind, value = item
                if kind == "data":
                    if sha is not None:
                        sha.update(value)
                    out.write(value)  # type: ignore[union-attr]
                elif kind == "open":
                    out, sha = open(value, "wb"), hashlib.sha256() if self._hashing else None
                else:
                    out.close()  # type: ignore[union-attr]
                    self._digests.append(sha.hexdigest() if sha is not None else "")
                    out = None
        except BaseException as exc:
            self._error = exc
            while self._queue.get() is not None:  # let the producer go on to finish() without blocking
                pass
        finally:
            if out is not None:
                out.close()
