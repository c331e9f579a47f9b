"""Counts in words for the lines vitroll prints and writes."""

from __future__ import annotations


def counted(number: int, noun: str) -> str:
    """``1 file``, ``2 files``, ``3 studies``."""
    if number == 1:
        return f"{number} {noun}"
    return f"{number} {noun[:-1]}ies" if noun.endswith("y") else f"{number} {noun}s"
