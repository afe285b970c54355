"""fingerprint.py: what decides whether a bundle restores on this machine."""

from __future__ import annotations

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
    assert fingerprint.mismatch_reason(fingerprint.compare(saved, now, uses_gpu=False, uses_cpu_kernels=True)) is None
    assert "gpu_name" in fingerprint.mismatch_reason(fingerprint.compare(saved, now, True, True))
    older = dict(saved, torch="2.7.0")
    assert "torch" in fingerprint.mismatch_reason(fingerprint.compare(older, now, False, False))


def test_cpu_isa_only_matters_for_cpu_kernels():
    saved = fingerprint.current()
    now = dict(saved, cpu_isa="x86_64:avx2")
    assert fingerprint.mismatch_reason(fingerprint.compare(saved, now, False, False)) is None
    assert "cpu_isa" in fingerprint.mismatch_reason(fingerprint.compare(saved, now, False, True))
