"""The captioning testbed model: a tiny transformers ``VisionEncoderDecoderModel`` (ViT encoder, BERT decoder)
trained on :mod:`vitroll.testbed.shape_pairs` to write the captions of :mod:`vitroll.testbed.captions`.

It lives in ``caption_shapes/`` next to this file, a ``save_pretrained`` folder (``config.json``,
``generation_config.json``, ``model.safetensors``, tokenizer files, ``preprocessor_config.json``) with its
``MODEL_CARD.md``, written by ``scripts/train_captioner.py``. ``model.generate(pixel_values, max_new_tokens=8)``
captions greedily; each caption names the image's two shapes, so each shape word's map has a mask to point into.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vitroll.errors import ModelLoadError
from vitroll.testbed.captions import CAPTION_WORDS
from vitroll.testbed.shape_pairs import PairsConfig
from vitroll.testbed.text import SPECIAL_TOKENS, word_tokenizer

if TYPE_CHECKING:
    from transformers import BertTokenizer, ViTImageProcessor, VisionEncoderDecoderModel

FOLDER = Path(__file__).with_name("caption_shapes")
"""Where the shipped captioning testbed model lives."""

VOCABULARY = (*SPECIAL_TOKENS, *CAPTION_WORDS)
"""The decoder's WordPiece vocabulary: every caption word is one token; ``[CLS]`` starts a caption, ``[SEP]`` ends
it."""
PAD, CLS, SEP = (VOCABULARY.index(token) for token in ("[PAD]", "[CLS]", "[SEP]"))

ENCODER_ARCHITECTURE = dict(image_size=PairsConfig().image_size, patch_size=8, hidden_size=128, num_hidden_layers=4,
                            num_attention_heads=4, intermediate_size=256)
DECODER_ARCHITECTURE = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                            max_position_embeddings=16)
MAX_NEW_TOKENS = 8
"""Enough for the longest caption and its ``[SEP]``."""


def build_caption_tokenizer() -> "BertTokenizer":
    """The decoder's tokenizer: one token per word of :data:`VOCABULARY`."""
    return word_tokenizer(VOCABULARY)


def build_caption_processor() -> "ViTImageProcessor":
    """The image preprocessing: the testbed's images at their own size, normalised with mean = std = 0.5."""
    from transformers import ViTImageProcessor

    size = ENCODER_ARCHITECTURE["image_size"]
    return ViTImageProcessor(size={"height": size, "width": size}, image_mean=[0.5] * 3, image_std=[0.5] * 3)


def build_caption_model() -> "VisionEncoderDecoderModel":
    """The testbed architecture, randomly initialised, set up to caption greedily from ``[CLS]`` to ``[SEP]``."""
    from transformers import (BertConfig, GenerationConfig, VisionEncoderDecoderConfig, VisionEncoderDecoderModel,
                              ViTConfig)

    encoder = ViTConfig(**ENCODER_ARCHITECTURE)
    decoder = BertConfig(vocab_size=len(VOCABULARY), is_decoder=True, add_cross_attention=True, pad_token_id=PAD,
                         bos_token_id=CLS, eos_token_id=SEP, **DECODER_ARCHITECTURE)
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = CLS, PAD, SEP
    model = VisionEncoderDecoderModel(config=config)
    model.generation_config = GenerationConfig(decoder_start_token_id=CLS, bos_token_id=CLS, pad_token_id=PAD,
                                               eos_token_id=SEP, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                                               num_beams=1)
    return model


def load_caption_model(device: str = "cpu") -> tuple["VisionEncoderDecoderModel", "BertTokenizer"]:
    """The shipped captioning testbed model in eval mode on ``device``, and its tokenizer."""
    from transformers import AutoTokenizer, VisionEncoderDecoderModel

    if not (FOLDER / "model.safetensors").is_file():
        raise ModelLoadError(f"{FOLDER}: the captioning testbed weights are missing; run scripts/train_captioner.py")
    return VisionEncoderDecoderModel.from_pretrained(FOLDER).eval().to(device), AutoTokenizer.from_pretrained(FOLDER)
