"""fingerprint.py: what decides whether a bundle restores on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from jupyter_compile_cache.torch_adapter import fingerprint


def test_fingerprint_has_the_fields_that_decide_compatibility():
    fp = fingerprint.current()
    assert fp["torch"] == torch.__version__
    assert fp["python"].count(".") == 1
    assert fp["cpu_isa"].split(":")[0]
    assert len(fingerprint.digest(fp)) == 12


def test_cpu_bundle_ignores_gpu_fields_but_not_torch():
    saved = fingerprint.current()
    now = dict(saved, gpu_name="NVIDIA H100", cuda="13.0")
    assert _blocking(fingerprint.compare(saved, now, uses_gpu=False, uses_cpu_kernels=True)) == []
    assert "gpu_name" in _blocking(fingerprint.compare(saved, now, True, True))
    older = dict(saved, torch="2.7.0")
    assert _blocking(fingerprint.compare(older, now, False, False)) == ["torch"]


def test_cpu_isa_only_matters_for_cpu_kernels():
    saved = fingerprint.current()
    now = dict(saved, cpu_isa="x86_64:avx2")
    assert _blocking(fingerprint.compare(saved, now, False, False)) == []
    assert _blocking(fingerprint.compare(saved, now, False, True)) == ["cpu_isa"]


def test_a_process_without_torch_reads_the_same_build_from_torchs_files():
    code = (
        "import json, sys; from jupyter_compile_cache.torch_adapter import fingerprint as f; "
        "fp = f.current(with_gpu=False); print(json.dumps([fp, 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    light, imported = json.loads(out.stdout)
    assert not imported
    here = fingerprint.current(with_gpu=False)
    for field in fingerprint.HARD_FIELDS + ("cuda", "hip", "cpu_isa"):
        assert light[field] == here[field], field
    assert light["torch"] == torch.__version__ and light["torch_git"] == torch.version.git_version
    assert light["inductor_config"] is None  # not known without the compiler: never compared
    checks = fingerprint.compare(here, light, uses_gpu=False, uses_cpu_kernels=True)
    assert _blocking(checks) == []
    assert [c.checked for c in checks if c.field == "inductor_config"] == [False]


NVIDIA_GPUS = "/proc/driver/nvidia/gpus"


@pytest.mark.skipif(
    any(os.path.exists(p) for p in fingerprint._GPU_DRIVER_FILES), reason="a machine with a GPU driver: torch is asked"
)
def test_a_machine_without_a_gpu_driver_has_no_gpu_without_importing_torch():
    code = (
        "import json, sys; from jupyter_compile_cache.torch_adapter import fingerprint as f; "
        "fp = f.current(); print(json.dumps([fp['gpu_name'], fp['gpu_capability'], 'torch' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [None, None, False]
    assert not torch.cuda.is_available()  # what torch itself answers here


def _blocking(checks: list[fingerprint.FieldCheck]) -> list[str]:
    """The fields that make a version unusable here."""
    return [c.field for c in checks if c.blocking and not c.ok]


@pytest.mark.skipif(not os.path.isdir(NVIDIA_GPUS), reason="an NVIDIA GPU machine's question (run on the device)")
def test_the_gpu_is_asked_once_per_gpu_set_and_the_answer_is_torchs(tmp_path):
    code = (
        "import json, sys; from jupyter_compile_cache.torch_adapter import fingerprint as f; "
        "fp = f.current(); print(json.dumps([fp['gpu_name'], fp['gpu_capability'], 'torch' in sys.modules]))"
    )

    def ask(**env: str) -> list:
        run_env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), **env}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=run_env)
        return json.loads(out.stdout)

    asked, kept = ask(), ask()
    torch_says = [torch.cuda.get_device_name(), ".".join(map(str, torch.cuda.get_device_capability()))]
    assert asked == [*torch_says, True]  # the first process asks torch
    assert kept == [*torch_says, False]  # the next reads the answer kept for this GPU set
    assert ask(CUDA_VISIBLE_DEVICES="") == [None, None, True]  # another selection: asked again
