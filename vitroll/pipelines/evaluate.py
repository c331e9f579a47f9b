"""Measure methods on images with ground-truth masks: localisation against the mask, faithfulness against the model.

Images come from a folder (``name.png`` beside ``name_mask.png``) or from the synthetic testbed. Every method
runs on the same batches of the batch stream (:func:`~vitroll.pipelines.stream.decoded_batches`); each image
gets, per method, the pointing game, the energy in the mask, the IoU of the map's top pixels with the mask, and
deletion / insertion AUC for the class the model predicts (or the ``target_class`` the gradient methods are given,
which every method's curves then follow).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import nn

from vitroll.adapters.tokenizers import registered_tokenizer
from vitroll.errors import ImageReadError, OptionValueError, VitrollError
from vitroll.io import load_image
from vitroll.io.images import DEFAULT_MAX_PIXELS, load_image_with_display, load_mask
from vitroll.io.discovery import folder_files, has_image_suffix, reachable
from vitroll.io.writing import write_atomic
from vitroll.maps import to_original
from vitroll.methods import check_shared_options, method_named
from vitroll.methods.base import class_logits, model_device, predict
from vitroll.methods.map_checks import refuse_non_finite_maps
from vitroll.metrics import deletion_insertion, energy_in_mask, pointing_game, rank_correlation, top_fraction_iou
from vitroll.overlay import LITERAL, TITLE_SHARE, fit_text, overlay, use_fallback_fonts
from vitroll.pipelines.evaluate_captions import CAPTION_METRICS, evaluate_captions
from vitroll.pipelines.evaluate_pairs import PAIR_METRICS, evaluate_pairs, pair_images
from vitroll.pipelines.evaluate_text import TEXT_METRICS, evaluate_text, text_sentences
from vitroll.pipelines.explain import figure_bytes
from vitroll.pipelines.stream import Failed, Frame, decoded_batches
from vitroll.preprocess import Preprocessing
from vitroll.testbed.shapes import samples
from vitroll.wording import counted

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MASK_SUFFIX = "_mask"
METRICS = {
    "pointing_game": "pointing game ↑",
    "energy_in_mask": "energy in mask ↑",
    "top10_iou": "top-10 % IoU ↑",
    "deletion_auc": "deletion AUC ↓",
    "insertion_auc": "insertion AUC ↑",
}
"""Per-image metric columns and their table headings (arrows: which way is better)."""


@dataclass(frozen=True)
class MaskedImage:
    """An image with the mask of the object that decides its class."""

    name: str
    image: np.ndarray
    """(H, W, 3) uint8 RGB."""
    mask: np.ndarray
    """(H, W) bool."""
    label: Optional[int] = None
    display: Optional[np.ndarray] = None
    """(H, W, 3) uint8 sRGB picture the figures draw when it differs from ``image`` (a file that embeds a wider
    colour profile, :func:`~vitroll.io.images.load_image_with_display`); None: ``image``."""

    @property
    def shown(self) -> np.ndarray:
        """(H, W, 3) uint8: what the figures draw, ``display`` when given, else ``image``."""
        return self.image if self.display is None else self.display

    def __str__(self) -> str:
        return self.name


def masked_image_frames(item: MaskedImage) -> list[Frame]:
    """The batch stream's reader for an image already in memory: one frame, its mask left behind."""
    return [Frame(item.image)]


def shapes_images(count: int, seed: int = 3) -> list[MaskedImage]:
    """``count`` testbed images of split ``seed`` (3: the shipped model's held-out test split)."""
    return [MaskedImage(f"shapes-{seed}-{i:04d}", s.image, s.mask, s.label) for i, s in enumerate(samples(seed, count))]


def _images_and_masks(folder: "str | os.PathLike[str]") -> tuple[list[Path], dict[str, Path]]:
    """The image files of ``folder`` that are not masks, sorted by name, and each name's first mask by name."""
    folder = Path(folder)
    if not reachable(folder).is_dir():  # a mistyped name is told as such, not as "not a folder"
        raise ImageReadError(folder, "not a folder" if folder.exists() else "no such folder")
    files = [file.path for file in folder_files(folder, accept=has_image_suffix, recursive=False)]
    mask_of: dict[str, Path] = {}
    for path in files:
        if path.stem.endswith(MASK_SUFFIX):
            mask_of.setdefault(path.stem[: -len(MASK_SUFFIX)], path)
    return [path for path in files if not path.stem.endswith(MASK_SUFFIX)], mask_of


class FolderImages(list[MaskedImage]):
    """:func:`folder_images`' answer: the images that have a mask, in a list, and ``without_mask``, the names of the
    images left out for want of one (``dog.jpg`` without ``dog_mask.*``), sorted."""

    def __init__(self, images: Sequence[MaskedImage], without_mask: Sequence[str]) -> None:
        super().__init__(images)
        self.without_mask: tuple[str, ...] = tuple(without_mask)


def folder_images(folder: "str | os.PathLike[str]", *,
                  max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> FolderImages:
    """Every image in ``folder`` that has a mask beside it (``cat.jpg`` + ``cat_mask.png``), sorted by name; the
    names of the images without one in the answer's ``without_mask`` (:class:`FolderImages`).

    Files are found by the rules of :mod:`vitroll.io.discovery` (image suffixes, hidden names skipped, not
    recursive). A mask is any image; its non-zero pixels are the object, or where it has transparency its opaque
    pixels (:func:`~vitroll.io.images.load_mask`); of several masks of one image
    (``cat_mask.jpg``, ``cat_mask.png``) the first by name is used. Raises :class:`ImageReadError` for an unreadable
    file, an image or mask larger than ``max_pixels`` (:func:`~vitroll.io.images.load_image`), a mask whose size
    differs from its image or one without any object pixel.
    """
    images, mask_of = _images_and_masks(folder)
    found, without_mask = [], []
    for path in images:
        if path.stem not in mask_of:
            without_mask.append(path.name)
            continue
        picture, display = load_image_with_display(path, max_pixels=max_pixels)
        image = np.asarray(picture)
        mask = load_mask(mask_of[path.stem], max_pixels=max_pixels)
        if mask.shape != image.shape[:2]:
            raise ImageReadError(mask_of[path.stem], f"mask is {mask.shape[1]}×{mask.shape[0]} but its image is "
                                                     f"{image.shape[1]}×{image.shape[0]}")
        if not mask.any():
            raise ImageReadError(mask_of[path.stem], "mask has no object pixel (all zero, or all transparent): every "
                                                     "method would score 0 on it; give the object's mask, or remove "
                                                     "this mask to leave its image out")
        # named with its suffix: a.png and a.jpg beside a_mask.png were two rows "a" in per_image.csv
        found.append(MaskedImage(path.name, image, mask, display=None if display is None else np.asarray(display)))
    if not found:
        raise ImageReadError(Path(folder), f"no image has a mask beside it (expected NAME{MASK_SUFFIX}.png)")
    return FolderImages(found, without_mask)


def folder_images_without_masks(folder: "str | os.PathLike[str]", *,
                                max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> list[tuple[str, np.ndarray]]:
    """Every image in ``folder`` as (its file name, (H, W, 3) uint8 RGB), sorted by name, with or without a mask
    beside it: for checks that need no mask (:func:`~vitroll.pipelines.sanity.sanity_check`, whose errors name an
    image by its file). Found as by :func:`folder_images`; files named ``NAME_mask.*`` are masks and left out. Raises
    :class:`ImageReadError` for an unreadable file, one larger than ``max_pixels`` or a folder without images."""
    images, _ = _images_and_masks(folder)
    if not images:
        raise ImageReadError(Path(folder), "no image in this folder (PNG, JPEG, TIFF, BMP, GIF, WebP, PPM/PGM)")
    return [(path.name, np.asarray(load_image(path, max_pixels=max_pixels))) for path in images]


@dataclass
class Evaluation:
    """Per-image scores, deletion/insertion curves and (for figures) the first few maps of every method."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    fractions: Optional[np.ndarray] = None
    curves: dict[str, dict[str, list[np.ndarray]]] = field(default_factory=dict)
    """method → {"deletion": [(S + 1,) per image], "insertion": […]}."""
    examples: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """method → maps in original pixels for the first ``keep_examples`` images."""
    grid_maps: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """method → per image the map on the patch grid (h, w)."""

    def disagreement(self, first: str, second: str) -> np.ndarray:
        """Per image, Spearman correlation between two methods' maps (on the patch grid), (n,).

        Strongly negative or near-zero values mark images where, say, attention and gradients tell different
        stories — worth a look when debugging a model."""
        return rank_correlation(np.stack(self.grid_maps[first]), np.stack(self.grid_maps[second]))

    def disagreement_rows(self, first: str, second: str, below: float) -> list[dict[str, Any]]:
        """Per image, in order, its name, the Spearman correlation of two methods' maps (:meth:`disagreement`) and
        whether it is flagged, ``below`` that correlation: the rows of ``disagreement.csv``."""
        names = list(dict.fromkeys(row["image"] for row in self.rows))
        return [dict(image=name, spearman=float(correlation), flagged=bool(correlation < below))
                for name, correlation in zip(names, self.disagreement(first, second))]


def evaluate(
    model: nn.Module,
    images: Sequence[MaskedImage],
    methods: Sequence[str],
    *,
    method_options: Optional[dict[str, Any]] = None,
    preprocessing: Optional[Preprocessing] = None,
    batch_size: int = 16,
    steps: int = 16,
    substrate: str = "mean",
    keep_examples: int = 6,
) -> Evaluation:
    """Run every method on every image and score it (see the module docstring)."""
    runs = {name: method_named(name) for name in methods}
    shared = check_shared_options(runs.values(), method_options or {})
    target = shared.get("target_class")
    preprocessing = preprocessing or Preprocessing.from_model(model)
    # a method named twice runs once
    result = Evaluation(examples={m: [] for m in runs}, grid_maps={m: [] for m in runs},
                        curves={m: {"deletion": [], "insertion": []} for m in runs})
    for batch in decoded_batches(images, masked_image_frames, preprocessing, batch_size=batch_size,
                                 device=model_device(model)):
        failed = [record for record in batch.records if isinstance(record, Failed)]
        if failed:
            raise VitrollError(failed[0].message)
        tensor, decoded = batch.tensor, batch.decoded
        _batch, logits, layout = predict(model, tensor, class_logits)
        predicted = logits.argmax(dim=-1)
        tracked = predicted if target is None else torch.as_tensor(target, device=predicted.device).expand_as(predicted)
        for method in runs:
            saliency = runs[method](model, tensor, **runs[method].among(shared))
            refuse_non_finite_maps(tensor, [(method, saliency.maps)], [frame.item.name for frame in decoded],
                                   "evaluate stops: its means are over every image, and this map has no score")
            curves = deletion_insertion(model, tensor, saliency.maps, tracked, steps=steps, substrate=substrate,
                                        padded_hw=layout.padded_hw)
            result.fractions = curves.fractions
            grid_maps = saliency.maps.float().cpu().numpy()
            for i, frame in enumerate(decoded):
                item, in_pixels = frame.item, to_original(grid_maps[i], frame.geometry)
                result.rows.append(dict(
                    image=item.name, method=method, label=item.label, predicted=int(predicted[i]),
                    pointing_game=float(pointing_game(in_pixels, item.mask)[0]),
                    energy_in_mask=float(energy_in_mask(in_pixels, item.mask)[0]),
                    top10_iou=float(top_fraction_iou(in_pixels, item.mask, 0.1)[0]),
                    deletion_auc=float(curves.deletion_auc[i]), insertion_auc=float(curves.insertion_auc[i]),
                ))
                result.grid_maps[method].append(grid_maps[i])
                result.curves[method]["deletion"].append(curves.deletion[i])
                result.curves[method]["insertion"].append(curves.insertion[i])
                if frame.index < keep_examples:
                    result.examples[method].append(in_pixels)
    return result


INTERVAL = "mean ± 95 % CI (Student's t)"
"""What a ``mean ± x`` cell of :func:`markdown_table` is, for the line above a table."""


def mean_and_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval, Student's t: t₀.₉₇₅(n − 1)·s/√n (at n = 4, 3.182·s/2
    where the normal approximation's 1.96·s/2 would claim too narrow an interval). NaN half-width below 2 values."""
    from scipy.stats import t

    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return float(values.mean()) if len(values) else math.nan, math.nan
    quantile = t.ppf(0.975, len(values) - 1)
    return float(values.mean()), float(quantile * values.std(ddof=1) / math.sqrt(len(values)))


def summarize(rows: Sequence[dict[str, Any]], metrics: Mapping[str, str] = METRICS) -> list[dict[str, Any]]:
    """One row per method: ``<metric>`` mean and ``<metric>_ci95`` for every metric of ``metrics`` (column → heading;
    the image testbed's by default), plus ``images`` (how many rows it has)."""
    methods = list(dict.fromkeys(row["method"] for row in rows))
    table = []
    for method in methods:
        mine = [row for row in rows if row["method"] == method]
        entry: dict[str, Any] = {"method": method, "images": len(mine)}
        for metric in metrics:
            entry[metric], entry[f"{metric}_ci95"] = mean_and_ci([row[metric] for row in mine])
        table.append(entry)
    return table


def markdown_table(summary: Sequence[dict[str, Any]], metrics: Mapping[str, str] = METRICS) -> str:
    """The summary as a Markdown table, ``mean ± ci95`` per cell (the mean alone where one value leaves no
    interval), a column per metric of ``metrics``."""
    header = "| method | " + " | ".join(metrics.values()) + " |"
    lines = [header, "|---" * (len(metrics) + 1) + "|"]
    for entry in summary:
        cells = [f"{entry[m]:.3f}" + ("" if math.isnan(entry[f"{m}_ci95"]) else f" ± {entry[f'{m}_ci95']:.3f}")
                 for m in metrics]
        lines.append(f"| {entry['method']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


CURVES_SIZE = (10.0, 4.0)
"""Inches of :func:`curves_figure`."""
EXAMPLE_PANEL = 1.6
"""Inches across one panel of :func:`examples_figure`."""
EXAMPLE_TITLE_SIZE = 9.0


def curves_figure(evaluation: Evaluation) -> "Figure":
    """Mean deletion and insertion curves per method, side by side; the legend names every method as written (a
    name that starts with ``_``, which matplotlib would leave out, and ``$`` too)."""
    from matplotlib.figure import Figure

    use_fallback_fonts()
    fig = Figure(figsize=CURVES_SIZE, layout="tight")
    axes = fig.subplots(1, 2, sharey=True)
    for method, curves in evaluation.curves.items():
        for axis, kind in zip(axes, ("deletion", "insertion")):
            axis.plot(evaluation.fractions, np.mean(curves[kind], axis=0))
    for axis, kind in zip(axes, ("deletion (lower is better)", "insertion (higher is better)")):
        axis.set_title(kind)
        axis.set_xlabel("fraction of pixels changed")
    axes[0].set_ylabel("probability of the predicted class")
    legend = axes[1].legend(axes[1].get_lines(), list(evaluation.curves), fontsize=8)
    for text in legend.get_texts():
        text.set(**LITERAL)
    return fig


def plot_curves(evaluation: Evaluation, path: "str | os.PathLike[str]") -> None:
    """:func:`curves_figure` as a PNG."""
    write_atomic(path, figure_bytes(curves_figure(evaluation)))


def examples_figure(evaluation: Evaluation, images: Sequence[MaskedImage], cmap: str = "jet") -> "Figure":
    """Images × methods grid of overlays (first column: the image with its mask outlined), each method's name drawn
    as written over its column."""
    import cv2
    from matplotlib.figure import Figure

    methods = list(evaluation.examples)
    count = min(len(images), min(len(v) for v in evaluation.examples.values()))
    fig = Figure(figsize=(EXAMPLE_PANEL * (len(methods) + 1), EXAMPLE_PANEL * count), layout="tight")
    axes = fig.subplots(count, len(methods) + 1, squeeze=False)
    for row in range(count):
        outlined = images[row].shown.copy()
        contours, _ = cv2.findContours(images[row].mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(outlined, contours, -1, (255, 255, 255), 1)
        axes[row, 0].imshow(outlined)
        for column, method in enumerate(methods, start=1):
            axes[row, column].imshow(overlay(images[row].shown, evaluation.examples[method][row], cmap=cmap))
    titles = ["image + mask", *methods]
    for axis, title in zip(axes[0], titles):
        axis.set_title(fit_text(title, EXAMPLE_PANEL * TITLE_SHARE, EXAMPLE_TITLE_SIZE, lines=2),
                       fontsize=EXAMPLE_TITLE_SIZE, **LITERAL)
    for axis in axes.flat:
        axis.axis("off")
    return fig


def plot_examples(evaluation: Evaluation, images: Sequence[MaskedImage], path: "str | os.PathLike[str]",
                  cmap: str = "jet") -> None:
    """:func:`examples_figure` as a PNG."""
    write_atomic(path, figure_bytes(examples_figure(evaluation, images, cmap)))


GENERATED_TESTBEDS = ("pairs", "text", "captions")
"""The generated testbeds with metrics of their own (:func:`evaluate_testbed`): the two-shape images with a prompt
naming one (an image–text model), the key-word sentences (a text classifier) and the two-shape images captioned (a
captioner)."""


@dataclass(frozen=True)
class GeneratedScores:
    """What :func:`evaluate_testbed` measured."""

    rows: list[dict[str, Any]]
    """One per input and method, with the testbed's metrics."""
    metrics: Mapping[str, str]
    """The testbed's metrics, column → heading (:func:`summarize`, :func:`markdown_table`)."""
    source: str
    """What was drawn, for the line above a table: ``200 key-word sentences, seed 3``."""


def evaluate_testbed(model: nn.Module, kind: str, count: int, seed: int, methods: Sequence[str], *,
                     method_options: Optional[Mapping[str, object]] = None, batch_size: int = 16) -> GeneratedScores:
    """Score ``methods`` on ``count`` inputs of split ``seed`` of the generated testbed ``kind`` (one of
    :data:`GENERATED_TESTBEDS`), with that testbed's own metrics; the text and caption testbeds use the tokenizer
    registered with ``model``. The captioning testbed takes only ``head_fusion``, ``attention_weight`` (rollout's)
    and ``window`` (occlusion's) of ``method_options``.

    Raises
    ------
    OptionValueError
        ``kind`` is none of :data:`GENERATED_TESTBEDS`.
    MethodOptionError
        An option the testbed's methods do not take (for the captions:
        :func:`~vitroll.pipelines.evaluate_captions.check_caption_options`).
    """
    method_options = dict(method_options or {})
    if kind == "pairs":
        rows = evaluate_pairs(model, pair_images(count, seed), methods, method_options=method_options,
                              batch_size=batch_size)
        return GeneratedScores(rows, PAIR_METRICS, f"{counted(count, 'two-shape image')}, seed {seed}")
    if kind == "captions":
        rows = evaluate_captions(model, registered_tokenizer(model), pair_images(count, seed), methods,
                                 batch_size=batch_size, method_options=method_options)
        return GeneratedScores(rows, CAPTION_METRICS, f"{counted(count, 'captioned two-shape image')}, seed {seed}")
    if kind == "text":
        rows = evaluate_text(model, registered_tokenizer(model), text_sentences(count, seed), methods,
                             method_options=method_options, batch_size=batch_size)
        return GeneratedScores(rows, TEXT_METRICS, f"{counted(count, 'key-word sentence')}, seed {seed}")
    raise OptionValueError(f"kind={kind!r}: the generated testbeds are {', '.join(GENERATED_TESTBEDS)}")
