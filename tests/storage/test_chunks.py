"""chunks.py: what travels to the hub (compressed only when it helps, with its sha256) and the checks a pulled chunk
passes before a byte of it is written."""

from __future__ import annotations

import hashlib
import os

import pytest
import zstandard

from jupyter_compile_cache.storage.backends.base import HubError
from jupyter_compile_cache.storage.chunks import as_is, decode, encode


def test_text_is_compressed_noise_is_not_and_both_decode_to_what_was_sent():
    text = b"def kernel(x):\n    return x * 2  # generated\n" * 5000
    noise = os.urandom(200_000)
    for piece, compresses in ((text, True), (noise, False)):
        data, compressed, sha, raw = encode(piece)
        assert compressed is compresses and raw == len(piece) and sha == hashlib.sha256(data).hexdigest()
        assert (len(data) < len(piece) / 5) if compresses else data == piece
        assert bytes(decode(data, sha, compressed, len(piece), "chunk 0")) == piece


def test_a_pulled_chunk_that_is_missing_altered_or_the_wrong_size_is_refused():
    piece = os.urandom(1000)
    data, _, sha, _ = as_is(piece)
    with pytest.raises(HubError, match="missing"):
        decode(None, sha, False, 1000, "chunk 3")
    with pytest.raises(HubError, match="sha256"):
        decode(bytes([data[0] ^ 1]) + data[1:], sha, False, 1000, "chunk 3")  # always a different first byte
    with pytest.raises(HubError, match="size its manifest implies"):
        decode(data, sha, False, 999, "chunk 3")


def test_a_decompression_bomb_is_refused_before_it_is_expanded():
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    with pytest.raises(HubError, match="size its manifest implies"):
        decode(bomb, hashlib.sha256(bomb).hexdigest(), True, 1 << 20, "chunk 0")
    with pytest.raises(HubError, match="decompress"):
        junk = b"\x28\xb5\x2f\xfd" + os.urandom(100)  # a zstd magic, then garbage
        decode(junk, hashlib.sha256(junk).hexdigest(), True, 100, "chunk 0")
