"""docs/figures.py: every figure of README.md and docs/results.md is what its result file says, and names the run
that produced it."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "docs"))

import figures  # noqa: E402


def test_every_figure_matches_its_result_file():
    out = subprocess.run(
        [sys.executable, os.path.join(REPO, "docs", "figures.py"), "--check"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr + out.stdout


def test_every_figure_names_its_command_machine_and_files():
    for page in figures.PAGES:
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            text = f.read()
        regions = list(figures.REGION.finditer(text))
        assert regions, page
        for region in regions:
            for name in region["files"].split():
                assert os.path.exists(os.path.join(REPO, name)), (page, name)
                assert f"`{name}`" in region["body"], (page, name)  # the figure says which file it came from
            assert "<sub>Produced by `" in region["body"] and " on " in region["body"], (page, region["kind"])


def test_a_figure_edited_by_hand_is_caught(tmp_path):
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    region = next(figures.REGION.finditer(text))
    edited = text.replace(region["body"], region["body"].replace("compile_cache:", "compile_cache: (edited)", 1))
    assert edited != text and figures.render_page(edited) == text
