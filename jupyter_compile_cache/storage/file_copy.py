"""Copying and hashing ranges of files at the speed of the disk, on worker threads.

A save copies cache files into a pack, a restore copies a pack's members out again, and a hub pull writes each
chunk at its place in the pack. Both copy in the kernel
(`copy_file_range`: no bytes pass through Python) and then hash what was written, reading it back into a buffer
each thread reuses. Reusing matters: reading a GB into fresh 1 MB `bytes` objects makes the OS map and zero a GB
of new memory, which on a virtual machine cost more than the copy itself (measured: 3.4 s against 0.6 s for a
1 GB restore). Where the kernel cannot copy between the two files (another filesystem, another OS), the bytes go
through the thread's buffer instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

PIECE = 1 << 20
_local = threading.local()


def workers() -> int:
    """Threads for copying: sha256 runs at about 1 GB/s on one core, so more cores hash more."""
    return max(2, min(4, os.cpu_count() or 1))


def buffer(size: int = PIECE) -> memoryview:
    """This thread's reusable buffer, at least `size` bytes (grown, never shrunk)."""
    buf = getattr(_local, "buffer", None)
    if buf is None or len(buf) < size:
        buf = _local.buffer = memoryview(bytearray(max(size, PIECE)))
    return buf


def copy_range(src: int, src_offset: int, dst: int, dst_offset: int, size: int) -> int:
    """Copy `size` bytes between two file descriptors at the given offsets; returns how many were there to copy
    (fewer when `src` ends early)."""
    done = 0
    kernel = hasattr(os, "copy_file_range")
    while done < size:
        if kernel:
            try:
                n = os.copy_file_range(src, dst, size - done, src_offset + done, dst_offset + done)
            except OSError:  # EXDEV, ENOSYS, EINVAL...: copy through our buffer from here on
                kernel = False
                continue
        else:
            buf = buffer()
            n = os.preadv(src, [buf[: min(PIECE, size - done)]], src_offset + done)
            if n:
                pwrite_all(dst, buf[:n], dst_offset + done)
        if n == 0:
            break
        done += n
    return done


def pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of `data` at `offset` (threads may write different places of one file at once)."""
    while data:
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def hash_range(fd: int, offset: int, size: int) -> tuple[str, int]:
    """sha256 of `size` bytes of `fd` from `offset`, and how many bytes were there (fewer: the file is shorter)."""
    sha, done, buf = hashlib.sha256(), 0, buffer()
    while done < size:
        n = os.preadv(fd, [buf[: min(PIECE, size - done)]], offset + done)
        if n == 0:
            break
        sha.update(buf[:n])
        done += n
    return sha.hexdigest(), done


def copy_hashed(src: int, src_offset: int, dst: int, dst_offset: int, size: int) -> tuple[str, int]:
    """Copy `size` bytes as `copy_range` does and hash them as written: (sha256, bytes copied). Files up to a
    buffer's size go through the buffer once (read, write, hash); bigger ones are copied by the kernel and read
    back."""
    if size > PIECE:
        copied = copy_range(src, src_offset, dst, dst_offset, size)
        return hash_range(dst, dst_offset, copied)[0], copied
    buf = buffer()
    n = os.preadv(src, [buf[:size]], src_offset)
    pwrite_all(dst, buf[:n], dst_offset)
    return hashlib.sha256(buf[:n]).hexdigest(), n


def batches(sizes: Iterable[int], most: int = 64, most_bytes: int = 8 << 20) -> Iterator[range]:
    """Consecutive index ranges of at most `most` items and about `most_bytes`: one task per batch, so a cache of
    thousands of small files does not pay a thread hand-off per file."""
    start, count, total = 0, 0, 0
    for i, size in enumerate(sizes):
        if count and (count == most or total + size > most_bytes):
            yield range(start, i)
            start, count, total = i, 0, 0
        count, total = count + 1, total + size
    if count:
        yield range(start, start + count)


@contextlib.contextmanager
def ordered(fn: Callable[[Any], Any], items: Iterable[Any], ahead: int) -> Iterator[Generator[Any, None, None]]:
    """`in_order`'s results, its workers finished and joined, and ITEMS closed, when the block ends, whatever ends
    it, in this thread. A generator left to the garbage collector is finalized in whichever thread runs the
    collection: one of obstore's I/O threads once, whose join then waited on the requests that thread itself
    serves (a push hung for good after a failed one)."""
    results = in_order(fn, items, ahead)
    try:
        yield results
    finally:
        results.close()


def in_order(fn: Callable[[Any], Any], items: Iterable[Any], ahead: int) -> Generator[Any, None, None]:
    """`map(fn, items)` on worker threads, results in order, with at most `ahead` items taken and not yet given.
    Use it through `ordered` wherever its consumer may stop early."""
    with ThreadPoolExecutor(max_workers=min(ahead, workers()), thread_name_prefix="jupyter-compile-cache") as pool:
        pending: list[Future] = []
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= ahead:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        finally:
            for future in pending:
                future.cancel()
            close = getattr(items, "close", None)  # a generator of items (another in_order) ends with this one
            if close is not None:
                close()
