"""Format 1 bundles, as versions before 0.2 wrote them (a zstd tar stream), to test that they still restore."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Mapping
from typing import IO, Any

import zstandard

from jupyter_compile_cache.storage.bundle import Member, check_member_name


class _HashingWriter(io.RawIOBase):
    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha, self.count = raw, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.raw.write(view)
        self.sha.update(view)
        self.count += len(view)
        return len(view)


def write_tar_payload(files: Mapping[str, str], out: IO[bytes]) -> tuple[list[Member], str, int]:
    """(members, payload sha256, payload bytes) of `files` ({member name: path}) written to `out` as format 1."""
    members: list[Member] = []
    sink = _HashingWriter(out)
    with (
        zstandard.ZstdCompressor(level=3).stream_writer(sink, closefd=False) as zout,
        tarfile.open(fileobj=zout, mode="w|") as tar,
    ):
        for name in sorted(files):
            check_member_name(name)
            with open(files[name], "rb") as f:
                data = f.read()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
            members.append(Member(name, len(data), hashlib.sha256(data).hexdigest()))
    return members, sink.sha.hexdigest(), sink.count
