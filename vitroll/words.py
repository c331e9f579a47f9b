"""Token scores → word scores: sub-word pieces merged into the words they were cut from."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Sequence

from vitroll.errors import InputValueError
from vitroll.io.text import EncodedText


@dataclass(frozen=True)
class WordScore:
    """One word of a text and its score.

    Attributes
    ----------
    word : str
        The word as it stands in the text (``text[start:end]``).
    start, end : int
        Its character span in the text.
    score : float
        The **sum** of its pieces' scores: rollout and its relatives give each token a share of one mass, so a word
        cut into three pieces holds what its three pieces hold (a mean would favour words the vocabulary knows whole).
    pieces : int
        How many tokens it was cut into.
    """

    word: str
    start: int
    end: int
    score: float
    pieces: int


def word_scores(scores: Sequence[float], encoded: EncodedText) -> list[WordScore]:
    """Merge the scores of one text's pieces into its words, using the tokenizer's ``word_ids`` and character offsets.

    Parameters
    ----------
    scores : sequence of float, length len(encoded.tokens)
        One score per real token, in the text's token order (a row of (B, L) scores with its padding dropped).
    encoded : EncodedText
        The text as its tokenizer split it.

    Returns
    -------
    list of WordScore
        In text order. Special tokens (``[CLS]``, ``[SEP]``, ``<|endoftext|>``: no word id) are not words and are left
        out; their scores stay in the token scores. A word's span is its pieces' spans joined, white space that
        byte-level BPE counts into a piece (GPT-2's leading space) and invisible formatting characters trimmed, and
        combining marks no token covers (accents an uncased normaliser stripped) kept with their letter; a "word" of
        only white space is none, and words the tokenizer cut at a combining mark (byte-level BPE splits a decomposed
        ``"e\u0301te"`` into ``"e"``, ``"\u0301"``, ``"te"``) are one, as Unicode's word boundaries have it.

    Raises
    ------
    ValueError
        When ``scores`` and the tokens differ in length.
    """
    if len(scores) != len(encoded.tokens):
        raise InputValueError(f"{len(scores)} scores for {len(encoded.tokens)} tokens")
    spans: dict[int, list[int]] = {}
    totals: dict[int, float] = {}
    counts: dict[int, int] = {}
    for score, word_id, (start, end) in zip(scores, encoded.word_ids, encoded.offsets):
        if word_id is None:
            continue
        span = spans.setdefault(word_id, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
        totals[word_id] = totals.get(word_id, 0.0) + float(score)
        counts[word_id] = counts.get(word_id, 0) + 1
    words: list[WordScore] = []
    for word_id, (start, end) in sorted(spans.items(), key=lambda item: item[1][0]):
        end = encoded.past_marks(end)
        while start < end and _blank(encoded.text[start]):
            start += 1
        while end > start and _blank(encoded.text[end - 1]):
            end -= 1
        if start == end:  # white space or an invisible mark on its own (GPT-2's "\t", a right-to-left mark)
            continue
        if words and words[-1].end == start and (_mark(encoded.text[start]) or (
                _mark(encoded.text[start - 1]) and encoded.text[start].isalpha())):
            before = words.pop()  # one word cut at an accent ("e", "\u0301", "te"), as Unicode's word breaks have it
            start, totals[word_id], counts[word_id] = (before.start, before.score + totals[word_id],
                                                       before.pieces + counts[word_id])
        words.append(WordScore(encoded.text[start:end], start, end, totals[word_id], counts[word_id]))
    return words


def _blank(character: str) -> bool:
    """White space, or an invisible formatting character (U+200F RIGHT-TO-LEFT MARK, U+FEFF): never a word's edge."""
    return character.isspace() or unicodedata.category(character) == "Cf"


def _mark(character: str) -> bool:
    """A combining mark (U+0301 COMBINING ACUTE ACCENT): part of the letter before it."""
    return unicodedata.category(character).startswith("M")
