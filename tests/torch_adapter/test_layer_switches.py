"""`%compile_cache enable|disable LAYER` in real kernels: a switch that can make plain torch.compile less right
(Dynamo precompile drops identity guards) applies only inside `%%compile_cache` cells, and `status` says where
each switch applies. The control is a kernel without the extension running the same plain cells."""

from __future__ import annotations

import re

import pytest

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PrecompileGuard.available(), reason="Dynamo precompile is not used with torch < 2.11"),
]

DEFINE = """import torch
def helper(t):
    return t.sin()
f = torch.compile(lambda t: helper(t) * 2)
x = torch.linspace(-2, 2, 16)
print("BEFORE", (f(x) - helper(x) * 2).abs().max().item())
"""
REDEFINE = """def helper(t):
    return t.tanh()
print("AFTER", (f(x) - helper(x) * 2).abs().max().item())
"""
OUR_CELL = """%%compile_cache switch_scope
g = torch.compile(lambda t: t.cos() + 1)
print("OURS", (g(x) - (x.cos() + 1)).abs().max().item())
"""
GLOBAL = "import torch._dynamo.config as _dc\nprint('GLOBAL', _dc.caching_precompile)"


def _number(tag: str, out: str) -> float:
    found = re.search(rf"^{tag} (\S+)$", out, re.M)
    assert found, out
    return float(found.group(1))


def test_enabling_precompile_never_changes_plain_torch_compile_outside_our_cells(kernel_factory, dirs):
    plain = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"])
    plain.run(DEFINE).check()
    control = _number("AFTER", plain.run(REDEFINE).check().output)
    plain.shutdown()
    assert control < 1e-5, "plain torch.compile follows the redefined helper"

    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_b"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    k.run("%load_ext jupyter_compile_cache").check()
    enabled = k.run("%compile_cache enable dynamo_precompile").check().output
    assert "%%compile_cache cells" in enabled, enabled
    assert "GLOBAL False" in k.run(GLOBAL).check().output  # torch's own switch is left as it was
    k.run(DEFINE).check()  # before any of our cells, as a user who enables first and compiles later
    after = _number("AFTER", k.run(REDEFINE).check().output)
    assert after == pytest.approx(control, abs=1e-5), f"plain torch.compile outside our cells went stale: {after}"
    ours = k.run(OUR_CELL).check().output
    assert _number("OURS", ours) < 1e-5 and "saved" in ours, ours
    assert "GLOBAL False" in k.run(GLOBAL).check().output  # and put back after our cell

    status = "\n".join(k.run("%compile_cache status").check().results)
    assert re.search(r"on \(%%compile_cache cells\)\s+Dynamo precompile", status), status
    assert re.search(r"on \(this kernel\)\s+FX graph", status), status
    k.run("%compile_cache disable dynamo_precompile").check()
    status = "\n".join(k.run("%compile_cache status").check().results)
    assert re.search(r"off\s+Dynamo precompile", status), status
