"""runtime_dir.py: templates listen only in a folder that is this user's own and closed to others; a zombie (a
killed template nobody reaped) does not count as alive."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from jupyter_compile_cache.kernels.runtime_dir import process_alive, runtime_dir


def test_the_folder_is_made_private_and_one_open_to_others_is_refused(tmp_path):
    path = tmp_path / "runtime"
    assert runtime_dir({"JUPYTER_COMPILE_CACHE_RUNTIME_DIR": str(path)}) == str(path)
    assert path.stat().st_mode & 0o777 == 0o700
    path.chmod(0o755)
    assert runtime_dir({"JUPYTER_COMPILE_CACHE_RUNTIME_DIR": str(path)}) is None  # no templates: kernels start plain
    assert runtime_dir({"XDG_RUNTIME_DIR": str(tmp_path)}) == str(tmp_path / "jupyter_compile_cache")


def test_a_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert process_alive(os.getpid())
    deadline = time.time() + 30
    while process_alive(child.pid) and time.time() < deadline:  # exited, not yet reaped by us: a zombie
        time.sleep(0.05)
    assert not process_alive(child.pid)
    child.wait()
