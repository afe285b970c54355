"""The record we keep beside each of torch's saved precompile entries, on disk: the digest of the entry's code, the
identity guards precompile dropped from it, the function's name and its parts' digests (what a later edit changed).
Also where another version's entries are installed (beside torch's own), and how one of them is taken for a
function whose code it matches.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
from collections.abc import Iterable
from typing import Any

from . import frame_sizes

DIGEST_FILE = "jcc_code_digest"
# Entries of other versions of a bundle, installed beside torch's own (a `.jcc-` folder: never captured as a
# cell's files): a function whose code matches one of them takes that entry instead of compiling.
ALTERNATES_DIR = ".jcc-versions"
ENTRY_FILES = ("entry", DIGEST_FILE, frame_sizes.STATE_FILE)
RECORD_VERSION = 2  # records without per-entry dropped guards (version 1) restore nothing


def entry_with(prefix: str, digest: str) -> str | None:
    """A saved entry (torch's, then other versions', newest first) whose record has this code digest."""
    own = sorted(glob.glob(os.path.join(glob.escape(prefix), "*", DIGEST_FILE)))
    others = glob.glob(os.path.join(glob.escape(prefix), ALTERNATES_DIR, "*", "*", DIGEST_FILE))
    others.sort(key=lambda path: os.path.basename(os.path.dirname(os.path.dirname(path))), reverse=True)
    for path in own + others:
        entry_dir = os.path.dirname(path)
        record = read_record(entry_dir)
        if record is not None and record.get("digest") == digest and os.path.exists(os.path.join(entry_dir, "entry")):
            return entry_dir
    return None


def sibling(prefix: str, key: str, digest: str) -> str:
    """Where the entry of one code of KEY is kept when several codes share torch's key for it (regional compilation:
    each block's `Module._call_impl`); `entry_with` finds it by its code."""
    return os.path.join(prefix, f"{key}-code-{digest[:16]}")


def is_empty_for(entry_dir: str, digest: str) -> bool:
    """Whether ENTRY_DIR's record says that code of this digest traced nothing when it was saved."""
    record = read_record(entry_dir)
    return record is not None and bool(record.get("empty")) and record.get("digest") == digest


def saved_functions(keys: Iterable[str]) -> dict[str, dict[str, str]]:
    """{key: {"function": qualified name, "digest": code digest}} of saved entries' records: kept in a bundle's
    manifest, so that a version holding the entry for some code is found without installing it."""
    from torch._dynamo import package

    out = {}
    for key in keys:
        entry_dir = os.path.join(package.DynamoCache.path_prefix(), key)
        record = read_record(entry_dir)
        if record is not None and not record.get("empty"):
            out[os.path.basename(entry_dir)] = {"function": str(record.get("function", "")), "digest": record["digest"]}
    return dict(sorted(out.items()))


def alternate_member(member: str, version: str) -> str:
    """Where a member of another version of a bundle goes: its precompile entries beside torch's (ALTERNATES_DIR),
    everything else where it always goes (those files are named by their content)."""
    parts = member.split("/")
    if len(parts) >= 4 and parts[0] == "inductor" and parts[1] == "dynamo" and parts[2] != ALTERNATES_DIR:
        return "/".join([*parts[:2], ALTERNATES_DIR, version, *parts[2:]])
    return member


def adopt_entry(source_dir: str, entry_dir: str) -> None:
    """Make `entry_dir` hold `source_dir`'s entry, its record and its sizes: each file replaced whole."""
    os.makedirs(entry_dir, exist_ok=True)
    for name in ENTRY_FILES:
        source, target = os.path.join(source_dir, name), os.path.join(entry_dir, name)
        if not os.path.exists(source):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
            continue
        tmp = f"{target}.tmp{os.getpid()}"
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)


def read_record(entry_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(entry_dir, DIGEST_FILE), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if (
        not isinstance(record, dict)
        or record.get("version") != RECORD_VERSION
        or not isinstance(record.get("digest"), str)
    ):
        return None
    return record


def write_record(entry_dir: str, record: dict[str, Any]) -> str:
    """RECORD beside the entry in ENTRY_DIR, replaced whole (unless it is already there); returns its path."""
    path = os.path.join(entry_dir, DIGEST_FILE)
    if read_record(entry_dir) != record:
        tmp = path + f".tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    return path
