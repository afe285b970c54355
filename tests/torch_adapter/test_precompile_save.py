"""Merging the entries of one code's packages (each `torch.compile` of it makes one; torch saves the last alone), on
torch's own entry types."""

from __future__ import annotations

import pytest

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard
from jupyter_compile_cache.torch_adapter.precompile_save import merged_entry

pytestmark = pytest.mark.skipif(not PrecompileGuard.available(), reason="Dynamo precompile: torch 2.11 on")


def _entry(frames: list[tuple[bytes, str]], bypassed: bool = False, source: str = "a"):
    from torch._dynamo import package

    def code(t):
        return t

    def frame(guards: bytes):
        return package._GuardedCodeCacheEntry(guards, package.SerializedCode.from_code_object(code.__code__))

    cached = package._DynamoCodeCacheEntry(
        python_code=package.SerializedCode.from_code_object(code.__code__),
        python_module=__name__,
        function_names=[],
        guarded_codes=[frame(guards) for guards, _ in frames],
        import_sources={},
        backend_ids=[backend for _, backend in frames],
        code_source="code.__code__",
        install_to_global=False,
        bypassed=bypassed,
    )
    inlined = package.InlinedSource(source, 1, 2, "sum", "")
    return package._DynamoCacheEntry(codes=[cached], source_info=package.SourceInfo({inlined}), device_type="cpu")


def _frames(entry) -> list[tuple[bytes, str]]:
    (code,) = entry.codes
    return [(frame.guards_state, backend) for frame, backend in zip(code.guarded_codes, code.backend_ids)]


def test_every_packages_frames_are_kept_each_once_in_order():
    first = _entry([(b"float32", "fn_1")])
    second = _entry([(b"float32", "fn_1"), (b"float64", "fn_3")], source="b")  # restored, then one more compile
    merged = merged_entry([first, second])
    assert _frames(merged) == [(b"float32", "fn_1"), (b"float64", "fn_3")]
    assert {s.module for s in merged.source_info.inlined_sources} == {"a", "b"}
    assert _frames(first) == [(b"float32", "fn_1")]  # torch's recorded entries are left as they were
    assert merged_entry([first]) is first


def test_a_code_one_package_set_aside_keeps_the_frames_of_the_others():
    aside = _entry([(b"missing backend", "fn_1")], bypassed=True)
    kept = _entry([(b"float64", "fn_3")])
    merged = merged_entry([aside, kept])
    assert _frames(merged) == [(b"float64", "fn_3")] and not merged.codes[0].bypassed
    assert merged_entry([kept, aside]).codes[0].bypassed is False
    assert merged_entry([aside, aside]).codes[0].bypassed


GRAD_ON_CELL = """
import sys, torch
from torch._dynamo.utils import counters
import jupyter_compile_cache as jcc
from jupyter_compile_cache.core.options import CellOptions
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
    def forward(self, x):
        return self.lin(x).relu()
torch.manual_seed(0)
net, x = Net(), torch.randn(2, 8)
with jcc.cell("grad-on", CellOptions(store_dir=sys.argv[1], no_hub=True)):
    y = torch.compile(net)(x)  # gradients on, no backward: torch saves no graph for precompile
print("MATCHES_EAGER", torch.allclose(y, net(x)))
print("FALLBACKS", counters["jupyter_compile_cache"]["precompile_fallback"])
"""


def test_a_forward_with_gradients_on_and_no_backward_is_told_at_the_save_and_never_fails_its_restore(tmp_path):
    # torch saved the entry without its compiled graph ("Backend not found", in the cell's output): a restored kernel
    # failed to install it ("NameError: ... '__compiled_fn_1_...'") and said so as a precompile failure.
    import os
    import subprocess
    import sys

    (tmp_path / "cell.py").write_text(GRAD_ON_CELL)
    said = {}
    for run in ("cold", "restored"):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / run), "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(
            [sys.executable, str(tmp_path / "cell.py"), str(tmp_path / "store")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        said[run] = done.stdout + done.stderr
        assert "MATCHES_EAGER True" in said[run] and "FALLBACKS 0" in said[run], said[run]
        assert "Backend not found" not in said[run] and "NameError" not in said[run], said[run]
        assert (
            "holds no compiled graph of `Net.forward`: one run with gradients on is kept once its backward"
            in (said[run])
        ), said[run]
    assert "restored 'grad-on'" in said["restored"] and "no saved entry for `Net.forward`" in said["restored"]
