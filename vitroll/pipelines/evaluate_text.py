"""Measure methods on the text testbed: do the token scores find the planted key word, and a planted bias?

Every sentence of :mod:`vitroll.testbed.text` has one key word that decides its label and one group word. Per
sentence and method, the scores are merged into words (:func:`vitroll.words.word_scores`) and scored:

- ``pointing_game``: the best-scoring word is the key word;
- ``key_share`` / ``group_share``: the share of the (non-negative) word scores on the key word / the group word —
  the group word's share is how much a method says the model leans on the group: the measured bias;
- ``deletion_auc`` / ``insertion_auc``: the model's probability of its predicted class as words are replaced by
  ``[MASK]`` best-first (deletion, lower is more faithful), or as they are put back best-first into an all-``[MASK]``
  sentence (insertion, higher is more faithful); the area under each curve over the fraction of words, ties broken
  by position.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import nn

from vitroll.errors import InputValueError
from vitroll.io.text import encode_texts
from vitroll.methods import check_shared_options, method_named
from vitroll.methods.base import model_device
from vitroll.testbed.text import KEYWORD, TextSample, samples
from vitroll.words import word_scores

TEXT_METRICS = {
    "pointing_game": "pointing game on the key word ↑",
    "key_share": "share on the key word ↑",
    "group_share": "share on the group word",
    "deletion_auc": "deletion AUC ↓",
    "insertion_auc": "insertion AUC ↑",
}
"""Per-sentence metric columns and their table headings."""


def text_sentences(count: int, seed: int = 3) -> list[TextSample]:
    """``count`` keyword sentences of split ``seed`` (3: the shipped models' held-out test split)."""
    return list(samples(seed, count, KEYWORD))


def evaluate_text(model: nn.Module, tokenizer: Any, sentences: Sequence[TextSample], methods: Sequence[str], *,
                  method_options: Optional[Mapping[str, object]] = None, batch_size: int = 64) -> list[dict[str, Any]]:
    """One row per sentence and method with the :data:`TEXT_METRICS` (see the module docstring).

    Parameters
    ----------
    model : nn.Module
        A transformers sequence classifier of a registered text family (its output has ``logits``).
    tokenizer
        Its fast tokenizer; its ``mask_token_id`` replaces deleted words.
    sentences : sequence of TextSample
    methods : sequence of str
        Method names; each runs as ``method(model, input_ids, attention_mask=…)``.
    method_options : mapping, optional
        Options for several methods at once: each method gets those it takes (an option none takes is an error).
    """
    runs = {name: method_named(name) for name in methods}
    shared = check_shared_options(runs.values(), method_options or {})
    rows = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start:start + batch_size]
        input_ids, attention_mask, encoded = encode_texts(tokenizer, [item.text for item in chunk])
        for method in runs:  # a method named twice runs once
            saliency = runs[method](model, input_ids, attention_mask=attention_mask, **runs[method].among(shared))
            scores = saliency.maps.float().cpu().numpy()
            predicted = saliency.logits.argmax(-1).cpu()
            words = [np.array([w.score for w in word_scores(scores[i, :len(e.tokens)], e)])
                     for i, e in enumerate(encoded)]
            curves = _deletion_insertion(model, input_ids, attention_mask, encoded, words, predicted,
                                         tokenizer.mask_token_id)
            for i, item in enumerate(chunk):
                if len(words[i]) != len(item.words):
                    raise InputValueError(f"{item.text!r}: the tokenizer gives {len(words[i])} words, the sentence has "
                                          f"{len(item.words)}")
                mass = np.clip(words[i], 0, None)
                total = mass.sum()
                rows.append(dict(
                    sentence=start + i, method=method, text=item.text, label=item.label, predicted=int(predicted[i]),
                    pointing_game=float(int(np.argmax(words[i])) == item.key_position),
                    key_share=float(mass[item.key_position] / total) if total > 0 else 0.0,
                    group_share=float(mass[item.group_position] / total) if total > 0 else 0.0,
                    deletion_auc=curves[i][0], insertion_auc=curves[i][1],
                ))
    return rows


@torch.no_grad()
def _deletion_insertion(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, encoded,
                        words: list[np.ndarray], predicted: torch.Tensor, mask_id: int) -> list[tuple[float, float]]:
    """Per sentence, (deletion AUC, insertion AUC) of the predicted class's probability, words taken best-first."""
    variants, owners = [], []
    for i, (scores, text) in enumerate(zip(words, encoded)):
        order = np.argsort(-scores, kind="stable")
        pieces = [[t for t, w in enumerate(text.word_ids) if w == word] for word in range(len(scores))]
        for kind in ("deletion", "insertion"):
            for step in range(len(scores) + 1):
                ids = input_ids[i].clone()
                chosen = [t for word in order[:step] for t in pieces[word]]
                if kind == "deletion":
                    ids[chosen] = mask_id
                else:
                    kept = [t for t in range(len(text.tokens)) if text.word_ids[t] is None or t in chosen]
                    masked = [t for t in range(len(text.tokens)) if t not in kept]
                    ids[masked] = mask_id
                variants.append(ids)
                owners.append((i, kind))
    device = model_device(model)
    ids = torch.stack(variants).to(device)
    mask = attention_mask[[i for i, _ in owners]].to(device)
    probabilities = torch.cat([model(input_ids=part_ids, attention_mask=part_mask).logits.float().softmax(-1)
                               for part_ids, part_mask in zip(ids.split(512), mask.split(512))]).cpu()
    result = []
    for i in range(len(words)):
        curve = {kind: np.array([probabilities[k, predicted[i]].item() for k, owner in enumerate(owners)
                                 if owner == (i, kind)]) for kind in ("deletion", "insertion")}
        fractions = np.linspace(0, 1, len(words[i]) + 1)
        result.append((float(np.trapezoid(curve["deletion"], fractions)),
                       float(np.trapezoid(curve["insertion"], fractions))))
    return result
