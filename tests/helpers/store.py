"""Real bundles for storage tests: random files written through `LocalStore.write`, as a cell's save does."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable

from jupyter_compile_cache.core.bundle_search import Install, install_newest
from jupyter_compile_cache.storage.bundle import FieldMismatch, Manifest
from jupyter_compile_cache.storage.sources import Found, Source, Walk
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.torch_adapter import fingerprint


def new_manifest(name: str, fp: str = "f" * 12, writer: str = "test@host", now: dict | None = None) -> Manifest:
    """A manifest before its payload is written (the store fills in members and hashes); `now`: made for the
    machine with that fingerprint (its digest is then the fingerprint id)."""
    if now is not None:
        fp = fingerprint.digest(now)
    return Manifest.new(name, now or {"torch": "test"}, fp, writer)


def make_bundle(
    store: LocalStore, name: str, size: int = 10_000, fp: str = "f" * 12, files: int = 2, now: dict | None = None
) -> Manifest:
    """A version of NAME holding `files` random files and a `check` member: the sha256 of the others, so a restore
    can tell that what it got is exactly one saved version, whole."""
    with tempfile.TemporaryDirectory() as src:
        members: dict[str, str] = {}
        digest = hashlib.sha256()
        for i in range(files):
            path = os.path.join(src, f"k{i}.so")
            data = os.urandom(max(1, size // files))
            digest.update(data)
            with open(path, "wb") as f:
                f.write(data)
            members[f"inductor/ab/k{i}.so"] = path
        check = os.path.join(src, "check")
        with open(check, "w") as f:
            f.write(digest.hexdigest())
        members["inductor/ab/check"] = check
        return store.write(new_manifest(name, fp, now=now), members)


def restored_whole(paths: list[str]) -> bool:
    """True when restored files are one saved version, whole: the check member matches the others."""
    by_name = {os.path.basename(p): p for p in paths}
    digest = hashlib.sha256()
    for name in sorted(n for n in by_name if n != "check"):
        with open(by_name[name], "rb") as f:
            digest.update(f.read())
    with open(by_name["check"]) as f:
        return f.read() == digest.hexdigest()


def newest(
    name: str,
    sources: list[Source],
    store: LocalStore,
    misfit: Callable[[Manifest], tuple[FieldMismatch, ...]],
    install: Install | None = None,
) -> Found:
    """The search's walk and install loop (core/bundle_search.py) with a made-up machine's `misfit`: the newest
    version of NAME that fits, fetched into `store` and, with `install`, installed."""
    walk = Walk(name, sources, store, misfit)
    return install_newest(walk, install) if install is not None else walk.first()
