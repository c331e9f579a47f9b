"""Checks on the maps a method gives, for what a picture of them would hide: a map that is not finite is drawn as no
map at all, the bare image, which reads as "the model looked nowhere"."""

from __future__ import annotations

import warnings
from typing import Optional

import torch


def non_finite_words(maps: torch.Tensor) -> list[Optional[str]]:
    """Per input, what is not finite in its map, in words, or None when all of it is finite.

    Parameters
    ----------
    maps : Tensor, shape (B, ...)
        One map per input, of any shape after the batch axis ((h, w), (T, h, w) one per text, (L,) token scores).

    Returns
    -------
    list of B str or None
        ``no finite value``, or ``NaN or inf at 3 of its 196 values``.
    """
    flat = maps.detach().flatten(1)
    counts = (~torch.isfinite(flat)).sum(dim=1).tolist()
    return [None if count == 0 else "no finite value" if count == flat.shape[1]
            else f"NaN or inf at {count} of its {flat.shape[1]} values" for count in counts]


def non_finite_cause(input_finite: bool) -> str:
    """Why an input's map is not finite, as far as the input tells: NaN or inf in the input itself (which every
    method carries into the whole map), else in what the model makes of it."""
    if not input_finite:
        return "the input holds NaN or inf, which every method carries into the whole map"
    return ("the input is finite, the model's output is not: does the model hold NaN or inf in its weights, or "
            "overflow at the precision it runs in?")


def warn_non_finite_maps(method: str, maps: torch.Tensor, inputs: object) -> None:
    """A ``UserWarning`` naming how many of the maps (B, ...) that ``method`` gave for ``inputs`` hold NaN or inf, which
    of them and why (:func:`non_finite_cause`; only a float tensor of inputs can hold NaN); nothing when all are
    finite. The maps are returned as they are: a caller that draws one sees the bare image where the map is NaN."""
    problems = [(index, words) for index, words in enumerate(non_finite_words(maps)) if words is not None]
    if not problems:
        return
    given = inputs.detach().flatten(1) if isinstance(inputs, torch.Tensor) and inputs.is_floating_point() else None
    groups: dict[tuple[str, str], list[int]] = {}
    for index, words in problems:
        cause = non_finite_cause(given is None or bool(torch.isfinite(given[index]).all()))
        groups.setdefault((words, cause), []).append(index)
    details = "; ".join(f"input{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))}: {words} — {cause}"
                        for (words, cause), indices in groups.items())
    warnings.warn(f"{method}: {len(problems)} of {len(maps)} maps are not finite, which a picture of them shows as no "
                  f"map at all: {details}", UserWarning, stacklevel=3)
