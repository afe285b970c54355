"""Run cells in a real Jupyter kernel (through jupyter_client) and collect what they print: for the demo and the
benchmarks, which must measure what a notebook user waits for, not an in-process imitation."""

from __future__ import annotations

import json
import os
import queue
import sys
import tempfile
import time


class KernelRunner:
    """A new python3 kernel with `env` added to this process's environment; `run` returns (seconds, output).
    `kernel_cmd`: another argv to start it with (the warm kernel's launcher), `{connection_file}` in it."""

    def __init__(self, env: dict[str, str], timeout: float = 600.0, kernel_cmd: list[str] | None = None) -> None:
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager

        self.timeout = timeout  # seconds one cell may take
        # IPC sockets in a private folder: nothing listens on the network (and the kernel prints no TCP warning).
        self.sockets = tempfile.TemporaryDirectory(prefix="jcc-kernel-")
        # The kernel's argv as a spec of its own in that folder (jupyter_client 8 starts kernels from specs only).
        spec_dir = os.path.join(self.sockets.name, "kernels", "runner")
        os.makedirs(spec_dir)
        argv = kernel_cmd or [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        with open(os.path.join(spec_dir, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump({"argv": argv, "display_name": "runner", "language": "python"}, f)
        specs = KernelSpecManager(kernel_dirs=[os.path.dirname(spec_dir)])
        self.km = KernelManager(
            kernel_name="runner",
            kernel_spec_manager=specs,
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
        start = time.perf_counter()
        msg_id = self.kc.execute(code)
        out, error = "", None
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(1.0, start + self.timeout - time.perf_counter()))
            except queue.Empty:
                raise TimeoutError(f"no answer after {self.timeout:.0f} s; it had printed: {out[-500:]!r}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out += content["text"]
            elif kind == "error":
                error = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                break
        seconds = time.perf_counter() - start
        if error:
            raise RuntimeError(f"{error}\n{out[-2000:]}")
        return seconds, out

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
        self.sockets.cleanup()
