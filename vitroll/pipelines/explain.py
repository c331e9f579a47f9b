"""The steps every pipeline shares: run a method on a batch, then render each map on its original image."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Optional, Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn

from vitroll.adapters.image_text import PromptedModel
from vitroll.io.images import srgb_tagged
from vitroll.maps import Interpolation, as_numpy, key_patches, to_original
from vitroll.methods import METHODS, method_named, prompted_saliency
from vitroll.overlay import (GRID_PANEL, GRID_TITLE_SIZE, TITLE_SHARE, figure, fit_text, outline_boxes, overlay,
                             overlay_grid)
from vitroll.preprocess import CropGeometry
from vitroll.wording import counted, on_the_command_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class ExplainSettings:
    """Which method to run and how to draw its maps."""

    method: str = "rollout"
    method_options: dict[str, Any] = field(default_factory=dict)
    """Options the method takes (checked against its signature on creation: an unknown one is an error)."""
    cmap: str = "jet"
    alpha: float = 0.5
    interpolation: Interpolation = "bilinear"
    normalization: Literal["minmax", "percentile"] = "minmax"
    key_patches: int = 0
    """Outline this many best patches on the overlay (0: none)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "method_options", method_named(self.method).check(self.method_options))

    def for_method(self, method: str) -> "ExplainSettings":
        """These settings for another method, with the options of this one that it takes too."""
        return replace(self, method=method, method_options=method_named(method).among(self.method_options))


@dataclass
class BatchResult:
    """Maps and predictions for one batch, on the CPU as NumPy."""

    grid_maps: np.ndarray
    """(B, h, w) float32, or (B, T, h, w) for an image–text model, one map per text."""
    probabilities: Optional[np.ndarray]
    """(B, num_classes) float32 softmax of the logits, or None (always for an image–text model)."""
    text_logits: Optional[np.ndarray] = None
    """(B, T) float32 image–text logits of an image–text model, else None."""


def explain_batch(model: nn.Module, images: torch.Tensor, settings: ExplainSettings) -> BatchResult:
    """Run ``settings.method`` on a preprocessed batch (B, C, H, W) (split automatically when out of memory); for an
    image–text model with its texts bound (:class:`PromptedModel`), on every image and text."""
    if isinstance(model, PromptedModel):
        saliency = prompted_saliency(model, images, settings.method, **settings.method_options)
        return BatchResult(grid_maps=as_numpy(saliency.maps), probabilities=None,
                           text_logits=as_numpy(saliency.logits.float()))
    return explain_classes(model, images, settings)


def explain_classes(model: nn.Module, images: torch.Tensor, settings: ExplainSettings) -> BatchResult:
    """Run ``settings.method`` on a preprocessed batch (B, C, H, W) with the model's outputs as its classes: one
    map per image, for its ``target_class`` (default: the best-scoring class). An image–text model with its texts
    bound (:class:`PromptedModel`) counts as a classifier of its texts here, where :func:`explain_batch` explains
    every text."""
    saliency = METHODS[settings.method](model, images, **settings.method_options)
    probabilities = None
    if saliency.logits is not None:
        probabilities = as_numpy(saliency.logits.float().softmax(dim=-1))
    return BatchResult(grid_maps=as_numpy(saliency.maps), probabilities=probabilities)


def render(image: np.ndarray, grid_map: np.ndarray, geometry: CropGeometry,
           settings: ExplainSettings) -> tuple[np.ndarray, np.ndarray]:
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


SMALL_SEEN_SHARE = 0.25
"""Below this share of an image's area in the model input, the run says so: a strip (an image three or more times as
long as it is wide, centre-cropped), whose map covers a square in its middle."""
WHOLE_IMAGE_FLAGS = "--crop-mode border --crop-pct 1"
"""The options of ``vitroll overlay`` and ``vitroll app`` that show the model all of an image, padded."""


def whole_image_setting(command: str, function: str) -> str:
    """What shows the model all of an image, padded, in the words of where the user is: ``vitroll {command}
    --crop-mode border --crop-pct 1`` on the command line (:func:`~vitroll.wording.on_the_command_line`),
    ``function``'s ``preprocessing`` argument from Python."""
    if on_the_command_line():
        return f"vitroll {command} {WHOLE_IMAGE_FLAGS}"
    return f"{function}(..., preprocessing=Preprocessing.from_model(model, crop_mode='border', crop_pct=1.0))"


def little_seen_warning(seen_share: float) -> Optional[str]:
    """That the model saw only ``seen_share`` of an image (:meth:`~vitroll.preprocess.CropGeometry.seen_share`), when
    it is below :data:`SMALL_SEEN_SHARE`; None otherwise."""
    if seen_share >= SMALL_SEEN_SHARE:
        return None
    shown = f"{100 * seen_share:.0f} %" if seen_share >= 0.01 else f"{100 * seen_share:.1g} %"
    return f"the model saw only {shown} of the image (the middle of its long side) and its map covers only that"


def enlarged_warning(pixels_per_patch: float) -> Optional[str]:
    """Why a map and classes say next to nothing about an image whose patches cover less than one of its pixels a side
    (:meth:`~vitroll.preprocess.CropGeometry.pixels_per_patch`); None for an image large enough."""
    if pixels_per_patch >= 1:
        return None
    return (f"the image is smaller than the model's patch grid: enlarged to fit, each patch covers "
            f"{pixels_per_patch:.2g} of its pixels a side, so its map and classes say next to nothing about it")


FEW_NAMES = 3
"""How many of the images a warning applies to :func:`images_warning` names."""


def images_warning(flagged: Sequence[tuple[str, str]]) -> Optional[str]:
    """One line for all the images of a run that one kind of warning applies to (:func:`enlarged_warning`,
    :func:`little_seen_warning`), ``flagged`` as (name, the warning worded for it) in their order: the one's name and
    warning; of several, their count and the first :data:`FEW_NAMES` names, then the first's warning (a folder of
    10 000 images got a line each); None for none."""
    if not flagged:
        return None
    first, warning = flagged[0]
    if len(flagged) == 1:
        return f"{first}: {warning}"
    names = ", ".join(name for name, _ in flagged[:FEW_NAMES])
    more = f" and {len(flagged) - FEW_NAMES} more" if len(flagged) > FEW_NAMES else ""
    return f"{counted(len(flagged), 'image')} ({names}{more}) are told of as the first, {first}: {warning}"


def sight_warnings(sights: Sequence[tuple[str, float, float]], whole_image: Optional[str]) -> list[str]:
    """The lines (:func:`images_warning`) for the images of a run whose maps say little: those smaller than the
    model's patch grid, then those the model saw little of, with ``whole_image`` (the options that show the model all
    of an image: :func:`whole_image_setting`; None where the caller has none). ``sights``: per image, its name, the
    pixels a patch covers a side (:meth:`~vitroll.preprocess.CropGeometry.pixels_per_patch`) and the share of it the
    model saw (:meth:`~vitroll.preprocess.CropGeometry.seen_share`)."""
    enlarged = [(name, warning) for name, pixels, _ in sights if (warning := enlarged_warning(pixels))]
    little_seen = [(name, warning) for name, _, share in sights if (warning := little_seen_warning(share))]
    squash = "--crop-mode squash --crop-pct 1" if on_the_command_line() else "crop_mode='squash', crop_pct=1.0"
    advice = "" if whole_image is None else f"; {whole_image} shows the model all of it, padded ({squash}: stretched)"
    lines = [images_warning(enlarged), None if not little_seen else f"{images_warning(little_seen)}{advice}"]
    return [line for line in lines if line is not None]


def warn_of_sights(sights: Sequence[tuple[str, float, float]], function: Optional[str]) -> None:
    """For a Python caller of ``function`` (``annotate``; None for one that reads images no single way, ``compare``),
    one ``UserWarning`` for a run with images whose maps say little (:func:`sight_warnings`, in Python's words); on the
    command line nothing: its commands print the lines themselves (``print_sight_warnings``). The caller got only
    their numbers (``sights``) and no word."""
    if on_the_command_line():
        return
    lines = sight_warnings(sights, None if function is None else whole_image_setting(function, function))
    if lines:
        warnings.warn("\n".join(lines), UserWarning, stacklevel=3)


def top_classes(probabilities: np.ndarray, names: Optional[list[str]], k: int = 5) -> list[tuple[int, str, float]]:
    """The ``k`` most probable classes of one image as (index, name, probability)."""
    order = np.argsort(probabilities)[::-1][:k]
    return [(int(i), names[i] if names and i < len(names) else f"class {i}", float(probabilities[i])) for i in order]


def panel_text(text: str, lines: int = 2) -> str:
    """``text`` quoted and fitted to ``lines`` lines of an :func:`overlay_grid` panel's title (then cut with "…"): an
    unwrapped long title runs across the next panels, a longer one squeezes the pictures."""
    return fit_text(f"'{text}'", GRID_PANEL * TITLE_SHARE, GRID_TITLE_SIZE, lines=lines)


def figure_bytes(fig: "Figure") -> bytes:
    """PNG bytes of a matplotlib figure at 100 dpi, tagged sRGB (:func:`~vitroll.io.images.srgb_tagged`)."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return srgb_tagged(buffer.getvalue())


def figure_png(path_name: str, rgb: np.ndarray, saliency: np.ndarray, overlaid: np.ndarray, settings: ExplainSettings,
               top: Optional[tuple[int, str, float]] = None) -> bytes:
    """PNG bytes of the image | heatmap | overlay figure, titled with the file name and the top-1 class."""
    title = path_name if top is None else f"{path_name} — {top[1]} ({top[2]:.1%})"
    return figure_bytes(figure(rgb, saliency, overlaid, title=title, cmap=settings.cmap))


GRID_MAX_ASPECT = 3.0
"""The most elongated image (long side / short side) whose grid of overlays (one per text or caption word) shows all
of it as it is; a more elongated one's panels would be a few pixels across, or the figure metres tall
(:func:`grid_png`)."""


def _elongated(height: float, width: float) -> bool:
    return max(height, width) > GRID_MAX_ASPECT * min(height, width)


def grid_png(rgb: np.ndarray, overlays: list[np.ndarray], titles: list[str], geometry: CropGeometry,
             title: str) -> bytes:
    """PNG bytes of :func:`~vitroll.overlay.overlay_grid`: the image (H, W, 3), then each overlay (H, W, 3) under
    its title. Of an image more elongated than :data:`GRID_MAX_ASPECT` (``geometry`` says what the model saw of it),
    every panel shows the part the model saw where that part is not (a centre crop of a 1000 × 20 strip: its middle
    20 × 20 pixels), or that part stretched to the model input's shape where the model read it so (squashed), and
    the first panel's title says which; else (padded to the input) the whole image."""
    height, width = rgb.shape[:2]
    image_title = "image"
    if _elongated(height, width):
        box_top, box_left, box_bottom, box_right = geometry.original_box()
        top, left = max(0, int(np.floor(box_top))), max(0, int(np.floor(box_left)))
        bottom, right = min(height, int(np.ceil(box_bottom))), min(width, int(np.ceil(box_right)))
        inside = box_top >= -0.5 and box_left >= -0.5 and box_bottom <= height + 0.5 and box_right <= width + 0.5
        pictures = [picture[top:bottom, left:right] for picture in (rgb, *overlays)]
        if bottom > top and right > left and not _elongated(bottom - top, right - left):
            (rgb, *overlays), image_title = pictures, "image (the part the model saw)"
        elif inside and not _elongated(*geometry.input_hw):
            size = geometry.input_hw[::-1]
            rgb, *overlays = [np.asarray(Image.fromarray(picture).resize(size, Image.Resampling.BILINEAR))
                              for picture in pictures]
            image_title = "image (as the model saw it)"
    return figure_bytes(overlay_grid(rgb, overlays, titles, title=title, image_title=image_title))


def text_grid_png(path_name: str, rgb: np.ndarray, overlays: list[np.ndarray], texts: list[str], logits: np.ndarray,
                  geometry: CropGeometry, settings: ExplainSettings) -> bytes:
    """PNG bytes of the image and one overlay per text, each titled with its text and image–text logit
    (:func:`grid_png`)."""
    titles = [f"{panel_text(text)}\nS = {logit:.2f}" for text, logit in zip(texts, logits)]
    return grid_png(rgb, overlays, titles, geometry, f"{path_name} — {settings.method}")
