"""Text views: a text's characters shaded by its tokens' scores, for the terminal (rich) and for HTML pages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from rich.text import Text

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
    """The token's score; None for a gap."""
    relative: float
    """The score over the text's highest score, in [0, 1] (0 for a gap)."""
    special: bool
    """A special token ([CLS], [SEP], …), shown by its name: it has no characters in the text."""

    @property
    def colour(self) -> str:
        """``#rrggbb`` shade of :attr:`relative`."""
        return "#" + "".join(f"{round(low + (high - low) * self.relative):02x}" for low, high in zip(LOW, HIGH))


def segments(encoded: EncodedText, scores: Sequence[float]) -> list[Segment]:
    """One text's tokens as :class:`Segment` s, in order, with the white space between them as gaps.

    ``scores`` has one score per token of ``encoded`` (its real tokens); each is shaded relative to the text's
    highest score (scores below 0, which gradient attributions could give, shade as 0).
    """
    top = max((float(score) for score in scores), default=0.0)
    shown, cursor = [], 0
    for token, score, word_id, (start, end) in zip(encoded.tokens, scores, encoded.word_ids, encoded.offsets):
        relative = min(max(float(score) / top, 0.0), 1.0) if top > 0 else 0.0
        if word_id is None and start == end:
            shown.append(Segment(token, float(score), relative, special=True))
            continue
        start = max(start, cursor)  # byte-level pieces of one character share its span
        if start > cursor:
            shown.append(Segment(encoded.text[cursor:start], None, 0.0, special=False))
        if end > start:
            shown.append(Segment(encoded.text[start:end], float(score), relative, special=False))
        cursor = max(cursor, end)
    return shown


def terminal_text(shown: Sequence[Segment]) -> Text:
    """The segments as a rich :class:`~rich.text.Text`: each token on its shade, special tokens dimmed."""
    line = Text()
    for segment in shown:
        if segment.score is None:
            line.append(segment.text)
        else:
            style = f"black on {segment.colour}" + (" dim" if segment.special else "")
            line.append(segment.text, style=style)
    return line
