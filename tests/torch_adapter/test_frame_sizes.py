"""frame_sizes.py: a restored function keeps what the cold kernel had seen of its input sizes, so a later call with
another size compiles the graph the cold kernel compiled (and finds it in the restored caches) instead of a static
graph nobody compiled."""

from __future__ import annotations

import copy
import pickle
import re

import pytest
import torch
from helpers.kernels import misses
from torch._dynamo import pgo

from jupyter_compile_cache.torch_adapter import frame_sizes
from jupyter_compile_cache.torch_adapter.precompile import PrecompileGuard

SETUP = """
import warnings
import torch
warnings.filterwarnings("ignore")
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=32)
model = LlamaForCausalLM(cfg).eval()
prompt = torch.randint(0, 96, (1, 6))
def decode(forward, ids, new=5):
    cache = StaticCache(config=model.config, max_cache_len=24)
    pos, tokens = torch.arange(ids.shape[1]), []
    with torch.no_grad():
        for _ in range(new):
            ids = forward(input_ids=ids, past_key_values=cache, cache_position=pos).logits[:, -1:].argmax(-1)
            tokens.append(int(ids))
            pos = pos[-1:] + 1
    return tokens
print("EAGER_LONG", decode(model.forward, prompt))
print("EAGER_SHORT", decode(model.forward, prompt[:, 2:]))
"""
# transformers' recipe: a compiled forward, a prefill and decode steps through it
LONG = """%%compile_cache sizes-long
step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
print("LONG", decode(step, prompt))
"""
# a prompt of another length: plain torch.compile makes the prompt's length dynamic here
SHORT = """%%compile_cache sizes-short
print("SHORT", decode(step, prompt[:, 2:]))
"""


def _tokens(out: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+) (\[.*\])$", out, re.M))


@pytest.mark.slow
def test_a_prompt_of_another_length_after_a_restore_compiles_nothing_new(kernel_factory, dirs):
    k = kernel_factory(TORCHINDUCTOR_CACHE_DIR=dirs["cache_a"], JUPYTER_COMPILE_CACHE_DIR=dirs["store"])
    runs = {}
    for run in ("cold", "restored"):
        if run == "restored":
            k.restart(env={"TORCHINDUCTOR_CACHE_DIR": str(dirs["cache_b"])})  # a new kernel, EMPTY cache dir
        k.run("%load_ext jupyter_compile_cache").check()
        out = k.run(SETUP).check().output
        out += k.run(LONG).check().output
        before_short = misses(k.counters())
        short = k.run(SHORT).check().output
        after_short = misses(k.counters())
        runs[run] = _tokens(out + short)
        if run == "cold":
            assert after_short["fxgraph_cache_miss"] > before_short["fxgraph_cache_miss"], short  # a new graph
        else:
            assert "restored 'sizes-long'" in out and "restored 'sizes-short'" in short, out + short
            if PrecompileGuard.available():  # the forward came back through precompile: never traced here
                assert k.counters()["dynamo_cache"]["dynamo_cache_hit"] >= 1
            # Without the saved sizes, the short prompt traced a static graph here: 1 FX graph and 1 AOT miss.
            assert after_short == {"fxgraph_cache_miss": 0, "autograd_cache_miss": 0, "dynamo_cache_miss": 0}, short
            assert "nothing new to save" in short, short
    assert runs["restored"] == runs["cold"]
    cold = runs["cold"]
    assert cold["LONG"] == cold["EAGER_LONG"] and cold["SHORT"] == cold["EAGER_SHORT"], cold


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    pgo.reset_code_state()
    yield
    torch._dynamo.reset()
    pgo.reset_code_state()


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def test_sizes_go_through_an_entry_dir_and_merge_like_a_trace(tmp_path, fresh_dynamo):
    compiled = torch.compile(_scaled, backend="eager")
    compiled(torch.randn(3))
    compiled(torch.randn(5))  # a second size: torch marks the dimension dynamic
    key = frame_sizes.code_id(_scaled)
    remembered = copy.deepcopy(pgo.get_code_state()[key])
    assert remembered.automatic_dynamic, "torch remembered no sizes"

    path = frame_sizes.save(str(tmp_path), key)
    assert path is not None and frame_sizes.save(str(tmp_path), key) == path  # unchanged: written once
    torch._dynamo.reset()  # a new kernel: no compiled code, no memory of sizes
    assert key not in pgo.get_code_state()
    assert frame_sizes.merge(str(tmp_path), key)
    assert pgo.get_code_state()[key] == remembered

    # the memory makes the next size compile a dynamic graph at once, as in the kernel that saw both sizes (without
    # it: a static graph for 7, then a dynamic one for 9)
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compiled = torch.compile(_scaled, backend="eager")
    compiled(torch.randn(7))
    compiled(torch.randn(9))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before == 1


def test_nothing_remembered_writes_nothing_and_a_missing_file_merges_nothing(tmp_path, fresh_dynamo):
    key = frame_sizes.code_id(_scaled)
    assert frame_sizes.save(str(tmp_path), key) is None
    assert key not in pgo.get_code_state()  # asking did not add an empty entry
    assert not list(tmp_path.iterdir())
    assert frame_sizes.merge(str(tmp_path), key) is False


def test_a_damaged_file_is_an_error_the_caller_tells(tmp_path, fresh_dynamo):
    key = frame_sizes.code_id(_scaled)
    (tmp_path / frame_sizes.STATE_FILE).write_bytes(pickle.dumps({"not": "a CodeState"}))
    with pytest.raises(TypeError, match="CodeState"):
        frame_sizes.merge(str(tmp_path), key)
    (tmp_path / frame_sizes.STATE_FILE).write_bytes(b"\x00 not a pickle")
    with pytest.raises(pickle.UnpicklingError):
        frame_sizes.merge(str(tmp_path), key)
    assert key not in pgo.get_code_state() or not pgo.get_code_state()[key].automatic_dynamic
