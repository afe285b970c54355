"""writer_thread.py: files hashed and written on a second thread, in order, failures raised to the producer."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from jupyter_compile_cache.storage.writer_thread import FileWriterThread


def test_files_are_written_in_order_with_their_digests(tmp_path):
    writer = FileWriterThread(depth=2)  # a short queue: the producer waits for the thread
    contents = [os.urandom(n) for n in (0, 1, 3 << 20, 1000)]
    for i, data in enumerate(contents):
        writer.open(str(tmp_path / f"f{i}"))
        for start in range(0, len(data), 64 << 10):
            writer.write(data[start : start + (64 << 10)])
        writer.close()
    assert writer.finish() == [hashlib.sha256(d).hexdigest() for d in contents]
    assert [(tmp_path / f"f{i}").read_bytes() for i in range(len(contents))] == contents


def test_a_failure_on_the_thread_reaches_the_producer_which_never_blocks(tmp_path):
    writer = FileWriterThread(depth=2)
    writer.open(str(tmp_path / "no" / "such" / "dir" / "f"))  # fails on the thread
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError):
        for _ in range(1000):  # far more than the queue holds
            writer.write(b"x" * 1024)
    with pytest.raises(FileNotFoundError):
        writer.finish()
    assert time.perf_counter() - start < 10
