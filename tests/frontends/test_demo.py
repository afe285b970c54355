"""demo.py (`make demo`): the quick start, a kernel restart and the time saved, as a newcomer runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_the_demo_restores_after_the_restart_and_shows_both_runs(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_COMPILE_CACHE")}
    outside, folder = tmp_path / "outside", tmp_path / "demo"
    outside.mkdir()
    env["TMPDIR"] = str(outside)  # where torch would put its precompiled headers, were the demo not to say
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_compile_cache", "demo", "--dir", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.count("same result as eager: True") == 2, out
    first, restarted = out.split("[2/2]")
    assert "saved" in first and "0 cache hits" in first, first
    assert "restored 'demo-mlp' from the local store" in restarted and " 0 misses" in restarted, restarted
    assert re.search(r"^\| whole cell \| [0-9.]+ s \| [0-9.]+ s \([0-9.]+x\) \|$", out, re.M), out  # side by side
    code = [float(v) for v in re.findall(r"ran in ([0-9.]+) s", out)]
    saved = re.search(r"^the restore saved ([0-9.]+) s of compiling \(the cell's code\)", out, re.M)
    assert saved and float(saved.group(1)) == pytest.approx(code[0] - code[1], abs=0.06), out  # not the import
    assert "WARNING" not in proc.stderr and "without encryption" not in out + proc.stderr, proc.stderr
    # it kept to its folder: a store, two torch cache dirs and the kernels' TMPDIR there, nothing in the user's
    # store, not a byte outside (torch's precompiled headers, ~150 MB, in the folder's tmp/)
    assert sorted(os.listdir(folder)) == ["store", "tmp", "torch-cache-1", "torch-cache-2"]
    assert list(outside.rglob("*")) == []
    # the bundle holds compile results only: no precompiled header (a few hundred KB, not ~150 MB)
    stored = sum(p.stat().st_size for p in (folder / "store").rglob("*") if p.is_file())
    assert stored < 1 << 20, stored


def test_a_dir_inside_a_folder_that_is_not_there_is_refused_and_nothing_is_made(tmp_path, capsys):
    from jupyter_compile_cache.frontends import cli

    wanted = tmp_path / "nonexistent" / "x"
    assert cli.main(["demo", "--dir", str(wanted)]) == cli.ERROR
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nonexistent'} is not a folder: --dir names" in err and "Traceback" not in err
    assert not (tmp_path / "nonexistent").exists()
