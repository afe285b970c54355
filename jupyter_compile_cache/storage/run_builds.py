"""Kernels that torch's run-time tuning built after a restore, kept on this machine for the next restore of NAME.

Under `max-autotune`, processes a cell starts (torchrun's ranks) tune some Triton kernels again at their first call,
whatever they restored, and each tuning builds new variants. torch's own warm cache dir keeps those builds, so its
next run finds them; a restore into an empty dir would build them again each time. A new version for each run's
builds would churn the store and the hub, so they are kept beside the bundles, on this machine only, never pushed:

    <store>/run_builds/<NAME>/<member folder>/...   one Triton cache folder (`inductor/triton/1/<HASH>/`) each

Each folder is complete or absent: it is copied to a temporary name, then renamed. A Triton cache folder is keyed by
the hash of what it compiled, so installing one can only answer a lookup with what torch itself built for it. NAME's
folders are capped at `MAX_BYTES`, oldest first out, and go with `rm NAME`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable, Mapping

from . import temp_files

MAX_BYTES = 512 * 1024 * 1024  # per NAME


def kernel_folder(member: str) -> str | None:
    """The Triton cache folder a member lies in ('inductor/triton/<device>/<HASH>' or 'triton/<HASH>'), else None."""
    parts = member.split("/")
    if parts[:2] == ["inductor", "triton"] and len(parts) >= 5:
        return "/".join(parts[:4])
    if parts[0] == "triton" and len(parts) >= 3:
        return "/".join(parts[:2])
    return None


class RunBuilds:
    def __init__(self, store_root: str, max_bytes: int = MAX_BYTES) -> None:
        self.root = os.path.join(store_root, "run_builds")
        self.max_bytes = max_bytes

    def _name_dir(self, name: str) -> str:
        return os.path.join(self.root, name)

    def keep(self, name: str, files: Mapping[str, str]) -> int:
        """Keeps the Triton folders of `files` ({member: path}) that NAME lacks; returns how many it kept."""
        folders: dict[str, list[str]] = {}
        for member in files:
            folder = kernel_folder(member)
            if folder is not None:
                folders.setdefault(folder, []).append(member)
        kept = 0
        for folder, members in sorted(folders.items()):
            target = os.path.join(self._name_dir(name), *folder.split("/"))
            if os.path.isdir(target):
                continue
            source = os.path.dirname(files[members[0]])
            kept += _copy_folder(source, target)
        if kept:
            self._cap(name)
        return kept

    def install(self, name: str, roots: Mapping[str, str]) -> list[str]:
        """Copies NAME's kept folders that the cache dirs lack into them; returns the paths written."""
        written: list[str] = []
        for folder in self._folders(name):
            root, _, rel = folder.partition("/")
            if root not in roots:
                continue
            target = os.path.join(roots[root], *rel.split("/"))
            if os.path.isdir(target):  # torch's or Triton's own, or installed before: theirs stands
                continue
            if _copy_folder(os.path.join(self._name_dir(name), *folder.split("/")), target):
                written += [os.path.join(target, f) for f in os.listdir(target)]
        return written

    def size(self, name: str) -> int:
        return sum(_folder_bytes(os.path.join(self._name_dir(name), *f.split("/"))) for f in self._folders(name))

    def remove(self, name: str, dry_run: bool = False) -> int:
        """Removes NAME's kept builds; returns their bytes (with `dry_run`, what would go)."""
        size = self.size(name)
        if not dry_run:
            shutil.rmtree(self._name_dir(name), ignore_errors=True)
        return size

    def _folders(self, name: str) -> list[str]:
        """NAME's kept folders, as member folders."""
        base = self._name_dir(name)
        out = []
        for top, depth in (("inductor/triton", 2), ("triton", 1)):
            start = os.path.join(base, *top.split("/"))
            out += [f"{top}/{rel}" for rel in _dirs_at_depth(start, depth)]
        return out

    def _cap(self, name: str) -> None:
        """Oldest folders out until NAME's are within `max_bytes`."""
        entries = []
        for folder in self._folders(name):
            path = os.path.join(self._name_dir(name), *folder.split("/"))
            with contextlib.suppress(OSError):
                entries.append((os.stat(path).st_mtime, _folder_bytes(path), path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            shutil.rmtree(path, ignore_errors=True)
            total -= size


def _dirs_at_depth(start: str, depth: int) -> Iterable[str]:
    try:
        names = sorted(n for n in os.listdir(start) if not n.startswith(".") and "tmp-" not in n)
    except OSError:
        return []
    out = []
    for n in names:
        path = os.path.join(start, n)
        if not os.path.isdir(path) or os.path.islink(path):
            continue
        out += [n] if depth == 1 else [f"{n}/{rel}" for rel in _dirs_at_depth(path, depth - 1)]
    return out


def _copy_folder(source: str, target: str) -> bool:
    """A copy of the plain files of `source` at `target`, whole or not at all; False if it could not be made or
    another process made it first."""
    parent = os.path.dirname(target)
    staging = os.path.join(parent, temp_files.name("."))
    try:
        os.makedirs(staging)
        for entry in os.scandir(source):
            if entry.is_file(follow_symlinks=False):
                shutil.copy2(entry.path, os.path.join(staging, entry.name))
        os.rename(staging, target)  # a folder made meanwhile makes this fail: theirs stands
        return True
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False


def _folder_bytes(path: str) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    return total
