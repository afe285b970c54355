"""`make setup` (.ci/setup) where pip's configuration holds a constraints file that no supported torch satisfies, as
CI images and company mirrors have: it fails saying what to try (TORCH_VERSION, PIP_CONFIG_FILE) and leaves no
half-built venv. A real run of the script with a real pip config (about 10 s: a venv, pip asking PyPI)."""

from __future__ import annotations

import os
import subprocess

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_a_constraints_file_that_pins_torch_out_of_range_is_told_and_cleaned_up(tmp_path):
    (tmp_path / "constraints.txt").write_text("torch==2.8.0\n")
    (tmp_path / "pip.conf").write_text(f"[install]\nconstraint = {tmp_path / 'constraints.txt'}\n")
    venv = tmp_path / "venv"
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"),
        "VENV": str(venv),
        "TORCH_INDEX_URL": "http://127.0.0.1:1/none",  # PyPI only, at once
    }
    out = subprocess.run(
        ["bash", os.path.join(ROOT, ".ci", "setup")], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0, out.stdout
    assert "pip could not install torch>=2.9,<2.16" in out.stderr, out.stderr
    assert "TORCH_VERSION=" in out.stderr and "PIP_CONFIG_FILE=/dev/null" in out.stderr, out.stderr
    assert f"removed the unfinished {venv}" in out.stderr and not venv.exists()


def test_make_help_lists_every_target_with_what_it_does():
    import re
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "Makefile")) as f:
        targets = re.findall(r"^([a-z][a-z-]*):", f.read(), flags=re.M)
    shown = subprocess.run(["make", "-s", "help"], cwd=root, capture_output=True, text=True, timeout=60).stdout
    listed = {line.split()[0]: line.split(None, 1)[1] for line in shown.splitlines() if line.strip()}
    assert sorted(listed) == sorted(targets) and all(listed.values()), shown
