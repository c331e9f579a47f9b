"""Counts and articles in words for the lines vitroll prints and writes."""

from __future__ import annotations


def counted(number: int, noun: str) -> str:
    """``1 file``, ``2 files``, ``3 studies``."""
    if number == 1:
        return f"{number} {noun}"
    return f"{number} {noun[:-1]}ies" if noun.endswith("y") else f"{number} {noun}s"


def with_article(word: str) -> str:
    """``a float64``, ``an int64``, ``an object``, ``a uint8``: the indefinite article by the sound of ``word``."""
    lower = word.lower()
    vowel_sound = lower[:1] in ("a", "e", "i", "o") or (lower[:1] == "u"
                                                        and not lower.startswith(("uint", "uni", "us")))
    return f"{'an' if vowel_sound else 'a'} {word}"
