"""What a warm template may and may not do before it forks, measured on this machine.

A parent imports torch and its compiler as a template does (NVML-based CUDA check, no torch operation), then:

1. forks a child that compiles a small function COLD on the CPU (its own empty cache dir: the ISA probe, a C++
   build, compile workers) and, where there is a GPU, runs a CUDA matmul: time and answers;
2. runs one CPU matmul itself (OpenMP starts its pool) and says whether the template's check sees it: the set of
   the process's OS threads against the set right after torch's import, and the bare count;
3. forks a child after that matmul, which runs a CPU matmul under a 20 s alarm: the hazard the check guards.

    python -m benchmarks fork_safety [--out result.json]
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time

from benchmarks.harness import Job

HERE = os.path.dirname(os.path.abspath(__file__))


def in_child(work, timeout: float) -> dict:
    """Run work() in a forked child under an alarm; its dict, or why it did not come back."""
    read_end, write_end = os.pipe()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        signal.alarm(int(timeout))
        try:
            result = work()
        except BaseException as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    seconds = time.perf_counter() - start
    if not data:
        return {"seconds": seconds, "hung_or_died": True, "status": status}
    return {"seconds": seconds, **json.loads(data)}


def cold_compile() -> dict:
    import torch

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="fork-cold-")
    start = time.perf_counter()

    def f(x):
        return torch.nn.functional.gelu(x) * 2 + 1

    x = torch.randn(64, 64)
    same = bool(torch.allclose(torch.compile(f)(x), f(x)))
    out = {"cold_cpu_compile_s": time.perf_counter() - start, "cpu_compile_right": same}
    if torch.cuda.is_available():
        y = torch.randn(1024, 1024, device="cuda")
        out["cuda_matmul_right"] = bool(torch.allclose((y @ y).cpu(), y.cpu() @ y.cpu(), rtol=1e-3, atol=1e-2))
    return out


def cpu_matmul() -> dict:
    import torch

    start = time.perf_counter()
    x = torch.randn(1024, 1024)
    float((x @ x).sum())
    return {"cpu_matmul_s": time.perf_counter() - start}


def run(job: Job) -> None:
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    from jupyter_compile_cache.kernels.template import native_threads

    start = time.perf_counter()
    import torch

    after_torch = native_threads()
    from jupyter_compile_cache.torch_adapter import compiler

    compiler.import_compiler()
    compiler.hash_torch_and_triton()
    result: dict = {"torch": torch.__version__, "cores": os.cpu_count(), "import_s": time.perf_counter() - start}
    result["threads_after_import"] = len(after_torch)
    result["cuda_initialized_in_parent"] = torch.cuda.is_initialized()
    result["child_cold_compile"] = in_child(cold_compile, 300)
    before = native_threads()
    cpu_matmul()
    after = native_threads()
    result["threads_before_matmul"], result["threads_after_matmul"] = len(before), len(after)
    result["new_threads_seen_by_the_check"] = len(after - after_torch)
    result["child_after_parent_matmul"] = in_child(cpu_matmul, 20)
    job.note(json.dumps(result, indent=1))
    job.keep(**result)
