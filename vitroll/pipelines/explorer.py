"""What the interactive explorer (``vitroll app``) computes for one image, as plain functions (no UI here).

The explorer offers a fixed set of controls — method, head fusion, discard ratio, start layer, layer, a single head,
target class. Each control stands for the method option of the same name (:data:`CONTROL_OPTIONS`); a method gets
only the options it takes (its signature in :data:`vitroll.methods.METHODS` says which), and the controls it does
not take are reported as ignored. A single head is shown by methods that give one map per head
(``head_fusion=None``, today ``attention``); the per-head grid always shows every head of the chosen layer.

Image–text models (a prompt as the explained score) are not supported yet (issue 22): when their adapter lands, a
prompt becomes one more control here, passed on to the method like the others.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
from PIL import Image, ImageDraw
from torch import nn

from vitroll.capture.fusion import HeadFusion
from vitroll.methods import Method, method_named, record_attention
from vitroll.pipelines.explain import ExplainSettings, explain_batch, render, top_classes
from vitroll.preprocess import CropGeometry, Preprocessing

CONTROL_OPTIONS = {
    "head fusion": "head_fusion", "discard ratio": "discard_ratio", "start layer": "start_layer", "layer": "layer",
    "target class": "target_class",
}
"""Each control (as the UI labels it) and the method option it sets."""

HEAD_TILE_SIDE = 160
"""Long side, in pixels, of each head's overlay in the per-head grid."""
_TILE_GAP = 4
_LABEL_HEIGHT = 14


@dataclass(frozen=True)
class ExplorerControls:
    """The explorer's controls. ``None`` leaves an option at the method's default (``target_class``: the
    prediction; ``head``: all heads, fused)."""

    method: str = "rollout"
    head_fusion: Optional[HeadFusion] = None
    discard_ratio: Optional[float] = None
    start_layer: Optional[int] = None
    layer: Optional[int] = None
    """The layer of the per-head grid and of the single head (default: the last); also ``attention``'s ``layer``."""
    head: Optional[int] = None
    """One head of ``layer`` alone, for methods with per-head maps; None: all heads."""
    target_class: Optional[int] = None


@dataclass(frozen=True)
class ModelOutline:
    """What the controls range over for one model."""

    layers: int
    heads: int
    """Heads per layer (of the last layer, which the per-head grid shows by default)."""
    class_names: list[str]
    """One per class (``class K`` where the model names none); empty for a backbone without classes."""


@dataclass
class Exploration:
    """What the explorer shows for one image."""

    grid_map: np.ndarray
    """(h, w) float32: the method's map on the model's patch grid (the chosen head's, with a single head)."""
    overlay: np.ndarray
    """(H0, W0, 3) uint8: ``grid_map`` on the image."""
    head_grid: np.ndarray
    """uint8 RGB: one small overlay per head of the chosen layer, tiled, labelled, the chosen head framed."""
    top: list[tuple[int, str, float]]
    """The five most probable classes as (index, name, probability); empty for a backbone."""
    ignored: list[str]
    """The controls (labels of :data:`CONTROL_OPTIONS`, and ``head``) that this method does not use."""


def gives_per_head_maps(method: Method) -> bool:
    """Whether ``method`` offers one map per head (its ``head_fusion`` option admits None)."""
    option = method.options.get("head_fusion")
    return option is not None and type(None) in typing.get_args(option.hint)


def ignored_controls(method_name: str, *, single_head: bool = False) -> list[str]:
    """The controls that method ``method_name`` does not use (``single_head``: a single head is chosen).

    ``head`` is ignored by methods without per-head maps; ``head fusion`` is ignored while a single head is shown.
    """
    method = method_named(method_name)
    ignored = [label for label, option in CONTROL_OPTIONS.items() if not method.takes(option)]
    if not gives_per_head_maps(method):
        ignored.append("head")
    elif single_head and "head fusion" not in ignored:
        ignored.append("head fusion")
    return ignored


def method_options(controls: ExplorerControls) -> dict[str, object]:
    """The options ``controls`` give their method: those it takes and that are set (checked against its signature).

    With a single head chosen and a method that has per-head maps, ``head_fusion`` is None (one map per head).

    Raises
    ------
    MethodOptionError
        For a value of the wrong type.
    """
    method = method_named(controls.method)
    given = {option: getattr(controls, option) for option in CONTROL_OPTIONS.values()}
    options = {name: value for name, value in given.items() if value is not None and method.takes(name)}
    if controls.head is not None and gives_per_head_maps(method):
        options["head_fusion"] = None
    return method.check(options)


def model_outline(model: nn.Module, preprocessing: Optional[Preprocessing] = None,
                  class_names: Optional[list[str]] = None) -> ModelOutline:
    """Layers, heads and classes of ``model``, from one forward pass on a grey image of its input size."""
    preprocessing = preprocessing or Preprocessing.from_model(model)
    grey = Image.new("RGB", preprocessing.input_size[::-1], (128, 128, 128))
    tensor, _ = preprocessing.batch([grey])
    attentions, _, logits = record_attention(model, tensor, head_fusion=None)
    num_classes = 0 if logits is None else logits.shape[-1]
    names = [class_names[k] if class_names and k < len(class_names) else f"class {k}" for k in range(num_classes)]
    return ModelOutline(layers=len(attentions), heads=attentions[-1].shape[1], class_names=names)


def explore(model: nn.Module, image: np.ndarray, controls: ExplorerControls, *,
            preprocessing: Optional[Preprocessing] = None, class_names: Optional[list[str]] = None,
            settings: ExplainSettings = ExplainSettings()) -> Exploration:
    """Explain one RGB image (H0, W0, 3) uint8 with ``controls``, on the model's device.

    ``settings`` gives the drawing (colormap, opacity, …); its method and options are replaced by the controls'.

    Raises
    ------
    ValueError
        For a ``head`` or ``layer`` out of range, a ``start_layer`` or ``target_class`` out of range (from the
        method), or an image that is not RGB uint8.
    MethodOptionError
        For a control value of the wrong type.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"image must be RGB uint8 of shape (H, W, 3); got {image.dtype} {image.shape}")
    preprocessing = preprocessing or Preprocessing.from_model(model)
    tensor, (geometry,) = preprocessing.batch([Image.fromarray(image)])
    per_head = explain_batch(model, tensor, ExplainSettings(method="attention", method_options=dict(
        head_fusion=None, layer=-1 if controls.layer is None else controls.layer)))
    heads = per_head.grid_maps[0]
    _check_head(controls.head, len(heads))

    settings = replace(settings, method=controls.method, method_options=method_options(controls))
    result = explain_batch(model, tensor, settings)
    grid_map = result.grid_maps[0]
    if grid_map.ndim == 3:  # one map per head: the chosen one
        grid_map = grid_map[controls.head]
    _, overlaid = render(image, grid_map, geometry, settings)
    top = [] if result.probabilities is None else top_classes(result.probabilities[0], class_names)
    return Exploration(grid_map=grid_map, overlay=overlaid,
                       head_grid=head_grid(image, heads, geometry, settings, chosen=controls.head), top=top,
                       ignored=ignored_controls(controls.method, single_head=controls.head is not None))


def _check_head(head: Optional[int], heads: int) -> None:
    if head is not None and not 0 <= head < heads:
        raise ValueError(f"head {head} is out of range for a layer with {heads} heads (0…{heads - 1})")


def head_grid(image: np.ndarray, head_maps: np.ndarray, geometry: CropGeometry, settings: ExplainSettings, *,
              chosen: Optional[int] = None, tile_side: int = HEAD_TILE_SIDE) -> np.ndarray:
    """One small overlay per head, tiled in rows of ⌈√H⌉, each labelled ``head k``, head ``chosen`` framed.

    Parameters
    ----------
    image : ndarray, uint8, (H0, W0, 3)
    head_maps : ndarray, (H, h, w)
        Grid maps, one per head.
    geometry : CropGeometry
        How the model's input lies in ``image``.

    Returns
    -------
    ndarray, uint8, (rows · (t + label + gap) + gap, columns · (t + gap) + gap, 3) for tiles of t × t' pixels.
    """
    height, width = image.shape[:2]
    scale = tile_side / max(height, width)
    tile_hw = (max(1, round(height * scale)), max(1, round(width * scale)))
    thumbnail = np.asarray(Image.fromarray(image).resize(tile_hw[::-1], Image.Resampling.BILINEAR))
    thumbnail_geometry = replace(geometry, original_hw=tile_hw)  # the same crop, seen from a smaller original
    columns = math.ceil(math.sqrt(len(head_maps)))
    rows = math.ceil(len(head_maps) / columns)
    cell_h, cell_w = tile_hw[0] + _LABEL_HEIGHT + _TILE_GAP, tile_hw[1] + _TILE_GAP
    canvas = Image.new("RGB", (columns * cell_w + _TILE_GAP, rows * cell_h + _TILE_GAP), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for index, head_map in enumerate(head_maps):
        top = _TILE_GAP + (index // columns) * cell_h
        left = _TILE_GAP + (index % columns) * cell_w
        _, tile = render(thumbnail, head_map, thumbnail_geometry, settings)
        canvas.paste(Image.fromarray(tile), (left, top + _LABEL_HEIGHT))
        draw.text((left, top), f"head {index}", fill=(0, 0, 0))
        if index == chosen:
            draw.rectangle((left - 2, top + _LABEL_HEIGHT - 2, left + tile_hw[1] + 1,
                            top + _LABEL_HEIGHT + tile_hw[0] + 1), outline=(0, 0, 0), width=2)
    return np.asarray(canvas)
