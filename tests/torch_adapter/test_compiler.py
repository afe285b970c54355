"""torch_adapter/compiler.py: which cache files are the CPU probe's own, read against torch's real probe code."""

from __future__ import annotations

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
