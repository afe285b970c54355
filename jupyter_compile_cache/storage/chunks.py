"""A payload's chunks on the hub: each compressed when that helps, each with its sha256; and the checks a pulled
chunk must pass before a byte of it is written. Run on worker threads (zstd and hashlib release the GIL)."""

from __future__ import annotations

import hashlib

from . import file_copy
from .backends.base import HubError

DEFAULT_CHUNK = 4 << 20
MIN_CHUNK = 256 << 10
MAX_CHUNK = 64 << 20  # a manifest asking for bigger chunks is refused: what one chunk may hold in memory
_SAMPLE = 64 << 10


class DamagedChunk(HubError):
    """A version's chunks are bad: one is missing, fails its sha256 or does not decompress to its size, or the
    manifest's chunk list does not add up. That version is bad, not the hub: it may hold others that are whole."""


Encoded = tuple[bytes, bool, str, int]  # (stored bytes, compressed?, their sha256, raw length)


def encode(piece: bytes) -> Encoded:
    """A sample decides: kernels that do not compress (cubins, random weights) are sent as they are, without
    spending a compression pass on them."""
    import zstandard

    sample = piece[:_SAMPLE]
    if len(zstandard.ZstdCompressor(level=1).compress(sample)) < 0.9 * len(sample):
        data = zstandard.ZstdCompressor(level=3).compress(piece)
        if len(data) < len(piece):
            return data, True, hashlib.sha256(data).hexdigest(), len(piece)
    return as_is(piece)


def as_is(piece: bytes) -> Encoded:
    return piece, False, hashlib.sha256(piece).hexdigest(), len(piece)


def decode(data: bytes | None, sha256: str, compressed: bool, expected: int, what: str) -> memoryview:
    """The chunk's bytes, checked: present, the sha256 its manifest lists (before decompressing), and exactly the
    size the manifest implies (a zstd bomb is refused before it is expanded)."""
    if data is None:
        raise DamagedChunk(f"{what} is missing on the hub (evicted or removed?)")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise DamagedChunk(f"{what} fails its sha256 check")
    if compressed:
        return _decompress(data, expected, what)
    if len(data) != expected:
        raise DamagedChunk(f"{what} is not the size its manifest implies")
    return memoryview(data)


def _decompress(data: bytes, expected: int, what: str) -> memoryview:
    """`data` decompressed into this thread's buffer, which it must fill exactly."""
    import zstandard

    buf = file_copy.buffer(expected)
    try:  # the frame's declared size is checked first: a hostile chunk cannot make us write past `expected`
        if zstandard.frame_content_size(data) != expected:
            raise DamagedChunk(f"{what} does not decompress to the size its manifest implies")
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        done = 0
        while done < expected and (n := reader.readinto(buf[done:expected])):
            done += n
        if done != expected or reader.read(1):
            raise DamagedChunk(f"{what} does not decompress to the size its manifest implies")
    except zstandard.ZstdError as exc:
        raise DamagedChunk(f"{what} fails to decompress: {exc}") from None
    return buf[:expected]
