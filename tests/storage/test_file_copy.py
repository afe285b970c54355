"""file_copy.py: ranges of real files copied and hashed, big and small, across a file that ends early; batches; the
ordered worker map."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

from jupyter_compile_cache.storage import file_copy


@pytest.mark.parametrize("size", [0, 1, 4096, file_copy.PIECE, file_copy.PIECE * 3 + 17])
def test_copy_hashed_copies_a_range_exactly_and_hashes_what_it_wrote(tmp_path, size):
    data = os.urandom(size + 100)
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(data)
    dst.write_bytes(b"x" * 50)
    with open(src, "rb") as s, open(dst, "r+b") as d:
        digest, copied = file_copy.copy_hashed(s.fileno(), 100, d.fileno(), 50, size)
    assert copied == size and digest == hashlib.sha256(data[100:]).hexdigest()
    assert dst.read_bytes() == b"x" * 50 + data[100:]


def test_a_source_that_ends_early_copies_what_is_there_and_says_how_much(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(os.urandom(3 * file_copy.PIECE))
    dst.touch()
    with open(src, "rb") as s, open(dst, "r+b") as d:
        copied = file_copy.copy_range(s.fileno(), file_copy.PIECE, d.fileno(), 0, 5 * file_copy.PIECE)
        digest, hashed = file_copy.hash_range(d.fileno(), 0, 5 * file_copy.PIECE)
    assert copied == hashed == 2 * file_copy.PIECE
    assert digest == hashlib.sha256(src.read_bytes()[file_copy.PIECE :]).hexdigest()


def test_batches_bound_the_count_and_the_bytes_and_cover_every_item():
    sizes = [1] * 130 + [5 << 20, 5 << 20, 1]
    ranges = list(file_copy.batches(sizes, most=64, most_bytes=8 << 20))
    assert [i for r in ranges for i in r] == list(range(len(sizes)))
    assert all(len(r) <= 64 for r in ranges)
    assert all(len(r) == 1 or sum(sizes[i] for i in r) <= 8 << 20 for r in ranges)


def test_in_order_keeps_the_order_and_takes_at_most_ahead_items():
    taken = []

    def items():
        for i in range(20):
            taken.append(i)
            yield i

    def slow_square(i):
        time.sleep(0.002 * (i % 3))
        return i * i, threading.current_thread().name

    out = []
    for value, thread in file_copy.in_order(slow_square, items(), ahead=3):
        assert len(taken) - len(out) <= 3
        out.append(value)
        assert thread.startswith("jupyter-compile-cache")
    assert out == [i * i for i in range(20)]
