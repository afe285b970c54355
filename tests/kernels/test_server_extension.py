"""The Jupyter server extension: a real `jupyter server`, configured by nothing but the files the package installs
(its kernel spec, the extension enabled), starts the warm spec's template as it starts, and the first kernel it starts
through its REST API, as JupyterLab does, is forked from that template."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from helpers.redis_server import free_port
from helpers.warm_kernels import end_templates, wait_for_template

from jupyter_compile_cache.kernels.protocol import start_record_path
from jupyter_compile_cache.kernels.runtime_dir import process_alive

pytestmark = pytest.mark.slow
TOKEN = "jcc-test-token"
INSTALLED = pathlib.Path(__file__).resolve().parents[2] / "jupyter_data"


def _api(port: int, method: str, path: str, body: dict | None = None) -> dict | None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read()
    return json.loads(text) if text else None


def _wait_for(path: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_the_server_starts_the_template_and_its_first_kernel_is_forked(warm_env, tmp_path):
    runtime, jupyter_runtime, work = tmp_path / "templates", tmp_path / "jupyter-runtime", tmp_path / "work"
    runtime.mkdir(mode=0o700)
    work.mkdir()
    env = {**warm_env, "JUPYTER_COMPILE_CACHE_RUNTIME_DIR": str(runtime), "JUPYTER_RUNTIME_DIR": str(jupyter_runtime)}
    # what pip installs beside the package (pyproject.toml's data-files), as the only spec and configuration there is
    env["JUPYTER_PATH"], env["JUPYTER_CONFIG_PATH"] = (
        str(INSTALLED / "share" / "jupyter"),
        str(INSTALLED / "etc" / "jupyter"),
    )
    env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "no-user-config")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", f"--port={port}",
         f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={work}"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        template = wait_for_template(str(runtime))  # no kernel asked for it
        deadline = time.time() + 60
        while True:  # the server answers (it may listen after the extension ran)
            try:
                _api(port, "GET", "status")
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, server.communicate()[1]
                time.sleep(0.2)
        assert template.holders == [server.pid]  # it lives as long as the server (and its idle time)
        kernel = _api(port, "POST", "kernels", {"name": "python3-compile-cache"})
        assert kernel is not None
        start_file = start_record_path(str(jupyter_runtime / f"kernel-{kernel['id']}.json"))
        _wait_for(start_file, 60)
        with open(start_file) as f:
            record = json.load(f)
        assert record["how"] == "forked" and record["template_pid"] == template.pid, record
        _api(port, "DELETE", f"kernels/{kernel['id']}")
        assert process_alive(template.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            _, errors = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, errors = server.communicate()
        end_templates(str(runtime))
    assert "warming up templates for kernel specs python3-compile-cache" in errors, errors
