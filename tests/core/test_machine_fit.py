"""machine_fit.py: one answer to "does this version fit this machine, and if not why", for real bundles in a real
store."""

from __future__ import annotations

import dataclasses

from helpers.store import make_bundle

from jupyter_compile_cache.core.machine_fit import MachineFit
from jupyter_compile_cache.storage.bundle import FieldMismatch
from jupyter_compile_cache.storage.store import LocalStore
from jupyter_compile_cache.torch_adapter import fingerprint


def test_a_version_fits_or_says_which_field_blocks_it(tmp_path):
    store = LocalStore(str(tmp_path))
    here = make_bundle(store, "net", now=fingerprint.current(with_gpu=False))
    other_torch = make_bundle(store, "net", now={**fingerprint.current(with_gpu=False), "torch": "9.9"})
    fit = MachineFit()
    assert fit.fits(here) and fit.of(here).mismatches == ()
    verdict = fit.of(other_torch)
    assert not verdict.fits and verdict.mismatches == (FieldMismatch("torch", "9.9", here.fingerprint["torch"]),)
    blocked = [c.field for c in verdict.checks if c.blocking and not c.ok]
    assert blocked == ["torch"]
    assert fit.mismatches(other_torch) == verdict.mismatches


def test_the_gpu_is_asked_only_for_a_version_with_gpu_kernels(tmp_path):
    store = LocalStore(str(tmp_path))
    cpu_only = make_bundle(store, "net", now=fingerprint.current(with_gpu=False))
    assert not cpu_only.uses_gpu
    fit = MachineFit()
    assert fit.fits(cpu_only) and not fit.gpu_asked
    assert fit.fingerprint(False) is fit.fingerprint(False)  # taken once for the object's life
    gpu_bundle = dataclasses.replace(cpu_only, uses_gpu=True)  # as a bundle holding Triton kernels says
    fit.of(gpu_bundle)
    assert fit.gpu_asked
