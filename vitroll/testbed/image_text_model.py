"""The image–text testbed model: a tiny transformers ``CLIPModel`` trained on :mod:`vitroll.testbed.shape_pairs`.

It lives in ``clip_shapes/`` next to this file, a folder ``transformers`` reads as it is (``config.json``,
``model.safetensors``, ``tokenizer.json``, ``preprocessor_config.json``) with its ``MODEL_CARD.md``, written by
``scripts/train_image_text.py``. Trained to score each image against the prompts naming the four shapes, with
the two shapes present as the answer, its image–text logit for a prompt depends on where the named shape is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vitroll.errors import ModelLoadError
from vitroll.testbed.shape_pairs import PairsConfig, WORDS
from vitroll.testbed.text import SPECIAL_TOKENS, word_tokenizer

if TYPE_CHECKING:
    from transformers import BertTokenizer, CLIPImageProcessor, CLIPModel

FOLDER = Path(__file__).with_name("clip_shapes")
"""Where the shipped image–text testbed model lives."""

VOCABULARY = (*SPECIAL_TOKENS, *WORDS)
"""The text tower's WordPiece vocabulary: every word is one token; ``[SEP]`` ends a text and is its pooled token."""

TEXT_ARCHITECTURE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                         max_position_embeddings=16)
VISION_ARCHITECTURE = dict(image_size=PairsConfig().image_size, patch_size=8, hidden_size=128, num_hidden_layers=4,
                           num_attention_heads=4, intermediate_size=256, hidden_act="gelu")
PROJECTION_DIM = 64


def build_pairs_tokenizer() -> "BertTokenizer":
    """The text tower's tokenizer: one token per word of :data:`VOCABULARY`, ``[CLS] … [SEP]``."""
    return word_tokenizer(VOCABULARY)


def build_pairs_processor() -> "CLIPImageProcessor":
    """The image preprocessing: the testbed's images at their own size, normalised with mean = std = 0.5."""
    from transformers import CLIPImageProcessor

    size = VISION_ARCHITECTURE["image_size"]
    return CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size},
                              image_mean=[0.5] * 3, image_std=[0.5] * 3)


def build_pairs_model() -> "CLIPModel":
    """The testbed architecture, randomly initialised."""
    from transformers import CLIPConfig, CLIPModel

    text = dict(TEXT_ARCHITECTURE, vocab_size=len(VOCABULARY), pad_token_id=VOCABULARY.index("[PAD]"),
                bos_token_id=VOCABULARY.index("[CLS]"), eos_token_id=VOCABULARY.index("[SEP]"))
    config = CLIPConfig(text_config=text, vision_config=VISION_ARCHITECTURE, projection_dim=PROJECTION_DIM)
    return CLIPModel(config)


def load_pairs_model(device: str = "cpu") -> tuple["CLIPModel", "BertTokenizer"]:
    """The shipped image–text testbed model in eval mode on ``device``, and its tokenizer."""
    from transformers import AutoTokenizer, CLIPModel

    if not (FOLDER / "model.safetensors").is_file():
        raise ModelLoadError(f"{FOLDER}: the image–text testbed weights are missing; run scripts/train_image_text.py")
    return CLIPModel.from_pretrained(FOLDER).eval().to(device), AutoTokenizer.from_pretrained(FOLDER)
