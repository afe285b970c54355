"""The panel in a real browser: JupyterLab on a loopback port, Debian's chromium driven by Playwright.

1. A live kernel: the layer rows render; no table row is taller than one line and no text is cut; the layers'
   sizes add up to the store's; a cell run after the panel shows up in it (its bundle, its counts); clicking a
   layer's toggle changes torch's config in the kernel.
2. The GPU notebook (05, run on a GPU machine, outputs committed) opened without running it: the panel renders
   offline from the notebook's saved widget state, with the GPU header of that run.
Set PANEL_SCREENSHOT=docs/panel.png and PANEL_GPU_SCREENSHOT=docs/panel_gpu.png to keep the README's screenshots.
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
from helpers.redis_server import free_port

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CELLS = [
    "%load_ext jupyter_compile_cache",
    "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())",
    "%%compile_cache browser-demo\nwith torch.no_grad():\n    torch.compile(model)(torch.randn(4, 16))",
    # the same cell again: restored this time, so the panel's chart has cold vs restored bars
    "%%compile_cache browser-demo\nwith torch.no_grad():\n    torch.compile(model)(torch.randn(4, 16))",
    "%compile_cache panel",
    # after the panel: it updates itself from the cell's report
    "%%compile_cache browser-late\nwith torch.no_grad():\n    torch.compile(lambda t: (t * 2).relu())(torch.randn(8))",
    "import torch._inductor.config as inductor_config\nprint('FXCACHE', inductor_config.fx_graph_cache)",
]


# The texts of a panel (an element, in the page) that do not fit their box, and the panel itself if it is wider than
# the output area it sits in.
CLIPPED = """panel => {
    const boxes = '.widget-html-content, .widget-label, .widget-button, button, .widget-gridbox, .widget-hbox, '
        + '.widget-vbox, .jcc-cell, .jcc-facts td';
    const cut = [...panel.querySelectorAll(boxes)]
        .filter(e => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1)
        .map(e => e.textContent.trim().slice(0, 60));
    // a table cell whose text is wider than the cell itself (clipped by the cell, or drawn over the next one)
    for (const cell of panel.querySelectorAll('.widget-gridbox > *')) {
        const text = cell.querySelector('.jcc-cell');
        if (text && text.getBoundingClientRect().right > cell.getBoundingClientRect().right + 1)
            cut.push(text.textContent.trim().slice(0, 60));
    }
    const area = panel.closest('.jp-OutputArea-output') || panel.parentElement;
    if (panel.getBoundingClientRect().right > area.getBoundingClientRect().right + 1) cut.push('the panel itself');
    return cut;
}"""


# The rows of the panel's tables taller than one line of text (a button's height at most): [(text, height)].
TALL_ROWS = """panel => {
    const line = parseFloat(getComputedStyle(panel.querySelector('.jcc-cell')).lineHeight) || 17;
    const limit = Math.max(1.6 * line, 30);
    return [...panel.querySelectorAll('.widget-gridbox > *')]
        .filter(e => e.getBoundingClientRect().height > limit)
        .map(e => [e.textContent.trim().slice(0, 40), e.getBoundingClientRect().height]);
}"""

# Cells of the panel's tables whose text runs over the next cell of their row: [(text, next cell's text)].
OVERLAPS = """panel => {
    const out = [];
    for (const grid of panel.querySelectorAll('.widget-gridbox')) {
        const cells = [...grid.children];
        for (let i = 0; i + 1 < cells.length; i++) {
            const a = cells[i], b = cells[i + 1];
            const ra = a.getBoundingClientRect(), rb = b.getBoundingClientRect();
            if (Math.abs(ra.top - rb.top) > 2) continue;  // b starts the next row
            const text = a.querySelector('.jcc-cell');  // its box may be wider than its grid cell
            const right = Math.max(ra.right, text ? text.getBoundingClientRect().right : 0);
            if (right > rb.left + 1) out.push([a.textContent.trim().slice(0, 40), b.textContent.trim().slice(0, 40)]);
        }
    }
    return out;
}"""

# The layers' bytes in the store, the archive headers', and the total the panel shows.
SIZES = """panel => {
    const read = name => [...panel.querySelectorAll(`[data-${name}]`)].map(e => Number(e.dataset[name]));
    return {layers: read('bytes'), other: read('other'), total: read('total')};
}"""


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


GPU_NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "..", "example_notebooks", "05_gpu_max_autotune.ipynb")
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _lab_settings(config_dir):
    """Render every cell (no windowing: the panel sits at the notebook's end) and ask nothing about news."""
    for extension, settings in (
        ("notebook-extension/tracker", {"windowingMode": "none"}),
        ("apputils-extension/notification", {"fetchNews": "false"}),
    ):
        path = config_dir / "lab" / "user-settings" / "@jupyterlab" / f"{extension}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))


@pytest.fixture
def jupyterlab(tmp_path):
    # PANEL_DEMO_DIR: where the store and caches go when the run is for the README's screenshot
    demo = os.path.expanduser(os.environ.get("PANEL_DEMO_DIR", "")) or str(tmp_path)
    root = tmp_path / "lab"
    root.mkdir()
    _notebook(root / "panel.ipynb")
    shutil.copy(GPU_NOTEBOOK, root / "gpu.ipynb")
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_COMPILE_CACHE_DIR=os.path.join(demo, "store"),
        TORCHINDUCTOR_CACHE_DIR=os.path.join(demo, "torch-cache"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"),
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),
        JUPYTER_COMPILE_CACHE_TEMPLATE="0",  # the panel's kernels are plain ones: no warm template beside them
    )
    _lab_settings(tmp_path / "jupyter-config")
    # Widget views are "unsafe" output: JupyterLab shows them only in a trusted notebook (one we signed)
    subprocess.run([sys.executable, "-m", "nbformat.sign", str(root / "gpu.ipynb")], env=env, check=True)
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


def _open_notebook(page, url: str, kernel_choice: str) -> None:
    """Open a notebook; JupyterLab may ask which kernel to start: answer with kernel_choice's button."""
    page.goto(url)
    page.locator(".jp-Notebook").wait_for(timeout=60_000)
    button = page.locator(".jp-Dialog").get_by_role("button", name=kernel_choice, exact=True)
    try:
        button.wait_for(timeout=10_000)
        button.click()
    except Exception:
        pass  # no dialog: JupyterLab decided by itself


def test_panel_renders_and_its_toggle_changes_torch_config(jupyterlab, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    base, token = jupyterlab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            _open_notebook(page, f"{base}/lab/tree/panel.ipynb?token={token}", kernel_choice="Select")
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
            # the cell run after the panel is in it: updated by the cell's own report
            expect(panel.get_by_text("browser-late", exact=True)).to_be_visible(timeout=30_000)

            # one line per table row, no cell over the next, and the sizes add up to the store's
            assert panel.evaluate(TALL_ROWS) == []
            assert panel.evaluate(OVERLAPS) == []
            sizes = panel.evaluate(SIZES)
            assert len(sizes["layers"]) == 6 and len(sizes["other"]) == len(sizes["total"]) == 1, sizes
            assert sum(sizes["layers"]) + sizes["other"][0] == sizes["total"][0] > 0, sizes

            # The layer table is one grid: every row's title starts at the same x (PGO's row once drifted).
            grid = panel.locator(".widget-gridbox").first
            titles = [
                grid.get_by_text(t, exact=True).bounding_box()["x"] for t in ("FX graph", "PGO (automatic dynamic)")
            ]
            assert abs(titles[0] - titles[1]) < 1, titles
            # nothing is cut: no text runs out of its box, and the panel stays inside the notebook's output area
            cut = panel.evaluate(CLIPPED)
            assert cut == [], cut
            shot = os.environ.get("PANEL_SCREENSHOT") or str(tmp_path / "panel.png")
            panel.scroll_into_view_if_needed()
            panel.screenshot(path=shot)  # as the user first sees it, before the toggle below
            assert os.path.getsize(shot) > 10_000

            fx_title = grid.locator(".widget-html", has_text="FX graph")
            fx_title.locator("xpath=preceding-sibling::*[1]").locator("input[type=checkbox]").click()
            expect(panel.get_by_text("fx_graph_cache = False")).to_be_visible(timeout=30_000)

            # the kernel's torch config really changed: run the last cell again
            page.locator(".jp-Cell").last.click()
            page.keyboard.press("Shift+Enter")
            expect(page.get_by_text("FXCACHE False")).to_be_visible(timeout=30_000)
        except Exception:
            failure = os.environ.get("PANEL_FAILURE_SCREENSHOT") or str(tmp_path / "failure.png")
            page.screenshot(path=failure, full_page=True)
            print(f"failure screenshot: {failure}")
            raise
        finally:
            browser.close()


def _gpu_run_header() -> str:
    """The line of the committed GPU notebook's first cell that names the GPU: '<GPU name> | torch <version>'."""
    with open(GPU_NOTEBOOK) as f:
        nb = json.load(f)
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            for line in "".join(output.get("text", "")).splitlines():
                if " | torch " in line:
                    return line.strip()
    raise AssertionError("05_gpu_max_autotune.ipynb has no outputs: run it on a GPU machine (see its first cell)")


def test_gpu_notebook_panel_renders_offline_from_saved_state(jupyterlab, tmp_path):
    """No kernel runs the notebook: the panel comes from the widget state stored by the GPU run."""
    from playwright.sync_api import expect, sync_playwright

    gpu_name = _gpu_run_header().split(" | ")[0]
    assert gpu_name and "cpu" not in gpu_name.lower()
    base, token = jupyterlab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            _open_notebook(page, f"{base}/lab/tree/gpu.ipynb?token={token}", kernel_choice="No Kernel")
            panel = page.locator(".widget-vbox", has_text="Cache layers").first
            panel.wait_for(timeout=60_000)
            expect(panel.get_by_text(gpu_name, exact=False).first).to_be_visible()
            for title in ("Dynamo precompile", "Inductor/Triton kernels", "Autotune"):
                expect(panel.get_by_text(title, exact=True)).to_be_visible()
            expect(panel.get_by_text("transformer-max-autotune", exact=False).first).to_be_visible()
            # saved widgets have no kernel behind them; drop the "disconnected" marks (they widen each button)
            page.add_style_tag(content=".jupyter-widgets-disconnected::before { display: none !important; }")
            assert panel.evaluate(CLIPPED) == []
            assert panel.evaluate(TALL_ROWS) == [] and panel.evaluate(OVERLAPS) == []
            shot = os.environ.get("PANEL_GPU_SCREENSHOT") or str(tmp_path / "panel_gpu.png")
            panel.scroll_into_view_if_needed()
            panel.screenshot(path=shot)
            assert os.path.getsize(shot) > 10_000
        except Exception:
            page.screenshot(path=str(tmp_path / "failure_gpu.png"), full_page=True)
            print(f"failure screenshot: {tmp_path / 'failure_gpu.png'}")
            raise
        finally:
            browser.close()
