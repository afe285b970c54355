"""Run cells in a real Jupyter kernel (through jupyter_client) and collect what they print: for the demo, the
benchmarks and the tests' kernels (tests/helpers/kernels.py builds on it), which must see what a notebook user sees,
not an in-process imitation."""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class CellOutput:
    """What one cell did, as a front end receives it."""

    stdout: str = ""
    stderr: str = ""
    text: str = ""  # both streams, in the order they came
    error: dict | None = None  # {'ename', 'evalue', 'traceback'}
    results: list[str] = field(default_factory=list)  # text/plain of execute_result / display_data
    status: str = "ok"  # the execute reply's
    seconds: float = 0.0  # from sending the cell to the kernel going idle


def execute(client: Any, code: str, timeout: float) -> CellOutput:
    """Send CODE to the kernel behind CLIENT (a jupyter_client client with its channels started) and collect its
    output until the kernel goes idle, then its own execute reply. A cell that takes longer than TIMEOUT seconds is
    a TimeoutError saying what it had printed."""
    start = time.perf_counter()
    msg_id = client.execute(code)
    cell = CellOutput()
    while True:
        try:
            msg = client.get_iopub_msg(timeout=max(1.0, start + timeout - time.perf_counter()))
        except queue.Empty:
            raise TimeoutError(f"no answer after {timeout:.0f} s; it had printed: {cell.text[-500:]!r}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            cell.text += content["text"]
            if content["name"] == "stdout":
                cell.stdout += content["text"]
            else:
                cell.stderr += content["text"]
        elif kind in ("execute_result", "display_data"):
            cell.results.append(content["data"].get("text/plain", ""))
        elif kind == "error":
            cell.error = content
        elif kind == "status" and content["execution_state"] == "idle":
            break
    cell.seconds = time.perf_counter() - start
    while True:  # this cell's own reply: one left over from before (a kernel_info) must not stand in for it
        reply = client.get_shell_msg(timeout=max(1.0, start + timeout - time.perf_counter()))
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    cell.status = reply["content"]["status"]
    return cell


def argv_spec(argv: list[str], folder: str) -> Any:
    """A kernel spec manager whose one spec, "argv", runs ARGV (`{connection_file}` in it), written under FOLDER:
    jupyter_client 8 starts kernels from specs only."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec_dir = os.path.join(folder, "argv")
    os.makedirs(spec_dir, exist_ok=True)
    with open(os.path.join(spec_dir, "kernel.json"), "w", encoding="utf-8") as f:
        json.dump({"argv": argv, "display_name": "argv", "language": "python"}, f)
    return KernelSpecManager(kernel_dirs=[folder])


class KernelRunner:
    """A new python3 kernel with `env` added to this process's environment; `run` returns (seconds, output).
    `kernel_cmd`: another argv to start it with (the warm kernel's launcher), `{connection_file}` in it."""

    def __init__(self, env: dict[str, str], timeout: float = 600.0, kernel_cmd: list[str] | None = None) -> None:
        from jupyter_client.manager import KernelManager

        self.timeout = timeout  # seconds one cell may take
        # IPC sockets in a private folder: nothing listens on the network (and the kernel prints no TCP warning).
        # A socket's path holds at most 107 bytes: under a long TMPDIR (a test's, a CI runner's) they go to /tmp.
        base = tempfile.gettempdir()
        if len(base) > 64 and os.access("/tmp", os.W_OK):
            base = "/tmp"
        self.sockets = tempfile.TemporaryDirectory(prefix="jcc-kernel-", dir=base)
        argv = kernel_cmd or [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        self.km = KernelManager(
            kernel_name="argv",
            kernel_spec_manager=argv_spec(argv, os.path.join(self.sockets.name, "kernels")),
            transport="ipc",
            ip=os.path.join(self.sockets.name, "kernel"),
        )
        self.km.start_kernel(env={**os.environ, "PYTHONWARNINGS": "ignore", **env})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(self, code: str) -> tuple[float, str]:
        """Execute one cell; the seconds from sending it to the kernel going idle, and its printed output. A cell
        that raises is a RuntimeError carrying the error and the end of the output."""
        cell = execute(self.kc, code, self.timeout)
        if cell.error:
            raise RuntimeError(f"{cell.error['ename']}: {cell.error['evalue']}\n{cell.text[-2000:]}")
        return cell.seconds, cell.text

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        self.sockets.cleanup()
