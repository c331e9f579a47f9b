"""The steps every pipeline shares: run a method on a batch, then render each map on its original image."""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import numpy as np
import torch
from torch import nn

from vitroll.errors import VitrollError
from vitroll.maps import Interpolation, as_numpy, key_patches, to_original
from vitroll.methods import METHODS, Saliency, SaliencyMethod
from vitroll.overlay import figure, outline_boxes, overlay
from vitroll.preprocess import CropGeometry


@dataclass(frozen=True)
class ExplainSettings:
    """Which method to run and how to draw its maps."""

    method: str = "rollout"
    method_options: dict[str, Any] = field(default_factory=dict)
    cmap: str = "jet"
    alpha: float = 0.5
    interpolation: Interpolation = "bilinear"
    normalization: Literal["minmax", "percentile"] = "minmax"
    key_patches: int = 0
    """Outline this many best patches on the overlay (0: none)."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose from {', '.join(sorted(METHODS))}")

    def options_for_method(self) -> dict[str, Any]:
        """The subset of ``method_options`` that the chosen method accepts (None values dropped)."""
        accepted = inspect.signature(METHODS[self.method]).parameters
        return {k: v for k, v in self.method_options.items() if k in accepted and v is not None}


@dataclass
class BatchResult:
    """Maps and predictions for one batch, on the CPU as NumPy."""

    grid_maps: np.ndarray
    """(B, h, w) float32."""
    probabilities: Optional[np.ndarray]
    """(B, num_classes) float32 softmax of the logits, or None."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure (CUDA or CPU), as opposed to a bug."""
    if isinstance(error, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def run_method(method: SaliencyMethod, model: nn.Module, images: torch.Tensor, options: dict[str, Any]) -> Saliency:
    """``method(model, images, **options)``; when the batch runs out of memory, retry it in halves (recursively)
    with a note on stderr, so a too-large ``--batch-size`` costs speed, not the run."""
    try:
        return method(model, images, **options)
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        if len(images) == 1:
            raise VitrollError(f"out of memory on a single image of {tuple(images.shape[-2:])} px; lower "
                               "--max-attention-memory or the input size") from None
    if torch.cuda.is_available():  # here, not in the except block, whose traceback still holds the batch's tensors
        torch.cuda.empty_cache()
    half = (len(images) + 1) // 2
    print(f"vitroll: note: a batch of {len(images)} ran out of memory; retrying as {half} + {len(images) - half}",
          file=sys.stderr)
    parts = [run_method(method, model, images[:half], options), run_method(method, model, images[half:], options)]
    logits = None if parts[0].logits is None else torch.cat([p.logits for p in parts])
    return Saliency(torch.cat([p.maps for p in parts]), logits)


def explain_batch(model: nn.Module, images: torch.Tensor, settings: ExplainSettings) -> BatchResult:
    """Run ``settings.method`` on a preprocessed batch (B, 3, H, W) (split automatically when out of memory)."""
    saliency = run_method(METHODS[settings.method], model, images, settings.options_for_method())
    probabilities = None
    if saliency.logits is not None:
        probabilities = as_numpy(saliency.logits.float().softmax(dim=-1))
    return BatchResult(grid_maps=as_numpy(saliency.maps), probabilities=probabilities)


def render(image: np.ndarray, grid_map: np.ndarray, geometry: CropGeometry, settings: ExplainSettings) -> tuple[np.ndarray, np.ndarray]:
    """Put a grid map (h, w) on its original RGB image (H0, W0, 3).

    Returns
    -------
    saliency : ndarray, float32, (H0, W0)
        The map in original pixels, NaN where the model saw nothing.
    overlaid : ndarray, uint8, (H0, W0, 3)
        The coloured map blended onto the image (uncovered pixels left as they were).
    """
    saliency = to_original(grid_map, geometry, interpolation=settings.interpolation)
    overlaid = overlay(image, saliency, cmap=settings.cmap, alpha=settings.alpha, normalization=settings.normalization)
    if settings.key_patches:
        boxes = [patch.box for patch in key_patches(grid_map, geometry, settings.key_patches)]
        overlaid = outline_boxes(overlaid, boxes, thickness=max(1, min(image.shape[:2]) // 150))
    return saliency, overlaid


def top_classes(probabilities: np.ndarray, names: Optional[list[str]], k: int = 5) -> list[tuple[int, str, float]]:
    """The ``k`` most probable classes of one image as (index, name, probability)."""
    order = np.argsort(probabilities)[::-1][:k]
    return [(int(i), names[i] if names and i < len(names) else f"class {i}", float(probabilities[i])) for i in order]


def figure_png(path_name: str, rgb: np.ndarray, saliency: np.ndarray, overlaid: np.ndarray, settings: ExplainSettings,
               top: Optional[tuple[int, str, float]] = None) -> bytes:
    """PNG bytes of the image | heatmap | overlay figure, titled with the file name and the top-1 class."""
    import io

    title = path_name if top is None else f"{path_name} — {top[1]} ({top[2]:.1%})"
    buffer = io.BytesIO()
    figure(rgb, saliency, overlaid, title=title, cmap=settings.cmap).savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
