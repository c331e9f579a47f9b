"""What the interactive explorer (``vitroll app``) computes for one image, as plain functions (no UI here).

The explorer offers a fixed set of controls — method, head fusion, discard ratio, start layer, layer, a single head,
target class, and for an image–text model (CLIP, SigLIP, open_clip) its prompts. Each control but the prompts stands
for the method option of the same name (:data:`CONTROL_OPTIONS`); a method gets only the options it takes (its
signature in :data:`vitroll.methods.METHODS` says which), and the controls it does not take are reported as ignored.
A single head is shown by methods that give one map per head (``head_fusion=None``, today ``attention``); the
per-head grid always shows every head of the chosen layer.

The prompts become the classes of the image–text model (:class:`~vitroll.adapters.image_text.PromptedModel`): the top
classes are the softmax of ``logits_per_image`` over the prompts, the target class is a prompt (default: the
best-scoring one), and a method with a target explains that prompt's score ``S[0, t]``; a method without one (rollout,
attention, flow) gives the same map for every prompt, so it is reported as ignoring them.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from torch import nn

from vitroll.adapters.image_text import PromptedModel, text_inputs
from vitroll.capture import family_of
from vitroll.capture.fusion import HeadFusion
from vitroll.errors import InputValueError, OptionOutOfRange, OptionValueError
from vitroll.methods import METHODS, Method, method_named, record_attention
from vitroll.methods.registry import check_value
from vitroll.overlay import rgb_uint8
from vitroll.pipelines.explain import ExplainSettings, explain_classes, render, top_classes
from vitroll.preprocess import CropGeometry, Preprocessing

CONTROL_OPTIONS = {
    "head fusion": "head_fusion", "discard ratio": "discard_ratio", "start layer": "start_layer", "layer": "layer",
    "target class": "target_class",
}
"""Each control (as the UI labels it) and the method option it sets."""

_LABELS = {option: label for label, option in CONTROL_OPTIONS.items()}

PROMPTS = "prompts"
"""The label of the image–text model's prompts, among the ignored controls."""

WHOLE_NUMBER_CONTROLS = ("start_layer", "layer", "head", "target_class")
"""The controls that take an int (or None): a float, even a whole one, is refused, as a method's option would be."""

HEAD_TILE_SIDE = 160
"""Long side, in pixels, of each head's overlay in the per-head grid."""
MAX_TILE_ASPECT = 3.0
"""The most elongated image (long side / short side) whose head tiles show all of it; a more elongated one's show
what the model saw of it (its input's extent, as the model's input), not a thumbnail a few pixels across."""
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
    """For an image–text model, the index of a prompt."""
    prompts: tuple[str, ...] = ()
    """For an image–text model, at least one: the texts it scores the image against, which become its classes;
    empty for any other model."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(ExplorerControls)
        for name in WHOLE_NUMBER_CONTROLS:  # also those the method ignores: a layer 0.5 is a mistake either way
            check_value(getattr(self, name), hints[name], f"the explorer's {_LABELS.get(name, name)}")


@dataclass(frozen=True)
class ModelOutline:
    """What the controls range over for one model."""

    layers: int
    heads: int
    """Heads per layer (of the last layer, which the per-head grid shows by default)."""
    class_names: list[str]
    """One per class (``class K`` where the model names none); empty for a backbone without classes and for an
    image–text model (its classes are the prompts)."""
    image_text: bool = False
    """Whether the model scores images against prompts (CLIP, SigLIP, open_clip): the controls include prompts."""

    @property
    def has_classes(self) -> bool:
        """Whether the model has scores to explain: a classification head's, or an image–text model's prompts'."""
        return bool(self.class_names) or self.image_text


def offered_methods(outline: ModelOutline) -> list[str]:
    """The names of the methods the explorer offers for a model of ``outline``: every method, or for a backbone
    without a classification head those that explain no score (one that takes a target class needs class scores,
    and would be refused on every request)."""
    return sorted(name for name, method in METHODS.items() if outline.has_classes or not method.takes("target_class"))


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
    """The controls (labels of :data:`CONTROL_OPTIONS`, ``head``, and :data:`PROMPTS` for an image–text model) that
    this method's map does not use."""


def gives_per_head_maps(method: Method) -> bool:
    """Whether ``method`` offers one map per head (its ``head_fusion`` option admits None)."""
    option = method.options.get("head_fusion")
    return option is not None and type(None) in typing.get_args(option.hint)


def ignored_controls(method_name: str, *, single_head: bool = False, image_text: bool = False) -> list[str]:
    """The controls that method ``method_name`` does not use (``single_head``: a single head is chosen;
    ``image_text``: the model is an image–text model, with prompts).

    ``head`` is ignored by methods without per-head maps; ``head fusion`` is ignored while a single head is shown;
    the prompts, by methods without a target class (their map is the same for every prompt).
    """
    method = method_named(method_name)
    ignored = [label for label, option in CONTROL_OPTIONS.items() if not method.takes(option)]
    if not gives_per_head_maps(method):
        ignored.append("head")
    elif single_head and "head fusion" not in ignored:
        ignored.append("head fusion")
    if image_text and not method.takes("target_class"):
        ignored.append(PROMPTS)
    return ignored


def is_image_text_model(model: nn.Module) -> bool:
    """Whether ``model`` scores images against texts (CLIP, SigLIP, open_clip), so that it needs prompts."""
    return family_of(model).image_text is not None


def scored_model(model: nn.Module, prompts: tuple[str, ...]) -> nn.Module:
    """The model whose classes the explorer shows: an image–text model with ``prompts`` bound, its classes the
    prompts (:class:`~vitroll.adapters.image_text.PromptedModel`), or any other model as it is.

    Raises
    ------
    ValueError
        For an image–text model without prompts, prompts for any other model, a blank prompt, or an image–text
        model without a tokenizer (from :func:`~vitroll.adapters.image_text.text_inputs`).
    """
    if not is_image_text_model(model):
        if prompts:
            raise OptionValueError(f"prompts need an image–text model (CLIP, SigLIP, open_clip); "
                                   f"{type(model).__name__} scores classes, not texts")
        return model
    if not prompts:
        raise OptionValueError(f"{type(model).__name__} is an image–text model: give at least one prompt (one per "
                               "line) to score the image against")
    return PromptedModel(model, text_inputs(model, list(prompts)))


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
    """Layers, heads and classes of ``model`` and whether it takes prompts, from one forward pass on a grey image of
    its input size."""
    preprocessing = preprocessing or Preprocessing.from_model(model)
    grey = Image.new("RGB", preprocessing.input_size[::-1], (128, 128, 128))
    tensor, _ = preprocessing.batch([grey])
    attentions, _, logits = record_attention(model, tensor, head_fusion=None)
    num_classes = 0 if logits is None else logits.shape[-1]
    names = [class_names[k] if class_names and k < len(class_names) else f"class {k}" for k in range(num_classes)]
    return ModelOutline(layers=len(attentions), heads=attentions[-1].shape[1], class_names=names,
                        image_text=is_image_text_model(model))


def explore(model: nn.Module, image: np.ndarray, controls: ExplorerControls, *,
            preprocessing: Optional[Preprocessing] = None, class_names: Optional[list[str]] = None,
            settings: ExplainSettings = ExplainSettings(), display: Optional[np.ndarray] = None) -> Exploration:
    """Explain one RGB image (H0, W0, 3) uint8 with ``controls``, on the model's device.

    ``settings`` gives the drawing (colormap, opacity, …); its method and options are replaced by the controls'.
    ``display`` (H0, W0, 3) uint8 is drawn on instead of ``image`` when given: the file's picture in sRGB
    (:func:`~vitroll.io.images.load_image_with_display`), while the model reads ``image``.
    For an image–text model the classes are ``controls.prompts`` (``class_names`` unused).

    Raises
    ------
    ValueError
        For a ``head``, ``layer``, ``start_layer`` or ``target_class`` out of range (named as the page's controls
        are: ``start layer 4 is out of range …``), an image or ``display`` that is not RGB uint8, a ``display`` of
        another shape than ``image``, or prompts that do not fit the model (:func:`scored_model`).
    MethodOptionError
        For a control value of the wrong type.
    """
    image = rgb_uint8(image)
    scored = scored_model(model, controls.prompts)
    preprocessing = preprocessing or Preprocessing.from_model(model)
    tensor, (geometry,) = preprocessing.batch([Image.fromarray(image)])
    try:
        per_head = explain_classes(model, tensor, ExplainSettings(method="attention", method_options=dict(
            head_fusion=None, layer=-1 if controls.layer is None else controls.layer)))
        heads = per_head.grid_maps[0]
        _check_head(controls.head, len(heads))
        settings = replace(settings, method=controls.method, method_options=method_options(controls))
        result = explain_classes(scored, tensor, settings)
    except OptionOutOfRange as error:  # named as the page names its control (start layer 4), as head is
        raise OptionValueError(f"{_LABELS.get(error.option, error.option)} {error.value}{error.rest}") from None
    grid_map = result.grid_maps[0]
    if grid_map.ndim == 3:  # one map per head: the chosen one
        grid_map = grid_map[controls.head]
    shown = image if display is None else rgb_uint8(display)
    if shown.shape != image.shape:
        raise InputValueError(f"display has shape {shown.shape}, image {image.shape}: it must be the same picture")
    _, overlaid = render(shown, grid_map, geometry, settings)
    names = list(controls.prompts) if controls.prompts else class_names
    top = [] if result.probabilities is None else top_classes(result.probabilities[0], names)
    return Exploration(grid_map=grid_map, overlay=overlaid,
                       head_grid=head_grid(shown, heads, geometry, settings, chosen=controls.head), top=top,
                       ignored=ignored_controls(controls.method, single_head=controls.head is not None,
                                                image_text=bool(controls.prompts)))


def _check_head(head: Optional[int], heads: int) -> None:
    if head is not None and not 0 <= head < heads:
        raise OptionValueError(f"head {head} is out of range for a layer with {heads} heads (0…{heads - 1})")


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
    ndarray, uint8, (rows · (t + label + gap) + gap, columns · (max(t', label width) + gap) + gap, 3) for tiles of
    t × t' pixels: a cell is never narrower than its label.
    """
    thumbnail, thumbnail_geometry = _tile_picture(image, geometry, tile_side)
    tile_hw = thumbnail.shape[:2]
    columns = math.ceil(math.sqrt(len(head_maps)))
    rows = math.ceil(len(head_maps) / columns)
    font = ImageFont.load_default()
    labels = [f"head {index}" for index in range(len(head_maps))]
    label_width = math.ceil(max(font.getlength(label) for label in labels))  # a tall image's tiles are narrower
    cell_h, cell_w = tile_hw[0] + _LABEL_HEIGHT + _TILE_GAP, max(tile_hw[1], label_width) + _TILE_GAP
    canvas = Image.new("RGB", (columns * cell_w + _TILE_GAP, rows * cell_h + _TILE_GAP), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for index, (head_map, label) in enumerate(zip(head_maps, labels)):
        top = _TILE_GAP + (index // columns) * cell_h
        left = _TILE_GAP + (index % columns) * cell_w
        _, tile = render(thumbnail, head_map, thumbnail_geometry, settings)
        canvas.paste(Image.fromarray(tile), (left, top + _LABEL_HEIGHT))
        draw.text((left, top), label, fill=(0, 0, 0), font=font)
        if index == chosen:
            draw.rectangle((left - 2, top + _LABEL_HEIGHT - 2, left + tile_hw[1] + 1,
                            top + _LABEL_HEIGHT + tile_hw[0] + 1), outline=(0, 0, 0), width=2)
    return np.asarray(canvas)


def _tile_picture(image: np.ndarray, geometry: CropGeometry, tile_side: int) -> tuple[np.ndarray, CropGeometry]:
    """The picture (t, t', 3) under each head's map, its long side ``tile_side``, and where the model's input lies in
    it: ``image`` made smaller; for an image more elongated than :data:`MAX_TILE_ASPECT`, the part of it the model
    read, shaped as the model's input."""
    height, width = image.shape[:2]
    picture = Image.fromarray(image)
    if max(height, width) > MAX_TILE_ASPECT * min(height, width):
        top, left, bottom, right = geometry.original_box()
        input_h, input_w = geometry.input_hw
        scale = tile_side / max(input_h, input_w)
        tile_hw = (max(1, round(input_h * scale)), max(1, round(input_w * scale)))
        tile = picture.resize(tile_hw[::-1], Image.Resampling.BILINEAR, box=(left, top, right, bottom))
        # the input itself, shown at the tile's size: its padding (a grid over whole patches) goes with it
        return np.asarray(tile), CropGeometry(original_hw=tile_hw, resized_hw=geometry.input_hw, crop_top_left=(0, 0),
                                              input_hw=geometry.input_hw, padded_hw=geometry.padded_hw)
    scale = tile_side / max(height, width)
    tile_hw = (max(1, round(height * scale)), max(1, round(width * scale)))
    thumbnail = np.asarray(picture.resize(tile_hw[::-1], Image.Resampling.BILINEAR))
    return thumbnail, replace(geometry, original_hw=tile_hw)  # the same crop, seen from a smaller original
