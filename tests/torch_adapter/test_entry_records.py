"""entry_records.py: the record beside each saved precompile entry, on disk, and the entries of other versions
installed beside torch's own."""

from __future__ import annotations

import os

from jupyter_compile_cache.torch_adapter import entry_records
from jupyter_compile_cache.torch_adapter.entry_records import (
    ALTERNATES_DIR,
    RECORD_VERSION,
    adopt_entry,
    alternate_member,
    entry_with,
    read_record,
    write_record,
)


def _entry(entry_dir, digest: str, payload: bytes = b"entry") -> None:
    os.makedirs(entry_dir, exist_ok=True)
    with open(os.path.join(entry_dir, "entry"), "wb") as f:
        f.write(payload)
    write_record(str(entry_dir), {"version": RECORD_VERSION, "digest": digest, "guarded": {}})


def test_a_record_reads_back_as_written_and_a_record_of_another_format_is_none(tmp_path):
    record = {"version": RECORD_VERSION, "digest": "d1", "guarded": {"L['w']": "x"}, "function": "f"}
    path = write_record(str(tmp_path), record)
    assert path == str(tmp_path / entry_records.DIGEST_FILE)
    assert read_record(str(tmp_path)) == record
    mtime = os.stat(path).st_mtime_ns
    write_record(str(tmp_path), dict(record))  # the same record: the file is left as it is
    assert os.stat(path).st_mtime_ns == mtime
    (tmp_path / entry_records.DIGEST_FILE).write_text('{"version": 1, "digest": "d1"}')
    assert read_record(str(tmp_path)) is None  # records without per-entry dropped guards restore nothing
    (tmp_path / entry_records.DIGEST_FILE).write_text("not json")
    assert read_record(str(tmp_path)) is None
    assert read_record(str(tmp_path / "none_here")) is None


def test_an_entry_for_some_code_is_torchs_own_first_then_the_newest_other_version(tmp_path):
    prefix = tmp_path / "dynamo"
    _entry(prefix / ALTERNATES_DIR / "0001" / "k1", "code", b"older version")
    _entry(prefix / ALTERNATES_DIR / "0002" / "k1", "code", b"newer version")
    assert entry_with(str(prefix), "code") == str(prefix / ALTERNATES_DIR / "0002" / "k1")
    _entry(prefix / "k2", "code", b"torch's own")
    assert entry_with(str(prefix), "code") == str(prefix / "k2")
    assert entry_with(str(prefix), "other code") is None
    os.unlink(prefix / "k2" / "entry")  # a record without its entry is not taken
    assert entry_with(str(prefix), "code") == str(prefix / ALTERNATES_DIR / "0002" / "k1")


def test_another_versions_entries_go_beside_torchs_and_its_other_files_where_they_always_go():
    assert alternate_member("inductor/dynamo/key/entry", "v2") == f"inductor/dynamo/{ALTERNATES_DIR}/v2/key/entry"
    assert alternate_member("inductor/fxgraph/ab/abc/entry", "v2") == "inductor/fxgraph/ab/abc/entry"
    already = f"inductor/dynamo/{ALTERNATES_DIR}/v1/key/entry"
    assert alternate_member(already, "v2") == already


def test_adopting_an_entry_replaces_each_file_whole_and_drops_what_the_source_lacks(tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    _entry(source, "new", b"new entry")
    _entry(target, "old", b"old entry")
    sizes = target / entry_records.ENTRY_FILES[2]
    sizes.write_text("old sizes")  # the source has no sizes file: the target must not keep the old one
    adopt_entry(str(source), str(target))
    assert (target / "entry").read_bytes() == b"new entry"
    assert read_record(str(target))["digest"] == "new"
    assert not sizes.exists()
    assert sorted(os.listdir(target)) == sorted(os.listdir(source))
