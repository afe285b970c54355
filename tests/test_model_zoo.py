"""Real third-party models under `%%compile_cache`: HF transformers from tiny configs (random weights, no download).

Cold in one kernel, then a new kernel on an EMPTY cache dir restores each model's bundle. Every cell must give the
eager answer. Where torch's precompile works for a model, the restored cell runs the restored entry (a Dynamo hit)
with no FX graph misses; where torch's precompile fails for it (some models fail while torch rebuilds their guards),
the cell says so in one line, counts a fallback, and still hits the FX graph cache.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers")  # a test extra: installed by `make setup`

pytestmark = pytest.mark.slow

# CI runs on the CPU; JCC_TEST_DEVICE=cuda runs the same zoo on a GPU.
DEVICE = os.environ.get("JCC_TEST_DEVICE", "cpu")

INPUT_IDS = "dict(input_ids=torch.randint(0, 64, (2, 8)))"
MODELS = {
    "gpt2": (
        "T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32))",
        INPUT_IDS,
    ),
    "llama": (
        "T.LlamaForCausalLM(T.LlamaConfig(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,"
        " hidden_size=32, intermediate_size=64, vocab_size=64, max_position_embeddings=32))",
        INPUT_IDS,
    ),
    "bert": (
        "T.BertModel(T.BertConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=32, intermediate_size=64,"
        " vocab_size=64, max_position_embeddings=32))",
        INPUT_IDS,
    ),
    "t5": (
        "T.T5Model(T.T5Config(num_layers=1, num_decoder_layers=1, num_heads=2, d_model=32, d_kv=16, d_ff=64,"
        " vocab_size=64))",
        "dict(input_ids=torch.randint(0, 64, (2, 8)), decoder_input_ids=torch.randint(0, 64, (2, 4)))",
    ),
    "bart": (
        "T.BartModel(T.BartConfig(encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,"
        " decoder_attention_heads=2, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=64,"
        " max_position_embeddings=32))",
        INPUT_IDS,
    ),
    "vit": (
        "T.ViTModel(T.ViTConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=32, intermediate_size=64,"
        " image_size=16, patch_size=8))",
        "dict(pixel_values=torch.randn(2, 3, 16, 16))",
    ),
    "resnet": (
        "T.ResNetModel(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_channels=3))",
        "dict(pixel_values=torch.randn(2, 3, 32, 32))",
    ),
}

SETUP = f"""
DEVICE = {DEVICE!r}
import torch, warnings
import transformers as T
warnings.filterwarnings("ignore")
def first_tensor(out):
    return out[0] if isinstance(out, (tuple, list)) else next(v for v in out.values() if torch.is_tensor(v))
"""

CELL = """%%compile_cache zoo-{name}
torch.manual_seed(0)
model_{name} = {build}.eval().to(DEVICE)
inputs_{name} = {{k: v.to(DEVICE) for k, v in {inputs}.items()}}
with torch.no_grad():
    got = first_tensor(torch.compile(model_{name})(**inputs_{name}))
    want = first_tensor(model_{name}(**inputs_{name}))
print("MATCHES_EAGER {name}", torch.allclose(got, want, atol=1e-4))
"""

CELLS_REPORT = (
    "[(c['name'], c['layers'], c['precompile_fallbacks'], c['ok'])"
    " for c in __import__('jupyter_compile_cache').status()['cells']]"
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

    k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})
    restored_out = _run_zoo(k)
    assert restored_out.count("restored 'zoo-") == len(MODELS), restored_out
    used_precompile = []
    for name, layers, fallbacks, ok in k.value(CELLS_REPORT):
        assert ok
        model = name.removeprefix("zoo-")
        assert layers["fx_graph"]["misses"] == 0, (model, layers)
        if fallbacks:
            assert layers["fx_graph"]["hits"] >= 1, (model, layers)  # the plain path still hit the FX graph cache
        else:
            assert layers["dynamo_precompile"]["hits"] >= 1 and layers["dynamo_precompile"]["misses"] == 0, (
                model,
                layers,
            )
            used_precompile.append(model)
    # The fallback is told once per function, in one line, never as a traceback in the cell.
    assert "Traceback" not in restored_out
    assert restored_out.count("fell back from precompile") == len(MODELS) - len(used_precompile), restored_out
    print("restored with precompile:", used_precompile)
