"""Families of models and calls beyond the zoo restore whole, in real kernels: a model called under `torch.autocast`
and under `torch.inference_mode`, an input marked with `mark_dynamic`, `torch.compile(dynamic=True)` at two batch
sizes, torchao's int8 weight-only quantized weights, a peft LoRA, a diffusers UNet,
and regional compilation (`block.compile()` on each repeated block): an HF Llama's decoder layers, and 32 small
blocks told apart by an index, past Dynamo's recompile limit (plain torch.compile compiles 8 of them and runs the
rest eagerly; so must a restored kernel).

Cold in one kernel, then restored in a new kernel on an empty cache dir: every cell restores through precompile
with no miss, no fallback and no trace, saves nothing new, and computes exactly what the cold kernel computed, which
matches eager. What each family needed: torch_adapter/dispatch_state.py (autocast, inference_mode on torch 2.11 and
2.13), precompile_fixes.py's guard-state pickler (dimension markings, torchao's tensors), precompile.py's entries per
code (regional compilation) and precompile_fixes.py's recompile limit.
"""

from __future__ import annotations

import re

import pytest
from helpers.kernels import misses

from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

pytest.importorskip("torchao")  # the families extra, as peft and diffusers: `make setup` installs it with torch >= 2.11
pytestmark = pytest.mark.slow

SETUP = """
import copy, warnings
import torch
import transformers as T
from torchao.quantization import Int8WeightOnlyConfig, quantize_
from peft import LoraConfig, get_peft_model
warnings.filterwarnings("ignore")
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)
    def forward(self, x):
        return self.l2(torch.nn.functional.gelu(self.l1(x)))
class Block(torch.nn.Module):
    def __init__(self, index):
        super().__init__()
        self.index, self.lin = index, torch.nn.Linear(8, 8)
    def forward(self, x):
        return torch.tanh(self.lin(x)) * (self.index + 1)
class Shapeless(Net):  # a forward of its own: plain torch.compile would reuse Net.forward's entries for it
    def forward(self, x):
        return self.l2(torch.nn.functional.silu(self.l1(x)))
nets = {name: Net() for name in ("autocast", "inference", "dynamic")}
nets["dynamic-true"] = Shapeless()
# another class than Net's: plain torch.compile reuses the code Net.forward has for the float weights
nets["int8"] = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
quantize_(nets["int8"], Int8WeightOnlyConfig())
llama = T.LlamaForCausalLM(T.LlamaConfig(num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2,
    hidden_size=32, intermediate_size=64, vocab_size=64, max_position_embeddings=32)).eval()
blocks = torch.nn.Sequential(*[Block(i) for i in range(32)])
tiny = T.LlamaForCausalLM(T.LlamaConfig(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
    hidden_size=32, intermediate_size=64, vocab_size=64, max_position_embeddings=32))
lora = get_peft_model(tiny, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).eval()
x, ids = torch.randn(4, 32), torch.randint(0, 64, (2, 8))
def show(tag, *outs):
    print(tag, [round(float(v), 4) for out in outs for v in out.float().flatten()[:6].tolist()])
"""

# family -> the cell's body; each prints GOT (compiled) and WANT (eager) lines
CELLS = {
    "autocast": """
compiled = torch.compile(nets["autocast"])
with torch.no_grad():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = compiled(x), nets["autocast"](x)
    show("GOT_AUTOCAST", got, compiled(x))  # and outside autocast: compiled for that too, as plain compile does
    show("WANT_AUTOCAST", want, nets["autocast"](x))
print("DTYPE", got.dtype)
""",
    "inference": """
with torch.inference_mode():
    show("GOT_INFERENCE", torch.compile(nets["inference"])(x))
    show("WANT_INFERENCE", nets["inference"](x))
""",
    "dynamic": """
compiled = torch.compile(nets["dynamic"])
with torch.no_grad():
    for batch in (2, 4, 8):
        xb = torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch))
        torch._dynamo.mark_dynamic(xb, 0)
        show(f"GOT_DYNAMIC{batch}", compiled(xb))
        show(f"WANT_DYNAMIC{batch}", nets["dynamic"](xb))
""",
    "dynamic-true": """
compiled = torch.compile(nets["dynamic-true"], dynamic=True)
with torch.no_grad():
    for batch in (3, 5):
        xb = torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch))
        show(f"GOT_DYNAMIC_TRUE{batch}", compiled(xb))
        show(f"WANT_DYNAMIC_TRUE{batch}", nets["dynamic-true"](xb))
""",
    "int8": """
with torch.no_grad():
    show("GOT_INT8", torch.compile(nets["int8"])(x))
    show("WANT_INT8", nets["int8"](x))
""",
    "lora": """
with torch.no_grad():
    show("GOT_LORA", torch.compile(lora)(input_ids=ids).logits)
    show("WANT_LORA", lora(input_ids=ids).logits)
""",
    "regional-llama": """
with torch.no_grad():
    want = llama(input_ids=ids).logits
    for layer in llama.model.layers:
        layer.compile()
    show("GOT_LLAMA", llama(input_ids=ids).logits)
    show("WANT_LLAMA", want)
""",
    "regional-32": """
with torch.no_grad():
    want = blocks(x[:, :8])
    for block in blocks:
        block.compile()
    show("GOT_BLOCKS", blocks(x[:, :8]))
    show("WANT_BLOCKS", want)
""",
}


def _values(out: str) -> dict[str, list[float]]:
    return {m[1]: eval(m[2]) for m in re.finditer(r"^(GOT_\w+|WANT_\w+) (\[.*\])$", out, re.M)}  # noqa: S307


def _cold_then_restored(k, dirs, setup: str, cells: dict[str, str], hits: int) -> dict[str, list[float]]:
    """Each cell cold, then restored in a new kernel on an empty cache dir: whole (no trace, no miss, no fallback,
    nothing new to save, at least HITS precompile entries restored) and computing what the cold kernel did."""
    precompiled = PrecompileGuard.available()  # else every function is traced again, its graphs from torch's caches
    outputs = {}
    for run in ("cold", "restored"):
        if run == "restored":
            k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})  # a new kernel, EMPTY cache dir
        k.run("%load_ext jupyter_compile_cache").check()
        k.run(setup).check()
        out = "".join(k.run(f"%%compile_cache family-{name}\n{body}").check().output for name, body in cells.items())
        assert "Traceback" not in out and "fell back" not in out and "does not package" not in out, out
        outputs[run] = _values(out)
        if run == "cold":
            continue
        assert all(f"restored 'family-{name}'" in out for name in cells), out
        # no trace, no stale entry, and nothing new: the bundle was whole
        assert out.count("nothing new to save") == len(cells), out
        assert "traced again" not in out and "compiled for other code" not in out and "refused" not in out, out
        counters = k.counters()
        assert misses(counters) == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}
        assert counters.get("jupyter_compile_cache", {}).get("precompile_fallback", 0) == 0, counters
        if precompiled:
            assert counters["dynamo_cache"]["dynamo_cache_hit"] >= hits, counters
            assert counters.get("stats", {}).get("unique_graphs", 0) == 0, counters  # nothing traced
    assert outputs["restored"] == outputs["cold"]  # the restored kernel computes exactly what the cold one did
    return outputs["cold"]


def _matches_eager(values: dict[str, list[float]], tolerance: dict[str, float]) -> None:
    for tag, got in values.items():
        if tag.startswith("GOT_"):
            want, tol = values["WANT_" + tag.removeprefix("GOT_")], tolerance.get(tag, 1e-3)
            assert all(abs(a - b) <= tol * max(1.0, abs(b)) for a, b in zip(got, want)), (tag, got, want)


def test_autocast_inference_mode_dynamic_torchao_lora_and_regional_blocks_restore_whole(kernel_factory, dirs):
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    # an entry each, three Llama layers, the 8 blocks plain torch.compile compiles before its recompile limit
    cold = _cold_then_restored(k, dirs, SETUP, CELLS, hits=len(CELLS) - 2 + 3 + 8)
    assert len(cold) == 2 * 11, cold
    _matches_eager(cold, {"GOT_AUTOCAST": 0.05})  # bfloat16


UNET_SETUP = """
import warnings
import torch
warnings.filterwarnings("ignore")
from diffusers import UNet2DConditionModel
torch.manual_seed(0)
unet = UNet2DConditionModel(
    sample_size=16, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=16, attention_head_dim=4, norm_num_groups=8,
).eval()
latents, step, text = torch.randn(1, 4, 16, 16), torch.tensor([10]), torch.randn(1, 4, 16)
def show(tag, out):
    print(tag, [round(float(v), 4) for v in out.float().flatten()[:6].tolist()])
"""
UNET_CELL = """
with torch.no_grad():
    show("GOT_UNET", torch.compile(unet)(latents, step, encoder_hidden_states=text).sample)
    show("WANT_UNET", unet(latents, step, encoder_hidden_states=text).sample)
"""


def test_a_diffusers_unet_restores_whole(kernel_factory, dirs):
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    cold = _cold_then_restored(k, dirs, UNET_SETUP, {"unet": UNET_CELL}, hits=1)
    _matches_eager(cold, {})
