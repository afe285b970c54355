"""Real third-party models under `%%compile_cache`: HF transformers from tiny configs (random weights, no download),
and timm models where timm is installed.

Cold in one kernel, then a new kernel on an EMPTY cache dir restores each model's bundle. Every cell must give the
eager answer. Where torch's precompile works for a model, the restored cell runs the restored entry (a Dynamo hit)
with no FX graph misses; where torch's precompile fails for it (some models fail while torch rebuilds their guards),
the cell says so in one line, counts a fallback, and still hits the FX graph cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.zoo_models import zoo_models  # the models are defined once, for this test and benchmarks/zoo.py

TESTS = Path(__file__).resolve().parent.parent  # tests/, where helpers/ is

pytest.importorskip("transformers")  # a test extra: installed by `make setup`

pytestmark = pytest.mark.slow

# CI runs on the CPU; JCC_TEST_DEVICE=cuda runs the same zoo on a GPU.
DEVICE = os.environ.get("JCC_TEST_DEVICE", "cpu")

MODELS = zoo_models()  # the HF models from tiny configs; timm models too where timm is installed (the GPU host)

SETUP = f"""
DEVICE = {DEVICE!r}
import torch, warnings
import transformers as T
{"import timm" if any(name.startswith("timm") for name in MODELS) else ""}
warnings.filterwarnings("ignore")
import sys
sys.path.insert(0, {str(TESTS)!r})
from helpers.zoo_models import first_tensor
"""

# The tolerance is torch.compile's against eager on a GPU (convolution algorithms differ: HF ResNet).
CELL = """%%compile_cache zoo-{name}
torch.manual_seed(0)
model_{name} = {build}.eval().to(DEVICE)
inputs_{name} = {{k: v.to(DEVICE) for k, v in {inputs}.items()}}
with torch.no_grad():
    got = first_tensor(torch.compile(model_{name})(**inputs_{name}))
    want = first_tensor(model_{name}(**inputs_{name}))
print("MATCHES_EAGER {name}", torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-3))
"""

CELLS_REPORT = (
    "[(c.name, c.layers, c.precompile_fallbacks, c.stale_rejected, c.ok)"
    " for c in __import__('jupyter_compile_cache').status().cells]"
)


def _run_zoo(k) -> str:
    k.run("%load_ext jupyter_compile_cache").check()
    k.run(SETUP).check()
    out = ""
    for name, (build, inputs) in MODELS.items():
        result = k.run(CELL.format(name=name, build=build, inputs=inputs))
        assert result.error is None, f"{name}: {result.error and result.error['evalue']}\n{result.output}"
        assert f"MATCHES_EAGER {name} True" in result.stdout, result.output
        out += result.output
    return out


def test_transformers_zoo_cold_then_restored_in_a_new_kernel(kernel_factory, dirs):
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    cold = _run_zoo(k)
    assert cold.count("saved") >= len(MODELS), cold
    refused_when_saved = {name.removeprefix("zoo-") for name, _, fallbacks, _, _ in k.value(CELLS_REPORT) if fallbacks}

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    restored_out = _run_zoo(k)
    assert restored_out.count("restored 'zoo-") == len(MODELS), restored_out
    paths = {}  # model -> how its restore ran
    # Before torch 2.11 there is no Dynamo precompile to restore: Dynamo traces again and the caches under it hit.
    with_precompile = k.value(
        "__import__('jupyter_compile_cache.torch_adapter.precompile', fromlist=['_']).PrecompileGuard.available()"
    )
    for name, layers, fallbacks, stale, ok in k.value(CELLS_REPORT):
        assert ok
        model = name.removeprefix("zoo-")
        precompile, aot, fx = layers["dynamo_precompile"], layers["aot_autograd"], layers["fx_graph"]
        # Inductor compiles nothing afresh: no FX graph miss. (An AOTAutograd lookup may still miss for a graph that
        # never reaches inductor and that torch never caches: ViT after BART, cold and restored alike.)
        assert fx["misses"] == 0, (model, layers)
        if not with_precompile:
            assert aot["hits"] >= 1 and aot["written"] == 0 and not fallbacks and stale == 0, (model, layers)
            assert precompile == {"hits": 0, "misses": 0, "bypasses": 0, "written": 0}, (model, layers)
            paths[model] = "caches under Dynamo"
        elif fallbacks or not precompile["hits"]:
            # The plain path hit the AOTAutograd cache (which holds the FX graph): after a fallback here, or for an
            # entry refused when the cold kernel saved it (told there). Under precompile torch keys these entries
            # by a fresh id per compile; we key them as plain torch.compile does, else this would be an
            # AOTAutograd miss (and an FX graph hit).
            assert aot["hits"] >= 1 and aot["written"] == 0, (model, layers)
            assert fallbacks or model in refused_when_saved, (model, layers)
            paths[model] = "fallback" if fallbacks else "no entry"
        else:
            # The restored entry ran: nothing refused at install. HF's forward is a decorator's wrapper from
            # another module: torch built its restored guards against the wrong module's globals, and GPT-2 and
            # Llama were traced again here. A frame torch left out of the package (a bypass: a dataclass __init__
            # in T5 on torch 2.11) compiles the plain way, from the caches where it has a graph.
            assert precompile["misses"] == 0 and stale == 0, (model, layers, stale)
            assert aot["misses"] == 0, (model, layers)  # (torch 2.11 writes the restored graph's entry back)
            if precompile["bypasses"]:
                paths[model] = "precompile + bypass"
            else:
                assert aot["hits"] == 0, (model, layers)  # nothing traced afresh: no AOTAutograd lookup at all
                paths[model] = "precompile"
    # The fallback is told once per function, in one line, never as a traceback in the cell; torch's bypass
    # warnings are counted (status, explain), not printed.
    assert "Traceback" not in restored_out and "package bypass" not in restored_out, restored_out
    assert restored_out.count("fell back from precompile") == list(paths.values()).count("fallback"), restored_out
    print("restore paths:", paths)
    # Every zoo model restores through precompile (torch 2.11 on an H100, 2.13 on the CPU): a fallback or a missing
    # entry is one of torch's failures we have not put right yet.
    expected = {"precompile", "precompile + bypass"} if with_precompile else {"caches under Dynamo"}
    if with_precompile and k.value("tuple(map(int, torch.__version__.split('.')[:2])) < (2, 13)"):
        # torch 2.11's guard builder fails on the config views of newer transformers (5.2x): GPT-2 then takes the
        # plain path, told in one line (checked above); torch 2.13 builds them
        expected.add("fallback")
    assert set(paths.values()) <= expected, paths
