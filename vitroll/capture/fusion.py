"""Head fusion: reduce per-head attention probabilities to one matrix per layer."""

from __future__ import annotations

from typing import Literal, Optional

import torch

from vitroll.errors import OptionValueError

HeadFusion = Literal["mean", "max", "min"]
HEAD_FUSIONS: tuple[str, ...] = ("mean", "max", "min")


def check_head_fusion(head_fusion: Optional[str]) -> None:
    """Raise :class:`~vitroll.errors.OptionValueError` unless ``head_fusion`` is one of :data:`HEAD_FUSIONS` or
    ``None``."""
    if head_fusion is not None and head_fusion not in HEAD_FUSIONS:
        raise OptionValueError(f"head_fusion must be one of {', '.join(HEAD_FUSIONS)}; got {head_fusion!r}")


def fuse_heads(probs: torch.Tensor, head_fusion: Optional[str]) -> torch.Tensor:
    """Fuse the head axis of attention probabilities.

    Parameters
    ----------
    probs : Tensor, shape (B, H, Q, N)
        Softmax attention probabilities, ``Q`` query rows (all ``N`` or a chunk of them).
    head_fusion : {"mean", "max", "min"} or None
        ``None`` keeps the heads and returns ``probs`` unchanged.

    Returns
    -------
    Tensor, shape (B, Q, N), or (B, H, Q, N) when ``head_fusion`` is None.
    """
    if head_fusion is None:
        return probs
    if head_fusion == "mean":
        return probs.mean(dim=1)
    if head_fusion == "max":
        return probs.amax(dim=1)
    if head_fusion == "min":
        return probs.amin(dim=1)
    check_head_fusion(head_fusion)
    raise AssertionError("unreachable")
