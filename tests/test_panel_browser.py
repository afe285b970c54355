"""The panel in a real browser: JupyterLab on a loopback port, Debian's chromium driven by Playwright.

Asserts the layer rows render and that clicking a layer's toggle changes torch's config in the kernel. Set
PANEL_SCREENSHOT=docs/panel.png to keep the screenshot the README shows.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
from redis_server import free_port

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CELLS = [
    "%load_ext jupyter_compile_cache",
    "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())",
    "%%compile_cache browser-demo\nwith torch.no_grad():\n    torch.compile(model)(torch.randn(4, 16))",
    # the same cell again: restored this time, so the panel's chart has cold vs restored bars
    "%%compile_cache browser-demo\nwith torch.no_grad():\n    torch.compile(model)(torch.randn(4, 16))",
    "%compile_cache panel",
    "import torch._inductor.config as inductor_config\nprint('FXCACHE', inductor_config.fx_graph_cache)",
]


def _notebook(path):
    cells = [
        {"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None} for src in CELLS
    ]
    nb = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb))


@pytest.fixture
def jupyterlab(tmp_path):
    root = tmp_path / "lab"
    root.mkdir()
    _notebook(root / "panel.ipynb")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_COMPILE_CACHE_DIR=str(tmp_path / "store"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError("JupyterLab did not start")
    yield base, token
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_panel_renders_and_its_toggle_changes_torch_config(jupyterlab, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    base, token = jupyterlab
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(f"{base}/lab/tree/panel.ipynb?token={token}")
            page.locator(".jp-Notebook").wait_for(timeout=60_000)
            # JupyterLab may ask which kernel to start: take the notebook's own (python3)
            select = page.locator(".jp-Dialog").get_by_role("button", name="Select", exact=True)
            try:
                select.wait_for(timeout=10_000)
                select.click()
            except Exception:
                pass  # no dialog: the kernel started by itself
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
            panel = page.locator(".widget-vbox", has_text="Cache layers").first
            started = page.locator(".jp-InputArea-prompt", has_text=re.compile(r"\[(\*|\d+)\]")).first
            for attempt in range(3):  # a click that lands while JupyterLab still lays out its menus is lost
                page.get_by_role("menuitem", name="Run", exact=True).click()
                page.get_by_text("Run All Cells", exact=True).click()
                try:
                    started.wait_for(timeout=15_000)
                    break
                except Exception:
                    if attempt == 2:
                        raise
            panel.wait_for(timeout=int(os.environ.get("PANEL_TIMEOUT_MS", "240000")))
            for title in (
                "Dynamo precompile",
                "AOTAutograd",
                "FX graph",
                "Inductor/Triton kernels",
                "Autotune",
                "PGO (automatic dynamic)",
            ):
                expect(panel.get_by_text(title, exact=True)).to_be_visible()
            expect(panel.get_by_text("browser-demo", exact=False).first).to_be_visible()
            expect(page.get_by_text("FXCACHE True")).to_be_visible(timeout=60_000)

            row = panel.locator(".widget-hbox", has_text="FX graph").last
            row.locator("input[type=checkbox]").click()
            expect(panel.get_by_text("fx_graph_cache = False")).to_be_visible(timeout=30_000)

            # the kernel's torch config really changed: run the last cell again
            page.locator(".jp-Cell").last.click()
            page.keyboard.press("Shift+Enter")
            expect(page.get_by_text("FXCACHE False")).to_be_visible(timeout=30_000)

            shot = os.environ.get("PANEL_SCREENSHOT") or str(tmp_path / "panel.png")
            panel.scroll_into_view_if_needed()
            panel.screenshot(path=shot)
            assert os.path.getsize(shot) > 10_000
        except Exception:
            failure = os.environ.get("PANEL_FAILURE_SCREENSHOT") or str(tmp_path / "failure.png")
            page.screenshot(path=failure, full_page=True)
            print(f"failure screenshot: {failure}")
            raise
        finally:
            browser.close()
