"""What only the folder backend (file://) has: keys as files, whole-file writes by rename, a real file-size limit
in the middle of a push, a share that is not mounted, temporary files a crash left. (The whole hub suite runs on a
folder too: tests/storage/test_hub.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers.hubs import hub_at, local_bundle

from jupyter_compile_cache.storage.backends.folder import STALE_TEMP_SECONDS, FolderBackend
from jupyter_compile_cache.storage.hub import HubError


def test_keys_are_files_under_quoted_folders_and_list_back_exactly(tmp_path):
    backend = FolderBackend(f"file://{tmp_path}")
    keys = ["jcc:team/ml/net:manifest:fp:v1", "jcc:team/ml:name:net", "jcc:team/ml/net:chunk:fp:v1:0"]
    backend.put({key: key.encode() for key in keys})
    # the group in braces: the folders earlier versions wrote, so their hubs still read
    assert (tmp_path / "jcc" / "{team%2Fml%2Fnet}" / "manifest" / "fp" / "v1").is_file()
    assert sorted(backend.list("jcc:")) == sorted(keys)
    assert backend.list("jcc:team/ml:name:") == ["jcc:team/ml:name:net"]
    assert backend.list("jcc:team/ml/net:manifest:") == ["jcc:team/ml/net:manifest:fp:v1"]
    assert sorted(backend.list("jcc:team/m")) == sorted(keys)
    assert backend.get(keys) == [key.encode() for key in keys]


def test_a_crashed_writer_leaves_only_a_temporary_file_that_nobody_lists_and_sweep_removes(tmp_path):
    backend = FolderBackend(f"file://{tmp_path}")
    backend.put({"jcc:ns/net:manifest:fp:v": b"whole"})
    folder = tmp_path / "jcc" / "{ns%2Fnet}" / "manifest" / "fp"
    stale = folder / "#tmp-crashed"
    stale.write_bytes(b"half a val")
    old = time.time() - STALE_TEMP_SECONDS - 10
    os.utime(stale, (old, old))
    fresh = folder / "#tmp-writing-now"
    fresh.write_bytes(b"in progr")
    assert backend.list("jcc:") == ["jcc:ns/net:manifest:fp:v"]
    assert backend.sweep() == 1
    assert not stale.exists() and fresh.exists()  # a writer that is still at work keeps its file


def test_a_full_disk_under_a_folder_hub_fails_the_push_and_leaves_no_file(tmp_path):
    """A real file-size limit (RLIMIT_FSIZE, in a child process) stops a push to a folder hub half way: the push is a
    HubError that says so, and the folder holds no version and no temporary file."""
    store, manifest = local_bundle(tmp_path, size=3 << 20)
    folder = tmp_path / "share"
    folder.mkdir()
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG\n"
        "from jupyter_compile_cache.storage.hub import Hub, HubConfig, HubError\n"
        "from jupyter_compile_cache.storage.store import LocalStore\n"
        "store = LocalStore(sys.argv[2]); [m] = store.versions('net')\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (512 << 10, 512 << 10))\n"
        "try:\n"
        "    Hub(HubConfig(url=sys.argv[1], chunk_size=1 << 20)).push(m, store.payload_path(m))\n"
        "except HubError as exc:\n"
        "    print('HUBERROR', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, f"file://{folder}", store.root], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "HUBERROR" in done.stdout and "file size limit" in done.stdout, done.stdout
    hub = hub_at(f"file://{folder}")
    assert hub.versions("net") == [] and hub.names() == []
    assert not [name for _, _, files in os.walk(folder) for name in files if name.startswith("#")]


def test_a_folder_hub_whose_share_is_not_mounted_is_an_error_not_a_new_empty_hub(tmp_path):
    missing = tmp_path / "not-mounted"
    hub = hub_at(f"file://{missing}")
    with pytest.raises(HubError, match="is not there"):
        hub.names()
    store, manifest = local_bundle(tmp_path, size=30_000)
    with pytest.raises(HubError, match="is not there"):
        hub.push(manifest, store.payload_path(manifest))
    assert not missing.exists()


def test_a_share_unmounted_mid_write_fails_it_and_no_local_folder_takes_its_place(tmp_path):
    share = tmp_path / "share"
    share.mkdir()
    backend = FolderBackend(f"file://{share}")

    class UnmountedAfterTheFirst(dict):
        """The keys of one `put`, the share unmounted once the first is written (as a push's writes meet it)."""

        def items(self):
            for i, item in enumerate(super().items()):
                if i == 1:
                    share.rename(tmp_path / "share.unmounted")
                yield item

    with pytest.raises(HubError, match="is not there"):
        backend.put(UnmountedAfterTheFirst({"jcc:default/net:chunk:0": b"a", "jcc:default/net:chunk:1": b"b"}))
    assert not share.exists()  # the second key was not written to a new local folder in the share's place
    (tmp_path / "share.unmounted").rename(share)  # mounted again: what was written before is there
    assert backend.get(["jcc:default/net:chunk:0", "jcc:default/net:chunk:1"]) == [b"a", None]


def test_on_a_filesystem_without_hard_links_the_lease_still_has_one_holder(tmp_path, monkeypatch):
    """Some FUSE and SMB mounts refuse hard links (EPERM): the lease falls back to an exclusive create."""
    import errno

    def no_links(*_args, **_kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)  # the mount's answer, not ours
    hub = hub_at(f"file://{tmp_path}")
    alice = hub.lease("net", "f", "alice@a")
    assert alice.acquire() is None
    assert hub.lease("net", "f", "bob@b").acquire()["holder"] == "alice@a"
    alice.release()
    assert hub.lease("net", "f", "carol@c").acquire() is None
