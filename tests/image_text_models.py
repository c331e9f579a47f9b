"""Small image–text models for the tests: transformers CLIPModel, SiglipModel, MetaClip2Model and Aimv2Model from tiny
configs
(2 vision layers of 2 heads on 32 × 32 images, patch 8), with peaked attention, and a CLIP tokenizer of 56 tokens;
open_clip models over such a timm trunk (SigLIP's, EVA02's)."""

from __future__ import annotations

import json
import math
import string
from pathlib import Path
from contextlib import contextmanager
from typing import Iterator
from unittest import mock

import open_clip
import timm
import torch
import transformers

VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
              patch_size=8)
BOS, EOS = 53, 54
TEXT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100,
            max_position_embeddings=16, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=EOS)
HF_MODELS = {"clip": (transformers.CLIPModel, transformers.CLIPConfig),
             "siglip": (transformers.SiglipModel, transformers.SiglipConfig),
             "metaclip2": (transformers.MetaClip2Model, transformers.MetaClip2Config),
             "aimv2": (transformers.Aimv2Model, transformers.Aimv2Config)}


def sharpened(model: torch.nn.Module, names: tuple[str, ...]) -> torch.nn.Module:
    """Queries and keys drawn larger (peaked attention), so that maps tell patches apart."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in names):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.4)
    return model.eval()


def hf_model(name: str, implementation: str = "sdpa") -> torch.nn.Module:
    model_class, config_class = HF_MODELS[name]
    torch.manual_seed(0)
    config = config_class(vision_config=VISION, text_config=TEXT, attn_implementation=implementation)
    model = model_class(config)
    if name == "aimv2":  # at its initial scale this tiny AIMv2's chefer maps differ little between texts
        with torch.no_grad():
            model.logit_scale.fill_(math.log(config.max_logit_scale))
    return sharpened(model, ("q_proj.weight", "k_proj.weight", "in_proj_weight"))


def clip_tokenizer(folder: Path) -> transformers.CLIPTokenizer:
    """A CLIP tokenizer with a tiny vocabulary: the letters, the letters ending a word, start and end of text
    (its files are written to ``folder``)."""
    letters = list(string.ascii_lowercase)
    vocab = {token: index for index, token in enumerate(letters + [f"{c}</w>" for c in letters])}
    vocab.update({"<|startoftext|>": BOS, "<|endoftext|>": EOS})
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))


OPEN_CLIP_TIMM_TRUNKS = {"siglip": ("vit_base_patch16_siglip_224", "map", "none"),
                         "eva02": ("eva02_base_patch16_clip_224", "token", None)}
"""open_clip towers over a timm trunk, as ViT-B-16-SigLIP and EVA02-B-16 configure them: the trunk's architecture,
``timm_pool`` and ``timm_proj``."""


@contextmanager
def tiny_timm_trunks(**sizes: object) -> Iterator[None]:
    """Within it, open_clip's ``TimmModel`` builds its trunk with ``sizes`` (``embed_dim=32, depth=2``, …) added to
    its own arguments: open_clip passes timm no sizes, and a timm model registered for the tests would be seen by
    every test that walks timm's registry."""
    create_model = timm.create_model

    def tiny(model_name: str, **kwargs: object) -> torch.nn.Module:
        return create_model(model_name, **sizes, **kwargs)

    with mock.patch.object(open_clip.timm_model.timm, "create_model", tiny):
        yield


def open_clip_timm_model(name: str) -> torch.nn.Module:
    """An open_clip ``CustomTextCLIP`` whose vision tower is a ``TimmModel`` over a 2-block timm trunk of width 32 on
    32 × 32 images (patch 8), pooled as the named config pools it (SigLIP's with a logit bias), sharpened."""
    architecture, pool, proj = OPEN_CLIP_TIMM_TRUNKS[name]
    torch.manual_seed(0)
    with tiny_timm_trunks(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2):
        model = open_clip.model.CustomTextCLIP(
            32, dict(timm_model_name=architecture, timm_pool=pool, timm_proj=proj, image_size=32),
            dict(context_length=7, vocab_size=100, width=32, heads=2, layers=1),
            init_logit_bias=-10 if name == "siglip" else None)
    return sharpened(model, ("qkv.weight", "q_proj.weight", "k_proj.weight", "kv.weight", "q.weight"))
