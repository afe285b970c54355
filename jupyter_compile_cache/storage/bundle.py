"""A bundle: the cache-dir files one cell compiled or used, as one payload file plus a JSON manifest.

The payload (format 2) is a pack: the members' bytes one after another, in the manifest's order, uncompressed, so
that saving and restoring run at the speed of the disk (the hub compresses what it sends, chunk by chunk). Members
are named `<root>/<path>`, where root is `inductor` (TORCHINDUCTOR_CACHE_DIR) or `triton` (a TRITON_CACHE_DIR
outside it). The manifest lists every member with its size and sha256, the environment fingerprint and the saving
run's stats; it is written after the payload and is the commit point. Format 1 payloads (a zstd tar stream, written
by versions before 0.2) are still read.

Extraction trusts nothing: member names are checked against the manifest before anything is written (no absolute
paths, no `..`, only known roots; a format 1 tar may hold only regular files: no links, devices, directories),
every file is hashed while it is staged inside the cache dir, and files move into place only after the whole
payload verified. Any failure leaves the cache dir as it was. Restored files are copies: nothing written through
the cache dir can reach the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import itertools
import os
import re
import shutil
import tarfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from . import file_copy

FORMAT = 2  # what this version writes
READABLE_FORMATS = (1, 2)
COMPRESSION = "none"
ROOTS = ("inductor", "triton")
_READ_SIZE = 1 << 20
NAME_RE = re.compile(r"(?!\.+\Z)[A-Za-z0-9._-]{1,128}")  # whole (fullmatch: `$` takes a last "\n")
VERSION_RE = re.compile(r"[0-9]{20}-[0-9a-f]{12}-[0-9a-f]{8}")


class BundleError(Exception):
    """A bundle that cannot be restored: the caller skips it (and quarantines a local copy)."""


class DamagedBundle(BundleError):
    pass


class UnsafeBundle(BundleError):
    pass


@dataclass(frozen=True)
class FieldMismatch:
    """A field of a version's machine fingerprint that differs from this machine's: why it cannot restore here."""

    field: str
    saved: Any  # the version's
    current: Any  # this machine's


@dataclass
class Member:
    name: str
    size: int
    sha256: str


@dataclass
class Manifest:
    name: str
    version: str
    created: float
    writer: str
    fingerprint: dict[str, Any]
    fingerprint_id: str
    payload_sha256: str
    payload_bytes: int
    members: list[Member]
    uses_gpu: bool = False
    uses_cpu_kernels: bool = False
    stats: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT
    compression: str = COMPRESSION
    # Set by the hub: how the payload was chunked, each chunk's sha256 as stored there and which chunks it keeps
    # zstd-compressed (covered by the signature).
    chunk_size: int | None = None
    chunk_sha256: list[str] | None = None
    chunk_compressed: list[bool] | None = None
    signature: str | None = None
    # Fields this version does not know (written by an older or newer one), kept as read so that a signature over
    # the manifest still verifies.
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(
        cls,
        name: str,
        fingerprint: dict[str, Any],
        fingerprint_id: str,
        writer: str,
        stats: dict[str, Any] | None = None,
    ) -> Manifest:
        """A manifest before its payload is written: the store fills in members, sizes and hashes."""
        return cls(
            name=name,
            version=new_version_id(fingerprint_id),
            created=time.time(),
            writer=writer,
            fingerprint=fingerprint,
            fingerprint_id=fingerprint_id,
            payload_sha256="",
            payload_bytes=0,
            members=[],
            stats=stats or {},
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {**data.pop("extra"), **data}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        try:
            if data.get("format") not in READABLE_FORMATS:
                raise DamagedBundle(
                    f"unsupported bundle format {data.get('format')!r} (this version reads formats 1 and 2)"
                )
            known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
            fields = {k: v for k, v in data.items() if k in known}
            fields["extra"] = {k: v for k, v in data.items() if k not in known}
            name, version = data["name"], data["version"]
            if not (isinstance(name, str) and isinstance(version, str)) or not (
                VERSION_RE.fullmatch(version) and NAME_RE.fullmatch(name)
            ):
                raise DamagedBundle(f"manifest has an invalid name or version: {data['name']!r} {data['version']!r}")
            fields["members"] = [Member(str(m["name"]), int(m["size"]), str(m["sha256"])) for m in data["members"]]
            manifest = cls(**fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise DamagedBundle(f"manifest is malformed: {exc}") from exc
        if manifest.format == 2 and manifest.payload_sha256 != members_digest(manifest.members):
            raise DamagedBundle("manifest's member list fails its sha256 check")
        return manifest


def check_name(name: str) -> str:
    """Bundle names: letters, digits, '._-', at most 128 characters, not only dots."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(f"invalid bundle name {name!r}: use letters, digits, '.', '_', '-' (at most 128 characters)")
    return name


SHORT_ID = 7  # the shown id: the first characters of the version's random part, as git shows commits


def short_id(version: str) -> str:
    """The id people see and type: `list`, `explain`, the panel and `--json` show it; `--version` takes it."""
    return version.rsplit("-", 1)[-1][:SHORT_ID]


def matching_versions(versions: list[str], given: str) -> list[str]:
    """The versions `given` names: a whole id, a prefix of one, or a prefix (4 characters or more) of a short id."""
    given = given.strip()
    if not given:
        return []
    if given in versions:
        return [given]
    return [v for v in versions if v.startswith(given) or (len(given) >= 4 and v.rsplit("-", 1)[-1].startswith(given))]


def new_version_id(fingerprint_id: str) -> str:
    """Sortable by creation time, unique across concurrent writers."""
    return f"{time.time_ns():020d}-{fingerprint_id}-{uuid.uuid4().hex[:8]}"


def check_member_name(name: str) -> None:
    """Refuse names that could escape the cache dir or that we never write."""
    if not name or "\\" in name or "\x00" in name or name.startswith("/") or os.path.isabs(name):
        raise UnsafeBundle(f"member {name!r} has an absolute or malformed path")
    parts = name.split("/")
    if parts[0] not in ROOTS or len(parts) < 2:
        raise UnsafeBundle(f"member {name!r} is outside the known cache roots")
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafeBundle(f"member {name!r} contains '..' or an empty path component")


class _HashingReader(io.RawIOBase):
    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.sha, self.count = raw, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.sha.update(data)
        self.count += n
        return n

    def drain(self) -> None:
        while self.readinto(bytearray(_READ_SIZE)):
            pass


def members_digest(members: Iterable[Member]) -> str:
    """A format 2 payload's sha256: over its member list (each member's own sha256 covers its bytes of the pack)."""
    sha = hashlib.sha256()
    for m in members:
        sha.update(f"{m.name}\0{m.size}\0{m.sha256}\n".encode())
    return sha.hexdigest()


def write_pack(
    files: Mapping[str, str], out: IO[bytes], progress: Callable[[int, int], None] | None = None
) -> tuple[list[Member], str, int]:
    """Write `files` ({member name: path on disk}) as a pack into the file `out`; returns (members, payload sha256,
    bytes). Each file is copied on a worker thread and hashed as it lies in the pack: what is hashed is what was
    written. A file gone before the save starts is skipped (torch may prune its cache: it only costs a hit); one that
    changes size while copied fails the save. `progress(done, total)`: bytes written, of all."""
    names = sorted(files)
    for name in names:
        check_member_name(name)
    out.flush()
    dst = out.fileno()
    sizes = {}
    for name in names:
        with contextlib.suppress(OSError):
            sizes[name] = os.stat(files[name]).st_size
    total = sum(sizes.values())
    offsets = dict(zip(sizes, itertools.accumulate(sizes.values(), initial=0)))

    def copy(name: str) -> Member:
        at, size = offsets[name], sizes[name]
        with open(files[name], "rb") as f:
            digest, copied = file_copy.copy_hashed(f.fileno(), 0, dst, at, size)
            if copied != size or os.fstat(f.fileno()).st_size != size:
                raise OSError(f"{files[name]} changed while it was saved")
        return Member(name, size, digest)

    listed = list(sizes)
    members: list[Member] = []
    done = 0
    batches = file_copy.batches(sizes.values())
    with file_copy.ordered(lambda b: [copy(listed[i]) for i in b], batches, ahead=8) as copied:
        for batch in copied:
            members += batch
            done += sum(m.size for m in batch)
            if progress is not None:
                progress(done, total)
    os.ftruncate(dst, total)
    return members, members_digest(members), total


def copy_slim(payload: IO[bytes], manifest: Manifest, keep: Callable[[str], bool], out: IO[bytes]) -> Manifest:
    """Write a format 2 payload's members that `keep` takes, as a pack, into the file `out`; returns their manifest:
    a new version id of the same time and fingerprint (a version never changes; its order among the others stays),
    unchunked and unsigned (a push chunks and signs it anew). Each member is hashed as it lies in the new pack: a
    damaged one raises DamagedBundle, nothing is copied on trust."""
    src, dst = payload.fileno(), out.fileno()
    out.flush()
    members, at, start = [], 0, 0
    for m in manifest.members:
        if keep(m.name):
            digest, copied = file_copy.copy_hashed(src, start, dst, at, m.size)
            if copied != m.size or digest != m.sha256:
                raise DamagedBundle(f"member {m.name!r} fails its sha256 check")
            members.append(m)
            at += m.size
        start += m.size
    os.ftruncate(dst, at)
    stamp, _, _suffix = manifest.version.rpartition("-")
    return dataclasses.replace(
        manifest,
        version=f"{stamp}-{uuid.uuid4().hex[:8]}",
        members=members,
        payload_bytes=at,
        payload_sha256=members_digest(members),
        chunk_size=None,
        chunk_sha256=None,
        chunk_compressed=None,
        signature=None,
    )


def verify_payload(path: str, manifest: Manifest) -> None:
    """Raise DamagedBundle unless the payload at PATH holds what MANIFEST lists, byte for byte (each member's sha256
    in a format 2 pack; the whole payload's in format 1)."""
    with open(path, "rb") as f:
        if manifest.format != 2:
            sha = hashlib.sha256()
            while chunk := f.read(_READ_SIZE):
                sha.update(chunk)
            if sha.hexdigest() != manifest.payload_sha256:
                raise DamagedBundle("payload fails its sha256 check")
            return
        size, listed = os.fstat(f.fileno()).st_size, sum(m.size for m in manifest.members)
        if size != listed:
            raise DamagedBundle(f"payload has {size} bytes, its manifest lists {listed}")
        for m in manifest.members:
            sha, left = hashlib.sha256(), m.size
            while left:
                chunk = f.read(min(left, _READ_SIZE))
                sha.update(chunk)
                left -= len(chunk)
            if sha.hexdigest() != m.sha256:
                raise DamagedBundle(f"member {m.name!r} fails its sha256 check")


def _root_dirs(roots: Mapping[str, str]) -> dict[str, str]:
    return {k: os.path.realpath(v) for k, v in roots.items()}


def extract(
    payload: IO[bytes],
    manifest: Manifest,
    roots: Mapping[str, str],
    progress: Callable[[int, int], None] | None = None,
    place_as: Callable[[str], str] | None = None,
    keep: Callable[[str], bool] | None = None,
) -> list[str]:
    """Verify and restore a payload into the cache roots; returns the paths written (`progress(done, total)`: bytes
    restored, of all; `place_as(member)`: the name to write it as, checked like a member's; `keep(member)`: whether
    to restore it at all, the others neither read nor written). Raises UnsafeBundle or DamagedBundle, writing nothing
    visible, if anything is off."""
    expected = {}
    for m in manifest.members:
        check_member_name(m.name)
        if m.name in expected:
            raise UnsafeBundle(f"member {m.name!r} is listed twice")
        expected[m.name] = m
    wanted = {name for name in expected if keep is None or keep(name)}
    real_roots = _root_dirs(roots)
    for root in {name.split("/", 1)[0] for name in wanted}:
        if root not in real_roots:
            raise UnsafeBundle(f"bundle writes to cache root {root!r}, which this kernel does not have")

    staging = {root: os.path.join(path, f".jcc-staging-{uuid.uuid4().hex}") for root, path in real_roots.items()}
    numbers = itertools.count()
    made: set[str] = set()  # staging folders made, and final folders made and checked

    def place(name: str) -> tuple[str, str]:
        if place_as is not None:
            name = place_as(name)
            check_member_name(name)
        root, rel = name.split("/", 1)
        if staging[root] not in made:
            os.makedirs(staging[root], exist_ok=True)
            made.add(staging[root])
        # staged flat, by number: a bundle of thousands of kernel folders is not made twice (and removed once)
        tmp = os.path.join(staging[root], str(next(numbers)))
        return tmp, os.path.join(real_roots[root], *rel.split("/"))

    try:
        if manifest.format >= 2:
            staged, digests = _stage_pack(payload, manifest, wanted, place, progress)
        else:
            staged, digests = _stage_tar(payload, manifest, expected, wanted, place, progress)
        for (name, _tmp, _final), digest in zip(staged, digests, strict=True):
            if digest != expected[name].sha256:
                raise DamagedBundle(f"member {name!r} fails its sha256 check")
        missing = wanted - {name for name, _tmp, _final in staged}
        if missing:
            raise DamagedBundle(f"payload lacks {len(missing)} member(s) listed in the manifest")
        written = []
        for _name, tmp, final in staged:
            folder = os.path.dirname(final)
            if folder not in made:  # each folder checked and made once, however many files go in it
                _check_inside(final, real_roots)
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            os.replace(tmp, final)
            written.append(final)
        return written
    finally:
        for path in staging.values():
            shutil.rmtree(path, ignore_errors=True)


Staged = list[tuple[str, str, str]]  # (member, staged path, final path)


def _stage_pack(
    payload: IO[bytes],
    manifest: Manifest,
    wanted: set[str],
    place: Callable[[str], tuple[str, str]],
    progress: Callable[[int, int], None] | None,
) -> tuple[Staged, list[str]]:
    """Format 2: each wanted member copied out of the pack file on a worker thread, then hashed as it lies in the
    cache dir's staging folder: what is checked is what will be used."""
    src = payload.fileno()
    actual = os.fstat(src).st_size
    if actual != sum(m.size for m in manifest.members):
        raise DamagedBundle(f"payload has {actual} bytes, its members {sum(m.size for m in manifest.members)}")
    offsets = list(itertools.accumulate((m.size for m in manifest.members), initial=0))
    chosen = [i for i, m in enumerate(manifest.members) if m.name in wanted]
    total = sum(manifest.members[i].size for i in chosen)
    staged: Staged = [(manifest.members[i].name, *place(manifest.members[i].name)) for i in chosen]
    digests: list[str] = []
    done = 0

    def copy(j: int) -> str:
        i = chosen[j]
        member, tmp = manifest.members[i], staged[j][1]
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            digest, copied = file_copy.copy_hashed(src, offsets[i], fd, 0, member.size)
        finally:
            os.close(fd)
        if copied != member.size:
            raise DamagedBundle(f"payload is truncated (in member {member.name!r})")
        return digest

    batches = file_copy.batches(manifest.members[i].size for i in chosen)
    with file_copy.ordered(lambda b: [(j, copy(j)) for j in b], batches, ahead=8) as copied:
        for batch in copied:
            for j, digest in batch:
                digests.append(digest)
                done += manifest.members[chosen[j]].size
            if progress is not None:
                progress(done, total)
    return staged, digests


def _stage_tar(
    payload: IO[bytes],
    manifest: Manifest,
    expected: Mapping[str, Member],
    wanted: set[str],
    place: Callable[[str], tuple[str, str]],
    progress: Callable[[int, int], None] | None,
) -> tuple[Staged, list[str]]:
    """Format 1: a zstd tar stream, hashed as a whole too (the members not wanted read through, not written)."""
    import zstandard

    staged: Staged = []
    digests: list[str] = []
    reader = _HashingReader(payload)
    total, done = sum(m.size for m in manifest.members), 0
    try:
        zin = zstandard.ZstdDecompressor().stream_reader(reader, closefd=False)  # type: ignore[arg-type]  # a reader
        with tarfile.open(fileobj=zin, mode="r|") as tar:
            seen: set[str] = set()
            for info in tar:
                if not info.isreg():
                    raise UnsafeBundle(f"member {info.name!r} is not a regular file (links and devices are refused)")
                member = expected.get(info.name)
                if member is None or info.name in seen:
                    raise UnsafeBundle(f"member {info.name!r} is not in the manifest")
                if info.size != member.size:
                    raise DamagedBundle(f"member {info.name!r} has {info.size} bytes, manifest says {member.size}")
                seen.add(info.name)
                if info.name not in wanted:
                    continue
                tmp, final = place(info.name)
                src = tar.extractfile(info)
                sha = hashlib.sha256()
                with open(tmp, "wb") as out:
                    while chunk := src.read(_READ_SIZE):  # type: ignore[union-attr]
                        sha.update(chunk)
                        out.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(done, total)
                staged.append((info.name, tmp, final))
                digests.append(sha.hexdigest())
        reader.drain()
    except (tarfile.TarError, zstandard.ZstdError, EOFError) as exc:
        raise DamagedBundle(f"payload is truncated or corrupt: {exc}") from exc
    if reader.sha.hexdigest() != manifest.payload_sha256:
        raise DamagedBundle("payload fails its sha256 check")
    return staged, digests


def _check_inside(path: str, real_roots: Mapping[str, str]) -> None:
    # A symlinked directory already inside the cache dir must not redirect our write elsewhere.
    parent = os.path.realpath(os.path.dirname(path))
    if not any(parent == r or parent.startswith(r + os.sep) for r in real_roots.values()):
        raise UnsafeBundle(f"{path} resolves outside the cache dir")


# Generated wrapper modules that call compiled C++ kernels contain one of these.
_CPU_KERNEL_MARKERS = (b"cpp_pybinding", b"async_compile.cpp(", b"CppPythonBindingsCodeCache")


def classify(members: Iterable[Member], files: Mapping[str, str] | None = None) -> tuple[bool, bool]:
    """(uses_gpu, uses_cpu_kernels) of a bundle: which fingerprint fields must match. CPU kernels are recognised by the
    generated wrapper modules that load them (where `files` gives their paths), not by `.so` files alone: torch's CPU
    ISA probe programs must not make a GPU bundle look CPU-bound."""
    uses_gpu = uses_cpu = False
    for m in members:
        base = m.name.rsplit("/", 1)[-1]
        in_triton = m.name.startswith(("triton/", "inductor/triton/"))
        if in_triton or base.endswith((".cubin", ".hsaco", ".ptx")):
            uses_gpu = True
        elif files is None and base.endswith(".so"):
            uses_cpu = True
        elif files is not None and base.endswith(".py") and not uses_cpu:
            try:
                with open(files[m.name], "rb") as f:
                    source = f.read()
            except (OSError, KeyError):
                continue
            uses_cpu = any(marker in source for marker in _CPU_KERNEL_MARKERS)
    return uses_gpu, uses_cpu
