"""Nothing left behind: a writer killed mid-save or mid-pull leaves its temporary file, which the next process to open
the store removes at once (its writer is gone); a live writer's file is never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from jupyter_compile_cache.storage import temp_files
from jupyter_compile_cache.storage.backends.folder import TEMP, FolderBackend
from jupyter_compile_cache.storage.store import LocalStore

# A save of 40 MB that stops for good after its first MB: the test kills it there (SIGKILL, as the OOM killer or a
# kernel restart does).
SAVING = textwrap.dedent(
    """
    import os, sys, time
    from jupyter_compile_cache.storage.bundle import Manifest
    from jupyter_compile_cache.storage.store import LocalStore
    root, src = sys.argv[1], sys.argv[2]
    with open(src, "wb") as f:
        f.write(os.urandom(40 << 20))

    def stall(done, total):
        if done >= 1 << 20:
            print("SAVING", flush=True)
            time.sleep(3600)

    LocalStore(root).write(Manifest.new("net", {}, "f" * 12, "w"), {"inductor/ab/k.so": src}, progress=stall)
    """
)


def _start_save(tmp_path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", SAVING, str(tmp_path / "store"), str(tmp_path / "src.bin")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "SAVING"
    return proc


def _temps(root) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files if f.startswith(".tmp-")]


def test_a_save_killed_midway_leaves_nothing_after_the_next_store_open(tmp_path):
    proc = _start_save(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [left] = _temps(tmp_path / "store")
    assert os.path.getsize(left) >= 1 << 20  # what a killed kernel used to leave for an hour

    LocalStore(str(tmp_path / "store"))  # the next kernel opens the store

    assert _temps(tmp_path / "store") == []
    assert LocalStore(str(tmp_path / "store")).versions("net") == []


def test_a_live_writers_file_is_never_touched(tmp_path):
    proc = _start_save(tmp_path)
    try:
        [live] = _temps(tmp_path / "store")
        assert LocalStore(str(tmp_path / "store")).remove_leftovers() == []
        assert os.path.exists(live)
    finally:
        proc.kill()
        proc.wait()
    assert LocalStore(str(tmp_path / "store")).remove_leftovers() == [live]


def test_a_killed_child_not_yet_reaped_counts_as_gone(tmp_path):
    """A kernel killed by its own parent (the fork server, a restart) is a zombie until reaped: it writes no more."""
    proc = _start_save(tmp_path)
    proc.send_signal(signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline and not temp_files._is_zombie(proc.pid):
        time.sleep(0.05)
    try:
        assert temp_files._is_zombie(proc.pid) and len(_temps(tmp_path / "store")) == 1
        LocalStore(str(tmp_path / "store"))  # the next open
        assert _temps(tmp_path / "store") == []
    finally:
        proc.wait()


def test_other_machines_and_unnamed_temp_files_go_only_when_an_hour_old(tmp_path):
    folder = tmp_path / "store" / "bundles" / "net"
    folder.mkdir(parents=True)
    other_host = folder / f".tmp-elsewhere-{os.getpid() + 1}-x.pack"  # a shared store: another machine's writer
    unnamed = folder / ".tmp-abc123.pack"  # written by a version before writers were named
    for path in (other_host, unnamed):
        path.write_bytes(b"x")
    store = LocalStore(str(tmp_path / "store"))
    assert store.remove_leftovers() == []
    hour_ago = time.time() - 3700
    for path in (other_host, unnamed):
        os.utime(path, (hour_ago, hour_ago))
    assert sorted(store.remove_leftovers()) == sorted([str(other_host), str(unnamed)])


def test_the_folder_hub_sweeps_a_dead_writers_temp_file_at_once_and_keeps_a_live_ones(tmp_path):
    hub = tmp_path / "hub"
    (hub / "jcc").mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    gone = hub / "jcc" / temp_files.name(TEMP).replace(f"-{os.getpid()}-", f"-{dead_pid}-")
    live = hub / "jcc" / temp_files.name(TEMP)  # this process: a push in progress
    for path in (gone, live):
        path.write_bytes(b"half a chunk")
    assert FolderBackend(f"file://{hub}").sweep() == 1
    assert not gone.exists() and live.exists()
