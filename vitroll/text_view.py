"""Text views: a text's characters shaded by its tokens' scores, for the terminal (rich) and for HTML pages."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Optional, Sequence

from rich.text import Text

from vitroll.io.names import single_line
from vitroll.io.text import EncodedText

LOW = (255, 255, 255)
HIGH = (230, 70, 40)
"""The shades of a score of 0 and of the text's highest score (white to a warm red, dark text readable on both)."""


@dataclass(frozen=True)
class Segment:
    """A stretch of a text as it is shown: a token's characters (or a special token's name), or the gap between
    tokens (white space, no score)."""

    text: str
    score: Optional[float]
    """The token's score (the sum of its pieces' for pieces that share characters); None for a gap."""
    relative: float
    """The score over the text's highest shown score, in [0, 1] (0 for a gap)."""
    special: bool
    """A special token ([CLS], [SEP], …), shown by its name: it has no characters in the text."""
    pieces: int = 1
    """How many tokens it shows: byte-level pieces of one character (an emoji cut into three bytes) are one segment,
    as is a piece with no characters of its own (a leading space the tokenizer trimmed off) with the next."""

    @property
    def colour(self) -> str:
        """``#rrggbb`` shade of :attr:`relative`."""
        return "#" + "".join(f"{round(low + (high - low) * self.relative):02x}" for low, high in zip(LOW, HIGH))


def segments(encoded: EncodedText, scores: Sequence[float]) -> list[Segment]:
    """One text's tokens as :class:`Segment` s, in order, with the white space between them as gaps.

    ``scores`` has one score per token of ``encoded`` (its real tokens). A character is shown once: pieces that
    share one (the bytes of an emoji or a CJK character) are one segment holding the sum of their scores, and a
    piece without characters (``Ġ`` whose space was trimmed) joins the next piece of its word (else the one before).
    Characters no token covers are shown too: combining marks with the token of their letter (accents an uncased
    normaliser stripped), others as gaps (white space; what the tokenizer dropped at the end of the text).
    Each segment is shaded relative to the highest one (scores below 0, which gradient attributions could give, shade
    as 0).
    """
    runs: list[_Run] = []
    carried = _Run(0, 0, 0.0, 0)  # pieces without characters, waiting for the next piece
    cursor = 0
    for token, score, word_id, (start, end) in zip(encoded.tokens, scores, encoded.word_ids, encoded.offsets):
        if word_id is None and start == end:
            runs.append(_Run(start, end, float(score), 1, name=token))
            continue
        if start == end:
            carried.add(float(score), 1)
            continue
        if start < cursor and runs and runs[-1].name is None:  # shares characters with the piece before
            runs[-1].end = max(runs[-1].end, end)
            runs[-1].add(float(score) + carried.score, 1 + carried.pieces)
        else:
            runs.append(_Run(max(start, cursor), end, float(score) + carried.score, 1 + carried.pieces))
        carried = _Run(0, 0, 0.0, 0)
        cursor = max(cursor, end)
    text_runs = [run for run in runs if run.name is None]
    if carried.pieces and text_runs:
        text_runs[-1].add(carried.score, carried.pieces)
    for run in text_runs:
        run.end = encoded.past_marks(run.end)
    top = max((run.score for run in runs), default=0.0)
    shown, cursor = [], 0
    for run in runs:
        relative = min(max(run.score / top, 0.0), 1.0) if top > 0 else 0.0
        if run.name is not None:
            shown.append(Segment(run.name, run.score, relative, special=True))
            continue
        if run.start > cursor:
            shown.append(Segment(encoded.text[cursor:run.start], None, 0.0, special=False))
        shown.append(Segment(encoded.text[run.start:run.end], run.score, relative, special=False, pieces=run.pieces))
        cursor = run.end
        if run is text_runs[-1] and cursor < len(encoded.text):  # what no token covers at the end is still text
            shown.append(Segment(encoded.text[cursor:], None, 0.0, special=False))
    return shown


@dataclass
class _Run:
    """Consecutive pieces shown as one segment: their character span, summed score and count; ``name`` for a
    special token."""

    start: int
    end: int
    score: float
    pieces: int
    name: Optional[str] = None

    def add(self, score: float, pieces: int) -> None:
        self.score, self.pieces = self.score + score, self.pieces + pieces


def terminal_text(shown: Sequence[Segment]) -> Text:
    """The segments as a rich :class:`~rich.text.Text`: each token on its shade, special tokens dimmed; control
    characters spelt as Python writes them (:func:`~vitroll.io.names.single_line`: a text's ``\x1b[2J`` cannot clear
    the terminal, its line breaks keep it on one line)."""
    line = Text()
    for segment in shown:
        if segment.score is None:
            line.append(single_line(segment.text))
        else:
            style = f"black on {segment.colour}" + (" dim" if segment.special else "")
            line.append(single_line(segment.text), style=style)
    return line


def quoted_token(token: str) -> str:
    """A predicted token as it is shown on one line: in quotes, so that its white space shows (``" the"``, not
    ``the``), control characters escaped (``"\\n"``, not a line break; ``"\\x0b"``) and a quote too (``"\\""``).
    A backslash stays as it is: the bytes of a partial character are already spelt ``\\xc3``."""
    escaped = "".join(_ESCAPES.get(character, f"\\x{ord(character):02x}")
                      if character in _ESCAPES or unicodedata.category(character) == "Cc" else character
                      for character in token)
    return f'"{escaped}"'


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"'}
