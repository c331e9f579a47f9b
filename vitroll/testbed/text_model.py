"""The text testbed models: tiny BERT classifiers trained on :mod:`vitroll.testbed.text`, shipped with vitroll.

Each lives in a folder next to this file that ``transformers`` reads as it is (``config.json``,
``model.safetensors``, ``tokenizer.json``) with its ``MODEL_CARD.md``, written by ``scripts/train_text.py``:

- ``keyword``: trained on keyword data — the planted key word decides, the group word is noise;
- ``shortcut``: trained on shortcut data — the group word always names the label's group, the key word only
  mostly agrees, so the model leans on the group word (the planted bias).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from vitroll.errors import ModelLoadError
from vitroll.testbed.text import CLASSES, VOCABULARY, word_tokenizer

if TYPE_CHECKING:
    from transformers import BertForSequenceClassification, BertTokenizer

TextTestbed = Literal["keyword", "shortcut"]

FOLDERS: dict[str, Path] = {name: Path(__file__).with_name(f"text_{name}") for name in ("keyword", "shortcut")}
"""Where each shipped text testbed model lives."""

ARCHITECTURE = dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, max_position_embeddings=32,
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
)
"""``BertConfig`` arguments of the testbed models (besides the vocabulary and the labels)."""


def build_text_tokenizer() -> "BertTokenizer":
    """The testbed's WordPiece tokenizer: one token per word of :data:`VOCABULARY`, lower-cased."""
    return word_tokenizer(VOCABULARY)


def build_text_model() -> "BertForSequenceClassification":
    """The testbed architecture, randomly initialised, with the class names as its labels."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=len(VOCABULARY), pad_token_id=VOCABULARY.index("[PAD]"), num_labels=len(CLASSES),
        id2label=dict(enumerate(CLASSES)), label2id={name: index for index, name in enumerate(CLASSES)},
        **ARCHITECTURE,
    )
    return BertForSequenceClassification(config)


def load_text_testbed(name: TextTestbed,
                      device: str = "cpu") -> tuple["BertForSequenceClassification", "BertTokenizer"]:
    """A shipped text testbed model in eval mode on ``device``, and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if name not in FOLDERS:
        raise ModelLoadError(f"no text testbed model {name!r}; there are: {', '.join(FOLDERS)}")
    folder = FOLDERS[name]
    if not (folder / "model.safetensors").is_file():
        raise ModelLoadError(f"{folder}: the text testbed weights are missing; run scripts/train_text.py")
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    return model.eval().to(device), AutoTokenizer.from_pretrained(folder)
