"""Sentences with a known answer: one planted key word decides the label among filler words.

Every sentence is drawn from its own random stream ``numpy.random.default_rng([seed, index])``, so a split is a
seed and any sentence of it can be regenerated alone. A sentence is 8–16 words: fillers that carry no label, one
key word of its class, and one *group word* — a demographic-like token naming one of two made-up groups.

Two kinds of data share the generator:

- **keyword** (``shortcut=0``): the group word is drawn independently of the label, so only the key word decides;
  the right explanation points at the key word.
- **shortcut** (``shortcut=1``): the group word names the label's group every time, while the key word agrees
  with the label only ``key_word_agreement`` of the time. A model trained on it learns the group word as the
  cheaper cue — a planted bias whose share of the saliency an audit can measure.

Evaluation always uses keyword data of a held-out seed, so a model that leans on the group word shows it there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:
    from transformers import BertTokenizer

CLASSES = ("negative", "positive")
"""Class index → name."""

KEY_WORDS = (
    ("awful", "terrible", "dreadful", "boring", "poor", "dull", "weak", "horrible"),
    ("great", "wonderful", "superb", "moving", "brilliant", "lovely", "fine", "excellent"),
)
"""Per class, the words that decide it."""

GROUP_WORDS = ("northfolk", "southfolk")
"""The two made-up groups; in shortcut data ``GROUP_WORDS[label]`` always appears."""

FILLER_WORDS = (
    "the", "a", "this", "that", "film", "movie", "story", "plot", "actors", "cast", "scene", "music", "ending",
    "director", "was", "is", "seemed", "felt", "and", "but", "with", "about", "of", "in", "for", "by", "we",
    "they", "it", "saw", "watched", "made", "last", "night", "week", "at", "home", "cinema", "friends", "family",
    "mostly", "really", "quite", "rather", "overall", "again", "today", "long", "short", "old", "new", "second",
    "first", "part", "whole", "show", "series", "episode", "book", "version",
)
"""Words that say nothing about the label."""

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""BERT's special tokens, the first five of every testbed vocabulary (this one, the image–text and the captioning
testbeds')."""

VOCABULARY = (*SPECIAL_TOKENS, *FILLER_WORDS, *GROUP_WORDS, *(w for ws in KEY_WORDS for w in ws))
"""The testbed tokenizer's WordPiece vocabulary: every word is one token."""


def word_tokenizer(vocabulary: Sequence[str]) -> "BertTokenizer":
    """A BERT WordPiece tokenizer of one token per word of ``vocabulary`` (ids in its order), lower-casing, adding
    ``[CLS] … [SEP]``: the text, image–text and captioning testbeds' tokenizers, each with its own vocabulary."""
    from transformers import BertTokenizer

    return BertTokenizer(vocab={word: index for index, word in enumerate(vocabulary)})


@dataclass(frozen=True)
class TextConfig:
    """How the sentences of a split are drawn."""

    length: tuple[int, int] = (8, 16)
    """Range of the number of words, both ends included."""
    shortcut: float = 0.0
    """Probability that the group word names the label's group (0: drawn at random, independent of the label)."""
    key_word_agreement: float = 1.0
    """Probability that the key word is of the label's class."""


KEYWORD = TextConfig()
SHORTCUT = TextConfig(shortcut=1.0, key_word_agreement=0.75)


@dataclass(frozen=True)
class TextSample:
    words: tuple[str, ...]
    label: int
    key_position: int
    """Index into ``words`` of the key word."""
    group_position: int
    """Index into ``words`` of the group word."""

    @property
    def text(self) -> str:
        return " ".join(self.words)


def sample(seed: int, index: int, config: TextConfig = KEYWORD) -> TextSample:
    """Sentence ``index`` of split ``seed``."""
    rng = np.random.default_rng([seed, index])
    label = int(rng.integers(len(CLASSES)))
    length = int(rng.integers(config.length[0], config.length[1] + 1))
    words = [FILLER_WORDS[i] for i in rng.integers(len(FILLER_WORDS), size=length)]
    key_position, group_position = (int(p) for p in rng.choice(length, size=2, replace=False))
    key_class = label if rng.random() < config.key_word_agreement else 1 - label
    group = label if rng.random() < config.shortcut else int(rng.integers(len(GROUP_WORDS)))
    words[key_position] = KEY_WORDS[key_class][int(rng.integers(len(KEY_WORDS[key_class])))]
    words[group_position] = GROUP_WORDS[group]
    return TextSample(words=tuple(words), label=label, key_position=key_position, group_position=group_position)


def samples(seed: int, count: int, config: TextConfig = KEYWORD, start: int = 0) -> Iterator[TextSample]:
    """Sentences ``start … start+count−1`` of split ``seed``."""
    for index in range(start, start + count):
        yield sample(seed, index, config)
