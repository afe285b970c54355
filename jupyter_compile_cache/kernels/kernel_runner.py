"""Run cells in a real Jupyter kernel (through jupyter_client) and collect what they print: for the demo and the
benchmarks, which must measure what a notebook user waits for, not an in-process imitation."""

from __future__ import annotations

import os
import queue
import sys
import tempfile
import time


class KernelRunner:
    """A new python3 kernel with `env` added to this process's environment; `run` returns (seconds, output)."""

    def __init__(self, env: dict[str, str], timeout: float = 600.0) -> None:
        from jupyter_client.manager import KernelManager

        self.timeout = timeout  # seconds one cell may take
        # IPC sockets in a private folder: nothing listens on the network (and the kernel prints no TCP warning).
        self.sockets = tempfile.TemporaryDirectory(prefix="jcc-kernel-")
        self.km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(self.sockets.name, "kernel"))
        self.km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]  # type: ignore[assignment]  # noqa: E501
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
