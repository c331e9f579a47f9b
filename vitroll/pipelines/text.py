"""Explaining many texts: batches through a method, token and word scores, and the files people read
(``text.html``, ``scores.json``, ``scores.csv``)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from torch import nn

from vitroll.adapters.transformers_text import prediction_kind
from vitroll.io.text import EncodedText, TextReadout, TokenBatch, encode_texts, is_id_not_in_tokenizer
from vitroll.io.writing import write_atomic
from vitroll.maps import as_numpy
from vitroll.methods import method_named
from vitroll.methods.gradients import resolve_targets
from vitroll.methods.text_batch import Position, text_batch
from vitroll.models import class_names
from vitroll.templates import render
from vitroll.text_view import HIGH, LOW, Segment, quoted_token, segments
from vitroll.words import WordScore, word_scores

TOP_WORDS = 5
PREDICTION_KINDS = ("prediction", "next token", "masked token")
"""What a text's prediction can be (its key in ``scores.json``: spaces as ``_``)."""


@dataclass(frozen=True)
class TextResult:
    """One explained text."""

    encoded: EncodedText
    scores: list[float]
    """One per token of ``encoded`` (its real tokens)."""
    words: list[WordScore]
    prediction: Optional[str]
    """The predicted class, or a language model's most likely next token; None for a bare model."""
    probability: Optional[float]
    target: Optional[str]
    """What a gradient method explained (the class, next token or masked token); None for attention-only methods."""
    prediction_kind: str = "prediction"
    """What :attr:`prediction` is: ``"prediction"`` (a class), ``"next token"`` or ``"masked token"``."""

    @property
    def segments(self) -> list[Segment]:
        return segments(self.encoded, self.scores)

    @property
    def shown_prediction(self) -> Optional[str]:
        """:attr:`prediction` as it is shown: a token quoted (:func:`~vitroll.text_view.quoted_token`), a class or an id
        the tokenizer does not have (:func:`~vitroll.io.text.id_not_in_tokenizer`) as it is."""
        return self._shown(self.prediction)

    @property
    def shown_target(self) -> Optional[str]:
        """:attr:`target` as it is shown, as :attr:`shown_prediction`."""
        return self._shown(self.target)

    def _shown(self, name: Optional[str]) -> Optional[str]:
        if name is None or self.prediction_kind == "prediction" or is_id_not_in_tokenizer(name):
            return name
        return quoted_token(name)

    @property
    def top_words(self) -> list[WordScore]:
        return sorted(self.words, key=lambda word: -word.score)[:TOP_WORDS]

    def as_record(self) -> dict[str, Any]:
        """The result as ``scores.json`` holds it."""
        return {
            "text": self.encoded.text, self.prediction_kind.replace(" ", "_"): self.prediction,
            "probability": self.probability, "explained": self.target,
            "tokens": [{"token": token, "decoded": decoded, "start": start, "end": end, "score": score,
                        "word_id": word_id}
                       for token, decoded, (start, end), score, word_id in zip(
                           self.encoded.tokens, self.encoded.decoded or self.encoded.tokens, self.encoded.offsets,
                           self.scores, self.encoded.word_ids)],
            "words": [{"word": w.word, "start": w.start, "end": w.end, "score": w.score, "pieces": w.pieces}
                      for w in self.words],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "TextResult":
        """The result that :meth:`as_record` gave ``record`` (read back from a manifest)."""
        tokens = record["tokens"]
        decoded = [t["decoded"] for t in tokens] if all("decoded" in t for t in tokens) else None
        encoded = EncodedText(record["text"], [t["token"] for t in tokens], [t["word_id"] for t in tokens],
                              [(t["start"], t["end"]) for t in tokens], decoded)
        words = [WordScore(w["word"], w["start"], w["end"], w["score"], w["pieces"]) for w in record["words"]]
        kind = next(kind for kind in PREDICTION_KINDS if kind.replace(" ", "_") in record)
        return cls(encoded, [t["score"] for t in tokens], words, record[kind.replace(" ", "_")],
                   record["probability"], record["explained"], kind)


def _name(names: Optional[list[str]], index: int) -> str:
    return names[index] if names is not None and index < len(names) else str(index)


def explain_texts(model: nn.Module, texts: Sequence[str], tokenizer: Any, *, method: str = "rollout",
                  options: Optional[Mapping[str, object]] = None, batch_size: int = 16,
                  readout: Optional[TextReadout] = None, position: Optional[Position] = None) -> Iterator[TextResult]:
    """Explain ``texts`` with ``method`` in batches of ``batch_size``; one :class:`TextResult` per text, in order.

    ``options`` are the method's; ``readout`` and ``position`` choose the explained row
    (:class:`~vitroll.io.text.TokenBatch`). A language model's "classes" are its tokenizer's tokens."""
    chosen = method_named(method)
    options = chosen.check(dict(options or {}))
    names = class_names(model)
    kind = prediction_kind(model)
    for first in range(0, len(texts), batch_size):
        input_ids, attention_mask, encoded = encode_texts(tokenizer, texts[first:first + batch_size])
        batch = text_batch(model, TokenBatch(input_ids, attention_mask), readout=readout, position=position)
        saliency = chosen(model, batch, **options)
        scores = as_numpy(saliency.maps)
        probabilities = None if saliency.logits is None else as_numpy(saliency.logits.float().softmax(dim=-1))
        targets = None
        if "target_class" in chosen.options and saliency.logits is not None:  # occlusion too, without gradients
            targets = resolve_targets(saliency.logits, options.get("target_class")).tolist()
        for row, each in enumerate(encoded):
            real = scores[row][attention_mask[row].bool().numpy()].tolist()
            prediction = probability = target = None
            if probabilities is not None:
                best = int(probabilities[row].argmax())
                prediction, probability = _name(names, best), float(probabilities[row, best])
            if targets is not None:
                target = _name(names, int(targets[row]))
            yield TextResult(each, real, word_scores(real, each), prediction, probability, target, kind)


def write_text_report(out_dir: "str | Path", results: Sequence[TextResult], *, model: str, method: str,
                      indices: Optional[Sequence[int]] = None, failures: Sequence[Mapping[str, Any]] = ()
                      ) -> tuple[Path, Path, Path]:
    """Write ``text.html`` (shaded tokens and predictions), ``scores.json`` (every token and word with its score) and
    ``scores.csv`` (one row per token and per word) into ``out_dir``; returns their paths.

    ``indices`` are the results' places among the texts given (0-based; default 0, 1, …): the ``text_index`` of the
    CSV and the ``#N`` (index + 1) of the page. ``failures`` are the texts that could not be explained, each a
    mapping with ``index``, ``text`` and ``error``: listed on the page and under ``failed`` in ``scores.json``."""
    out_dir = Path(out_dir)
    indices = list(range(len(results))) if indices is None else list(indices)
    if len(indices) != len(results):
        raise ValueError(f"{len(indices)} indices for {len(results)} results")
    failures = [{"index": failure["index"], "text": failure["text"], "error": failure["error"]} for failure in failures]
    html = render("text.html.j2",
        numbered=list(zip(indices, results)), failures=failures, model=model, method=method,
        low="#%02x%02x%02x" % LOW, high="#%02x%02x%02x" % HIGH)
    records = [{"index": text_index, **result.as_record()} for text_index, result in zip(indices, results)]
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(["text_index", "level", "index", "piece", "decoded", "start", "end", "score"])
    for record in records:
        for level, key, piece, decoded in (("token", "tokens", "token", "decoded"), ("word", "words", "word", "word")):
            for index, entry in enumerate(record[key]):
                writer.writerow([record["index"], level, index, entry[piece], entry[decoded], entry["start"],
                                 entry["end"], f"{entry['score']:.6g}"])
    paths = out_dir / "text.html", out_dir / "scores.json", out_dir / "scores.csv"
    write_atomic(paths[0], html.encode())
    write_atomic(paths[1], json.dumps({"model": model, "method": method, "texts": records, "failed": failures},
                                      indent=1).encode())
    write_atomic(paths[2], table.getvalue().encode())
    return paths
