"""torch_adapter/compiler.py: which cache files are the CPU probe's own, read against torch's real probe code."""

from __future__ import annotations

import os

from torch._inductor import cpu_vec_isa

from jupyter_compile_cache.torch_adapter.compiler import probe_files


def test_only_the_probes_programs_are_the_toolchain_not_a_cells_files_written_meanwhile(tmp_path):
    probe_dir, kernel_dir = tmp_path / "ab", tmp_path / "cd"
    probe_dir.mkdir()
    kernel_dir.mkdir()
    (probe_dir / "kprobe.cpp").write_text(cpu_vec_isa.VecISA._avx_code)
    for name in ("kprobe.so", "kprobe.so.load_ok"):
        (probe_dir / name).write_bytes(b"\x7fELF")
    (kernel_dir / "ckernel.main.cpp").write_text('extern "C" void kernel(float* out) {}')  # a cell's C++ kernel
    (kernel_dir / "ckernel.main.so").write_bytes(b"\x7fELF")
    (probe_dir / "kprobe_other.py").write_text("# a restored wrapper whose name starts like the probe's")
    created = sorted(str(p) for p in tmp_path.rglob("*") if p.is_file())
    assert probe_files(created) == [str(probe_dir / n) for n in ("kprobe.cpp", "kprobe.so", "kprobe.so.load_ok")]
    assert probe_files([p for p in created if "kprobe" not in p]) == []


def test_the_compiler_loads_without_torchs_no_cuda_runtime_line_where_there_is_no_gpu(tmp_path):
    """A CUDA build of torch on a machine without a GPU logs "No CUDA runtime is found" as cpp_extension is imported;
    the prewarm's import leaves it out (it landed in a cell's output), and torch's own import still says it."""
    import subprocess
    import sys

    import torch

    env = {**os.environ, "CUDA_HOME": str(tmp_path)}  # a CUDA_HOME that exists: torch's condition for the line
    plain = "import torch.utils.cpp_extension"
    ours = "from jupyter_compile_cache.torch_adapter import compiler; compiler.import_compiler()"
    said = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True) for code in (plain, ours)
    ]
    assert all(out.returncode == 0 for out in said), [out.stderr for out in said]
    no_gpu = not torch.cuda.is_available()  # torch says it only there (a GPU machine: neither says it)
    assert ("No CUDA runtime is found" in said[0].stderr) == no_gpu, said[0].stderr
    assert "No CUDA runtime is found" not in said[1].stderr, said[1].stderr


def test_an_isa_probe_set_aside_and_the_processes_it_starts_run_at_the_lowest_cpu_priority():
    """torch's probe of one ISA compiles a test program and loads it in a new Python: seconds of CPU. Where no cell
    waits for it (a GPU machine) it runs at nice 19, so a cell's own work beside it keeps the CPU."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from jupyter_compile_cache.torch_adapter.compiler import _probe_aside

    class ProbeStartingAProcess:  # stands where torch's VecISA is: its truth value is its probe
        nice: int | None = None

        def __bool__(self) -> bool:
            out = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True)
            self.nice = int(out.stdout)
            return True

    isa, own = ProbeStartingAProcess(), os.nice(0)
    with ThreadPoolExecutor(1) as pool:  # a pool thread, as probe_cpu runs it: this test's own thread keeps its nice
        assert pool.submit(_probe_aside, isa).result() is True
    assert isa.nice == 19
    assert os.nice(0) == own


def test_torchs_library_finalizers_leave_the_exit_handlers_until_run_and_a_users_stay():
    """A forked kernel says it ended before torch's ~200 op-library finalizers run (kernel_process.py): they are
    taken out of the exit handlers, a user's finalizer is not, and running them finalizes every one."""
    import subprocess
    import sys

    code = """
import weakref, torch, torch.library
from jupyter_compile_cache.torch_adapter.compiler import defer_library_finalizers
class Thing: pass
thing = Thing()
users = weakref.finalize(thing, print, "the user's, at exit")
torchs = [f for f in weakref.finalize._registry if (i := f.peek()) is not None and i[1] is torch.library._del_library]
run = defer_library_finalizers()
assert torchs and not any(f.atexit for f in torchs) and all(f.alive for f in torchs)
assert users.atexit and users.alive
run()
assert not any(f.alive for f in torchs) and users.alive
print(len(torchs))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    count, at_exit = done.stdout.split("\n")[:2]
    assert int(count) > 0 and at_exit == "the user's, at exit"  # the user's ran at exit, as ever
