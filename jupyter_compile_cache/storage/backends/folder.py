"""The folder backend: `file:///path/to/folder`, a folder a team shares (an NFS mount, a synced drive, a disk
several kernels of one machine see).

Each key is one file: its `:`-separated parts are folders, each part percent-quoted (so a namespace's `/` never
makes a folder of its own), the group part in braces as earlier versions wrote it (storage/backends/keys.py). A file
starts with a 12-byte header (magic, expiry time or 0) and holds the value.

Many writers are safe: a value is written under a temporary name (`#tmp-...`, a name no key quotes to) in the same
folder, flushed to disk, then renamed into place, so a reader sees a whole old value, a whole new one, or none, and a
crash leaves only a temporary file, which `list` never shows and `sweep` removes: at once when it names a writer of
this machine that is gone (storage/temp_files.py), else after an hour. The lease file is
created with O_EXCL (atomic on local filesystems and NFSv3 and later); an expired lease is broken by renaming it to
a unique name, which only one process can do, and the breaker checks it broke what it read. Expiry compares wall
clocks: the machines sharing a folder need synchronised clocks (NTP), as NFS itself does.

The folder must exist: a share that is not mounted is an error, never a new empty hub on the local disk.
"""

from __future__ import annotations

import errno
import os
import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import ClassVar
from urllib.parse import quote, unquote, urlsplit

from .. import temp_files
from ..clock import SYSTEM_CLOCK, Clock
from .base import HubError, HubRefused
from .keys import braced, unbraced

MAGIC = b"JCC1"
HEADER = struct.Struct("<4sd")  # magic, expiry (seconds since the epoch; 0: never)
TEMP = "#"  # prefix of temporary and broken-lease files: quote() never yields it
STALE_TEMP_SECONDS = 3600


def folder_of(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise ValueError("a folder hub is file:///absolute/path (no host)")
    return unquote(parts.path).rstrip("/") or "/"


def _check_url(url: str) -> None:
    folder_of(url)


def key_path(key: str) -> list[str]:
    """The parts of KEY's file's path under the hub's folder: its group in braces, each part percent-quoted."""
    return [quote(part, safe="{}._-") for part in braced(key).split(":")]


class FolderBackend:
    SCHEMES: ClassVar[tuple[str, ...]] = ("file",)
    USAGE: ClassVar[str] = "file:///path/to/a/shared/folder"
    kind = "folder"
    keys_per_call = 2
    push_calls_in_flight = pull_calls_in_flight = 2  # one call reads or writes while the other waits on the disk
    torch_redis_url = None
    expiry_in_place = True
    check_url = staticmethod(_check_url)

    def __init__(
        self, url: str, connect_timeout: float = 2.0, timeout: float = 10.0, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.clock = clock
        self.url = url
        self.display_url = url
        self.root = folder_of(url)

    # -- paths --------------------------------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return self._braced_path(braced(key))

    def _braced_path(self, key: str) -> str:
        return os.path.join(self.root, *(quote(part, safe="{}._-") for part in key.split(":")))

    def _error(self, exc: OSError, doing: str) -> HubError:
        if not os.path.isdir(self.root):
            return HubError(f"hub {self.url}: the folder {self.root} is not there (is the share mounted?)")
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):  # the folder's permissions: this user may not
            action = "read" if doing in ("reading", "listing") else "write"
            reason = "the folder is read-only" if exc.errno == errno.EROFS else "permission denied"
            return HubRefused(f"hub {self.url}: {doing} failed: {reason}", action, denied=True)
        reason = {errno.ENOSPC: "the disk is full", errno.EFBIG: "a file size limit was reached",
                  errno.EDQUOT: "the disk quota is exceeded", errno.EROFS: "the folder is read-only",
                  errno.EACCES: "permission denied"}.get(exc.errno or 0, exc.strerror or str(exc))  # fmt: skip
        return HubError(f"hub {self.url}: {doing} failed: {reason}")

    def _check_root(self) -> None:
        if not os.path.isdir(self.root):
            raise HubError(f"hub {self.url}: the folder {self.root} is not there (is the share mounted?)")

    def _make_parents(self, path: str) -> None:
        """PATH's folders below the hub's folder, never that folder itself: a share unmounted mid-push raises here
        (FileNotFoundError) where `makedirs` made a local folder in its place, which the share then could not be
        mounted back over."""
        current = self.root
        for part in os.path.relpath(os.path.dirname(path), self.root).split(os.sep):
            if part == ".":
                continue
            current = os.path.join(current, part)
            try:
                os.mkdir(current)
            except FileExistsError:
                pass

    @staticmethod
    def _read(path: str, header_only: bool = False) -> tuple[float, bytes] | None:
        """(expiry, value) of a key's file (no value with `header_only`: 12 bytes read), None when absent or not
        one of ours."""
        try:
            with open(path, "rb") as f:
                data = f.read(HEADER.size if header_only else -1)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        if len(data) < HEADER.size or HEADER.unpack_from(data)[0] != MAGIC:
            return None
        return HEADER.unpack_from(data)[1], data[HEADER.size :]

    def _expiry(self, path: str) -> float | None:
        found = self._read(path, header_only=True)
        return found[0] if found is not None else None

    def _live(self, expires: float) -> bool:
        return expires == 0 or expires > self.clock.time()

    def _expires(self, ttl: float | None) -> float:
        return self.clock.time() + ttl if ttl else 0.0

    def _write(self, path: str, value: bytes, ttl: int | None, exclusive: bool = False) -> bool:
        """Write a whole file; with `exclusive`, only if PATH does not exist (False if it does)."""
        self._make_parents(path)
        temp = os.path.join(os.path.dirname(path), temp_files.name(TEMP))
        try:
            with open(temp, "wb") as f:
                f.write(HEADER.pack(MAGIC, self._expires(ttl)))
                f.write(value)
                f.flush()
                os.fsync(f.fileno())
            if not exclusive:
                os.replace(temp, path)
                return True
            try:
                os.link(temp, path)  # atomic create-if-absent of a whole file, on NFS too
                return True
            except FileExistsError:
                return False
            except OSError:  # no hard links here (some FUSE and SMB mounts): create-if-absent, then fill it
                try:
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    return False
                with os.fdopen(fd, "wb") as f:
                    f.write(HEADER.pack(MAGIC, self._expires(ttl)))
                    f.write(value)
                return True
        finally:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass

    # -- the protocol -------------------------------------------------------------------------------------------
    def ping(self) -> None:
        self._check_root()
        if not os.access(self.root, os.R_OK | os.X_OK):
            raise HubError(f"hub {self.url}: the folder {self.root} cannot be read")

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        self._check_root()
        out: list[bytes | None] = []
        for key in keys:
            try:
                entry = self._read(self._path(key))
            except OSError as exc:
                raise self._error(exc, "reading") from None
            out.append(entry[1] if entry is not None and self._live(entry[0]) else None)
        return out

    def put(self, items: Mapping[str, bytes], ttl: int | None = None) -> None:
        self._check_root()
        for key, value in items.items():
            try:
                self._write(self._path(key), value, ttl)
            except OSError as exc:
                raise self._error(exc, "writing") from None

    def touch(self, keys: Sequence[str], ttl: int | None) -> None:
        self._check_root()
        header = HEADER.pack(MAGIC, self._expires(ttl))
        for key in keys:
            try:
                with open(self._path(key), "r+b") as f:
                    f.write(header)  # 12 bytes in place: a reader sees the old expiry or the new one
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._error(exc, "writing") from None

    def delete(self, keys: Sequence[str]) -> None:
        self._check_root()
        for key in keys:
            try:
                os.unlink(self._path(key))
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._error(exc, "deleting") from None

    def missing(self, keys: Sequence[str]) -> list[str]:
        self._check_root()
        out = []
        for key in keys:
            try:
                expires = self._expiry(self._path(key))  # the header only, not the value
            except OSError as exc:
                raise self._error(exc, "reading") from None
            if expires is None or not self._live(expires):
                out.append(key)
        return out

    def list(self, prefix: str) -> list[str]:
        self._check_root()
        *parents, partial = braced(prefix).split(":")
        folder = self._braced_path(":".join(parents)) if parents else self.root
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise self._error(exc, "listing") from None
        keys = []
        base = ":".join(parents) + ":" if parents else ""
        for entry in entries:
            if entry.name.startswith(TEMP):
                continue
            part = unquote(entry.name)
            if not part.startswith(partial):
                continue
            for key, path in self._walk(base + part, entry.path, entry.is_dir()):
                expires = self._expiry(path)
                if expires is not None and self._live(expires):
                    keys.append(unbraced(key))
        return keys

    def _walk(self, key: str, path: str, is_dir: bool) -> Iterator[tuple[str, str]]:
        if not is_dir:
            yield key, path
            return
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            return
        for entry in entries:
            if not entry.name.startswith(TEMP):
                yield from self._walk(f"{key}:{unquote(entry.name)}", entry.path, entry.is_dir())

    def sweep(self, older_than: float = STALE_TEMP_SECONDS) -> int:
        """Remove temporary files a crashed writer left, and expired keys; returns how many files went."""
        self._check_root()
        removed = 0
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    if name.startswith(TEMP):
                        if temp_files.is_leftover(path, older_than):
                            os.unlink(path)
                            removed += 1
                        continue
                    expires = self._expiry(path)
                    if expires is not None and not self._live(expires):
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise self._error(exc, "sweeping") from None
        return removed

    # -- the lease ----------------------------------------------------------------------------------------------
    def acquire(self, key: str, token: bytes, ttl: int) -> bytes | None:
        self._check_root()
        path = self._path(key)
        try:
            for _ in range(5):
                if self._write(path, token, ttl, exclusive=True):
                    return None
                found = self._read(path)
                if found is None:  # released in between
                    continue
                expires, holder = found
                if self._live(expires):
                    return holder
                broken = self._take(path, holder)  # expired: break it, then try again
                if broken is not None and broken != holder:
                    return broken
            return b""
        except OSError as exc:
            raise self._error(exc, "taking the lease") from None

    def _take(self, path: str, token: bytes) -> bytes | None:
        """Move the lease file out of the way if it holds TOKEN (the rename is the atomic step: one process wins).
        If what was moved is someone else's, it goes back; returns that holder's token, else None."""
        grave = os.path.join(os.path.dirname(path), f"{TEMP}lease-{uuid.uuid4().hex}")
        try:
            os.rename(path, grave)
        except FileNotFoundError:
            return None
        found = self._read(grave)
        if found is None or found[1] == token:
            os.unlink(grave)
            return None
        try:
            os.link(grave, path)  # not the lease we meant: put it back unless a new one is there already
        except OSError:  # a new one is there, or no hard links: the lease is advisory, its holder's renew says so
            pass
        os.unlink(grave)
        return found[1]

    def renew(self, key: str, token: bytes, ttl: int) -> bool:
        path = self._path(key)
        try:
            found = self._read(path)
            if found is None or found[1] != token or not self._live(found[0]):
                return False
            with open(path, "r+b") as f:
                f.write(HEADER.pack(MAGIC, self._expires(ttl)))
            return True
        except OSError as exc:
            raise self._error(exc, "renewing the lease") from None

    def release(self, key: str, token: bytes) -> None:
        path = self._path(key)
        try:
            found = self._read(path)
            if found is not None and found[1] == token:
                self._take(path, token)
        except OSError as exc:
            raise self._error(exc, "releasing the lease") from None

    def reconnect(self) -> None:
        pass  # no connection: each call opens its files

    def close(self) -> None:
        pass
