"""The model zoo: HF transformers models from tiny configs (no downloads), and timm's where timm is installed.
Used by tests/end_to_end/test_model_zoo.py and by benchmarks/zoo.py, so both run the same models."""

from __future__ import annotations

import importlib.util
import os

# name -> (model expression, inputs expression); `T` is transformers, `timm` is timm. Evaluated in the test kernels
# and here, so the tests and the benchmark run the same models.
INPUT_IDS = "dict(input_ids=torch.randint(0, 64, (2, 8)))"


HF_MODELS = {
    "gpt2": (
        "T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32))",
        INPUT_IDS,
    ),
    "llama": (
        "T.LlamaForCausalLM(T.LlamaConfig(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,"
        " hidden_size=32, intermediate_size=64, vocab_size=64, max_position_embeddings=32))",
        INPUT_IDS,
    ),
    "qwen2": (
        "T.Qwen2ForCausalLM(T.Qwen2Config(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,"
        " hidden_size=32, intermediate_size=64, vocab_size=64, max_position_embeddings=32))",
        INPUT_IDS,
    ),
    "mistral": (
        "T.MistralForCausalLM(T.MistralConfig(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,"
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
    "whisper": (
        "T.WhisperForConditionalGeneration(T.WhisperConfig(d_model=32, encoder_layers=1, decoder_layers=1,"
        " encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=64,"
        " num_mel_bins=8, max_source_positions=16, max_target_positions=32, pad_token_id=0, decoder_start_token_id=1))",
        "dict(input_features=torch.randn(2, 8, 32), decoder_input_ids=torch.randint(0, 64, (2, 4)))",
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


IMAGES = "dict(x=torch.randn(2, 3, 32, 32))"


TIMM_MODELS = {
    "timm_resnet18": ("timm.create_model('resnet18', pretrained=False, num_classes=10)", IMAGES),
    "timm_vit_tiny": (
        "timm.create_model('vit_tiny_patch16_224', pretrained=False, img_size=32, patch_size=8, num_classes=10)",
        IMAGES,
    ),
    "timm_convnext_atto": ("timm.create_model('convnext_atto', pretrained=False, num_classes=10)", IMAGES),
}


def zoo_models() -> dict[str, tuple[str, str]]:
    """The zoo on this machine: the HF models, and the timm ones where timm is installed (the GPU host has it)."""
    models = dict(HF_MODELS)
    if importlib.util.find_spec("timm") is not None:
        models.update(TIMM_MODELS)
    chosen = os.environ.get("JCC_TEST_ZOO")  # CI's oldest-torch lane: a lean zoo, one model per family
    if chosen:
        models = {name: models[name] for name in chosen.split(",") if name in models}
    return models


def first_tensor(out):  # noqa: ANN001, ANN201
    """The tensor a model returns first (HF returns tuples or ModelOutput dicts)."""
    import torch

    if torch.is_tensor(out):  # timm
        return out
    return out[0] if isinstance(out, (tuple, list)) else next(v for v in out.values() if torch.is_tensor(v))
