"""Decoder-only language models beyond GPT-2 (Llama, Qwen2/3, Mistral, Gemma, Phi, GPT-NeoX, OPT) and their
``…ForSequenceClassification`` heads, built from small configs: token scores (B, L) against float64 references
computed by hand from the eager attentions of each text alone, with padding on either side."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers

import vitroll
from test_text import IDS, IDS_REAL, MASK, chain, compare, eager_alone, left_padded
from vitroll.io.text import TokenBatch
from vitroll.methods.base import model_logits

SMALL = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             initializer_range=0.3, attn_implementation="sdpa")
GROUPED = dict(SMALL, num_key_value_heads=2)  # grouped-query attention: two query heads per key/value head
CONFIGS = {
    "llama": lambda **extra: transformers.LlamaConfig(**GROUPED, **extra),
    "qwen2": lambda **extra: transformers.Qwen2Config(**GROUPED, **extra),
    "qwen3": lambda **extra: transformers.Qwen3Config(**GROUPED, head_dim=8, **extra),
    "mistral": lambda **extra: transformers.MistralConfig(**GROUPED, sliding_window=3, **extra),  # texts are longer
    "gemma": lambda **extra: transformers.GemmaConfig(**dict(SMALL, num_key_value_heads=1), head_dim=8, **extra),
    "phi": lambda **extra: transformers.PhiConfig(**SMALL, **extra),
    "gpt_neox": lambda **extra: transformers.GPTNeoXConfig(**SMALL, **extra),
    "opt": lambda **extra: transformers.OPTConfig(
        vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32,
        init_std=0.3, attn_implementation="sdpa", **extra),
}


def decoder(kind: str, head: str = "ForCausalLM", **extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    config = CONFIGS[kind](**extra)
    cls = transformers.MODEL_FOR_CAUSAL_LM_MAPPING[type(config)] if head == "ForCausalLM" else (
        transformers.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING[type(config)])
    return cls(config).eval()


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_rollout_of_each_decoder_equals_the_eager_reference_of_each_text_alone(kind, padding):
    model = decoder(kind)
    ids, mask = (torch.tensor(IDS), torch.tensor(MASK)) if padding == "right" else left_padded()
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], len(text) - 1) for text in IDS_REAL]
    compare(scores, expected, mask)
    with torch.no_grad():
        log_probabilities = model_logits(model, TokenBatch(ids, mask))
    for b, text in enumerate(IDS_REAL):
        np.testing.assert_allclose(log_probabilities[b].numpy(), eager_alone(model, text)[2].numpy(), atol=1e-5)
