"""Faithfulness and localisation metrics for saliency maps.

Two kinds:

* against the model — :func:`deletion_insertion` (Petsiuk et al. 2018, RISE): remove (or insert) pixels in
  the order of the map and watch the target class's probability; a faithful map makes it fall fast
  (low deletion AUC) and rise fast (high insertion AUC);
* against a ground-truth mask — :func:`pointing_game` (the map's peak lies on the object),
  :func:`energy_in_mask` (the fraction of the map's mass on the object, the "energy pointing game"),
  :func:`peak_preference` (of two objects, the map peaks higher on the right one) and
  :func:`top_fraction_iou` (IoU of the map's top k % pixels with the mask);

and two ways to compare maps with each other — :func:`rank_correlation` and :func:`top_fraction_iou` between
two maps — used by the sanity check and by model and method comparisons.

Maps given to the mask metrics are in the mask's pixels, (B, H, W) or (H, W); NaN marks pixels the model did
not see (they count as zero saliency).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vitroll.errors import InputValueError, OptionValueError
from vitroll.methods.base import class_logits

Substrate = Literal["blur", "mean"]


def _batched(array: np.ndarray) -> np.ndarray:
    return array[None] if array.ndim == 2 else array


def _clean(maps: np.ndarray) -> np.ndarray:
    return np.nan_to_num(_batched(np.asarray(maps, dtype=np.float64)), nan=0.0)


def pointing_game(maps: np.ndarray, masks: np.ndarray, tolerance: int = 0) -> np.ndarray:
    """Whether each map's maximum lies on its mask (within ``tolerance`` pixels).

    Parameters
    ----------
    maps : ndarray, (B, H, W) or (H, W)
    masks : ndarray of bool, same shape
    tolerance : int
        Radius in pixels of slack around the mask (a disc; Zhang et al. 2018 use 15 at ImageNet scale).

    Returns
    -------
    ndarray of bool, (B,). Ties: every pixel sharing the maximum must lie on the mask.
    """
    import cv2

    maps, masks = _clean(maps), _batched(np.asarray(masks, dtype=bool))
    hits = np.empty(len(maps), dtype=bool)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * tolerance + 1, 2 * tolerance + 1))
    for b, (saliency, mask) in enumerate(zip(maps, masks)):
        target = cv2.dilate(mask.astype(np.uint8), kernel).astype(bool) if tolerance else mask
        peaks = saliency == saliency.max()
        hits[b] = bool(target[peaks].all())
    return hits


def peak_preference(maps: np.ndarray, masks: np.ndarray, rival_masks: np.ndarray) -> np.ndarray:
    """Whether each map peaks higher on its mask than on a rival mask: the pointing game between two objects.

    The strict :func:`pointing_game` also counts a peak on the background as a miss; this asks only which of two
    objects the map prefers, so a map that ignores which object is asked for scores 0.5 on average when the asked-for
    object is drawn at random.

    Parameters
    ----------
    maps : ndarray, (B, H, W) or (H, W)
    masks, rival_masks : ndarray of bool, same shape
        Each map's object and the one it competes with; neither may be empty.

    Returns
    -------
    ndarray of float, (B,): 1 where the map's maximum over ``masks`` exceeds its maximum over ``rival_masks``, 0 where
    it is lower, 0.5 on a tie.
    """
    maps = _clean(maps)
    masks, rival_masks = (_batched(np.asarray(m, dtype=bool)) for m in (masks, rival_masks))
    if not (masks.any(axis=(1, 2)).all() and rival_masks.any(axis=(1, 2)).all()):
        raise InputValueError("peak_preference needs a non-empty mask and rival mask for every map")
    on_mask = np.where(masks, maps, -np.inf).max(axis=(1, 2))
    on_rival = np.where(rival_masks, maps, -np.inf).max(axis=(1, 2))
    return np.sign(on_mask - on_rival) / 2 + 0.5


def energy_in_mask(maps: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Fraction of each map's (non-negative) mass that lies on its mask, (B,). A uniform map scores the mask's area."""
    maps, masks = np.clip(_clean(maps), 0, None), _batched(np.asarray(masks, dtype=bool))
    total = maps.sum(axis=(1, 2))
    inside = (maps * masks).sum(axis=(1, 2))
    return np.divide(inside, total, out=np.zeros_like(total), where=total > 0)


def top_fraction_mask(maps: np.ndarray, fraction: float, within: Optional[np.ndarray] = None) -> np.ndarray:
    """The top ``fraction`` of each map's pixels by value, (B, H, W) bool (exactly ``round(fraction·N)`` pixels, at
    least one; ties broken by position).

    Only the pixels of ``within`` ((B, H, W) or (H, W) bool; default: all) are candidates, and N is their number; a
    map with none gets an empty mask.
    """
    if not 0 < fraction <= 1:
        raise OptionValueError(f"fraction must be in (0, 1]; got {fraction}")
    maps = _clean(maps)
    flat = maps.reshape(len(maps), -1)
    allowed = np.ones_like(flat, dtype=bool) if within is None else np.broadcast_to(
        _batched(np.asarray(within, dtype=bool)), maps.shape).reshape(len(maps), -1)
    order = np.argsort(-np.where(allowed, flat, -np.inf), axis=1, kind="stable")
    top = np.zeros_like(flat, dtype=bool)
    for row, candidates in enumerate(allowed.sum(axis=1)):
        count = max(1, round(fraction * int(candidates))) if candidates else 0
        top[row, order[row, :count]] = True
    return top.reshape(maps.shape)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    union = (a | b).sum(axis=(1, 2))
    return np.divide((a & b).sum(axis=(1, 2)), union, out=np.zeros(len(a)), where=union > 0)


def top_fraction_iou(maps: np.ndarray, other: np.ndarray, fraction: float = 0.1) -> np.ndarray:
    """IoU of each map's top ``fraction`` pixels with ``other``, (B,).

    ``other`` is a boolean mask (the ground truth) or another map. Between two maps both tops are taken among the
    pixels both maps see (finite in both; NaN marks a pixel a model did not see), as :func:`rank_correlation`
    compares them: a part of the image only one model saw cannot hold the other's top pixels.
    """
    other = _batched(np.asarray(other))
    if other.dtype == bool:
        return _iou(top_fraction_mask(maps, fraction), other)
    maps, other = _batched(np.asarray(maps, np.float64)), other.astype(np.float64)
    seen = np.isfinite(maps) & np.isfinite(other)
    return _iou(top_fraction_mask(maps, fraction, seen), top_fraction_mask(other, fraction, seen))


def rank_correlation(maps: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Spearman rank correlation between paired maps, (B,); NaN pixels (in either) are left out.
    A constant map correlates 0 with anything."""
    from scipy.stats import rankdata

    maps, other = _batched(np.asarray(maps, np.float64)), _batched(np.asarray(other, np.float64))
    result = np.zeros(len(maps))
    for b, (x, y) in enumerate(zip(maps.reshape(len(maps), -1), other.reshape(len(other), -1))):
        seen = np.isfinite(x) & np.isfinite(y)
        if not seen.any():
            continue  # nothing both maps saw: 0, without numpy's warning about the mean of nothing
        rx, ry = rankdata(x[seen]), rankdata(y[seen])
        rx, ry = rx - rx.mean(), ry - ry.mean()
        norm = np.sqrt((rx**2).sum() * (ry**2).sum())
        result[b] = (rx * ry).sum() / norm if norm > 0 else 0.0
    return result


def _trapezoid(curves: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Trapezoid-rule area under each curve (B, S + 1) over ``x`` (S + 1,)."""
    return ((curves[:, 1:] + curves[:, :-1]) / 2 * np.diff(x)).sum(axis=1)


@dataclass(frozen=True)
class DeletionInsertion:
    """Probability curves of the target class as pixels are deleted from / inserted into the image."""

    fractions: np.ndarray
    """(S + 1,) fraction of pixels changed at each step, 0 … 1."""
    deletion: np.ndarray
    """(B, S + 1) probabilities while the most salient pixels are replaced by the substrate."""
    insertion: np.ndarray
    """(B, S + 1) probabilities while the most salient pixels are put back onto the substrate."""

    @property
    def deletion_auc(self) -> np.ndarray:
        """(B,) area under the deletion curve — lower is better."""
        return _trapezoid(self.deletion, self.fractions)

    @property
    def insertion_auc(self) -> np.ndarray:
        """(B,) area under the insertion curve — higher is better."""
        return _trapezoid(self.insertion, self.fractions)


def _substrate(images: torch.Tensor, kind: Substrate) -> torch.Tensor:
    if kind == "mean":
        return images.mean(dim=(-2, -1), keepdim=True).expand_as(images).clone()
    if kind != "blur":
        raise OptionValueError(f"substrate must be 'blur' or 'mean'; got {kind!r}")
    size = max(3, (min(images.shape[-2:]) // 8) | 1)  # odd kernel, an eighth of the image
    sigma = size / 4
    offsets = torch.arange(size, dtype=images.dtype, device=images.device) - size // 2
    kernel = torch.exp(-(offsets**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    channels = images.shape[1]
    padded = F.pad(images, (size // 2,) * 4, mode="reflect")
    blurred = F.conv2d(padded, kernel.view(1, 1, 1, -1).expand(channels, 1, 1, size).contiguous(), groups=channels)
    return F.conv2d(blurred, kernel.view(1, 1, -1, 1).expand(channels, 1, size, 1).contiguous(), groups=channels)


@torch.no_grad()
def deletion_insertion(
    model: nn.Module,
    images: torch.Tensor,
    maps: torch.Tensor,
    targets: torch.Tensor,
    *,
    steps: int = 16,
    substrate: Substrate = "blur",
    padded_hw: tuple[int, int] | None = None,
) -> DeletionInsertion:
    """Deletion and insertion curves (Petsiuk et al. 2018) for a batch.

    Parameters
    ----------
    model : nn.Module
        The classifier being explained (eval mode is the caller's business).
    images : Tensor, (B, C, H, W)
        Preprocessed inputs, as the model takes them (C = 3, or 1 for a grey model).
    maps : Tensor, (B, h, w)
        Saliency on the patch grid (or at input size); upsampled bilinearly to (H, W) to order the pixels.
    targets : Tensor, (B,)
        Class whose probability is tracked.
    steps : int
        The pixels are changed in ``steps`` equal portions, ``steps + 1`` forward passes of the batch.
    substrate : {"blur", "mean"}
        What deleted pixels become (and what insertion starts from): a Gaussian blur of the image (RISE's
        insertion substrate) or its mean colour.
    padded_hw : (int, int), optional
        For a model that pads its input up to whole patches (:attr:`~vitroll.capture.TokenLayout.padded_hw`): the
        padded input, which a grid map covers; its first (H, W) pixels are the images' (a map at input size is
        used as it is).
    """
    device = next(model.parameters()).device
    images = images.to(device)
    batch, _, height, width = images.shape
    grid_covers = padded_hw if padded_hw is not None and tuple(maps.shape[-2:]) != (height, width) else (height, width)
    upsampled = F.interpolate(maps.float().to(device)[:, None], size=grid_covers, mode="bilinear",
                              align_corners=False)[..., :height, :width]
    order = upsampled.reshape(batch, -1).nan_to_num(float("-inf")).argsort(dim=1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(height * width, device=device).expand(batch, -1))
    rank = rank.reshape(batch, 1, height, width)
    background = _substrate(images, substrate)
    counts = torch.linspace(0, height * width, steps + 1).round().long().tolist()
    targets = torch.as_tensor(targets, device=device).reshape(-1, 1)
    deletion, insertion = [], []
    for count in counts:
        changed = rank < count
        pair = torch.cat([torch.where(changed, background, images), torch.where(changed, images, background)])
        probabilities = class_logits(model, pair.to(next(model.parameters()).dtype)).float().softmax(dim=-1)
        deletion.append(probabilities[:batch].gather(1, targets).squeeze(1))
        insertion.append(probabilities[batch:].gather(1, targets).squeeze(1))
    return DeletionInsertion(
        fractions=np.array(counts, dtype=np.float64) / (height * width),
        deletion=torch.stack(deletion, dim=1).cpu().numpy(),
        insertion=torch.stack(insertion, dim=1).cpu().numpy(),
    )
