"""Compare where different models (or methods) look, in the original image's pixels.

Models may differ in patch size and input size, so every map is first placed on its original image through
its own preprocessing geometry; agreement is then measured between maps of the same image: Spearman rank
correlation over the pixels both models saw, and the IoU of their top 10 % pixels.
"""

from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

import cv2
import numpy as np
from torch import nn

from vitroll.errors import OptionValueError
from vitroll.io.discovery import unique_paths
from vitroll.io.images import DEFAULT_MAX_PIXELS
from vitroll.io.writing import write_atomic
from vitroll.metrics import rank_correlation, top_fraction_iou
from vitroll.overlay import LITERAL, TITLE_SHARE, fit_text
from vitroll.pipelines.explain import ExplainSettings, figure_bytes, render, top_classes, warn_of_sights
from vitroll.pipelines.stream import Explained, Failed, explain_stream, read_image
from vitroll.preprocess import Preprocessing
from vitroll.wording import counted

if TYPE_CHECKING:
    from matplotlib.figure import Figure

AGREEMENT_SIDE = 256
"""Maps are compared at most this many pixels on the long side (nearest-neighbour, so NaN stays NaN)."""


@dataclass(frozen=True)
class Explainer:
    """A model under comparison, with how its inputs are prepared and its class names."""

    label: str
    model: nn.Module
    preprocessing: Preprocessing
    class_names: Optional[list[str]] = None


@dataclass
class Comparison:
    images: list[Path] = field(default_factory=list)
    pictures: list[np.ndarray] = field(default_factory=list)
    """Per image (H, W, 3) RGB."""
    maps: dict[str, list[np.ndarray]] = field(default_factory=dict)
    """label → per image the map in original pixels (H, W), NaN where that model saw nothing."""
    overlays: dict[str, list[np.ndarray]] = field(default_factory=dict)
    predictions: dict[str, list[str]] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    """Per image and pair of models: spearman, top10_iou."""
    errors: list[str] = field(default_factory=list)
    sights: list[tuple[str, float, float]] = field(default_factory=list)
    """Per image, and model that read it otherwise, its path, the pixels a patch covers a side and the share of it the
    model saw, for :func:`~vitroll.pipelines.explain.sight_warnings`."""


def agreement(first: np.ndarray, second: np.ndarray) -> tuple[float, float]:
    """(Spearman correlation, top-10 % IoU) of two maps of one image (H, W), compared at ≤ AGREEMENT_SIDE px."""
    height, width = first.shape
    scale = min(1.0, AGREEMENT_SIDE / max(height, width))
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    a, b = (cv2.resize(m.astype(np.float32), size, interpolation=cv2.INTER_NEAREST) for m in (first, second))
    return float(rank_correlation(a, b)[0]), float(top_fraction_iou(a, b, 0.1)[0])


def compare(paths: Sequence["str | os.PathLike[str]"], explainers: Sequence[Explainer], settings: ExplainSettings,
            *, batch_size: int = 8, max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> Comparison:
    """Explain every image with every model and measure their agreement pair by pair.

    Each model reads the images through the batch stream with its own preprocessing; unreadable images, and images
    larger than ``max_pixels`` (:func:`~vitroll.io.images.load_image`), are listed in ``errors`` (one line each)
    and skipped. An image given twice is compared once.

    Raises
    ------
    ValueError
        When two explainers share a label (their maps are kept by label, so one would hide the other).
    """
    labels = [explainer.label for explainer in explainers]
    repeated = list(dict.fromkeys(label for label in labels if labels.count(label) > 1))
    if repeated:
        raise OptionValueError(f"each explainer needs its own label; {', '.join(map(repr, repeated))} is given "
                               f"to {labels.count(repeated[0])} of them")
    paths = unique_paths(paths)
    reader = functools.partial(read_image, max_pixels=max_pixels)
    explained: dict[str, dict[int, Explained]] = {}
    failures: dict[int, str] = {}
    for explainer in explainers:
        explained[explainer.label] = {}
        for record in explain_stream(explainer.model, paths, reader, explainer.preprocessing, settings,
                                     batch_size=batch_size):
            if isinstance(record, Failed):
                failures.setdefault(record.index, record.message)
            else:
                explained[explainer.label][record.index] = record
    good = [index for index in range(len(paths)) if index not in failures]
    result = Comparison(images=[paths[index] for index in good], errors=[failures[i] for i in sorted(failures)],
                        maps={e.label: [] for e in explainers}, overlays={e.label: [] for e in explainers},
                        predictions={e.label: [] for e in explainers})
    for explainer in explainers:
        for index in good:
            record = explained[explainer.label][index]
            saliency, overlaid = render(record.image, record.grid_map, record.geometry, settings)
            result.maps[explainer.label].append(saliency)
            result.overlays[explainer.label].append(overlaid)
            result.sights.append((str(paths[index]), record.geometry.pixels_per_patch(record.grid_map.shape[-2:]),
                                  record.geometry.seen_share()))
            best = top_classes(record.probabilities, explainer.class_names, k=1)[0]
            result.predictions[explainer.label].append(f"{best[1]} ({best[2]:.0%})")
    result.sights = list(dict.fromkeys(result.sights))  # models that read an image alike: told once
    warn_of_sights(result.sights, None)  # each model reads the images its own way: no one setting for it
    result.pictures = [explained[explainers[0].label][index].image for index in good] if explainers else []
    for index, path in enumerate(result.images):
        for first, second in itertools.combinations([e.label for e in explainers], 2):
            spearman, iou = agreement(result.maps[first][index], result.maps[second][index])
            result.rows.append(dict(image=str(path), model_a=first, model_b=second, spearman=spearman, top10_iou=iou))
    return result


def pair_summaries(rows: Sequence[dict]) -> list[str]:
    """One line per pair of models: mean Spearman and top-10 % IoU over the images."""
    lines = []
    for pair in dict.fromkeys((r["model_a"], r["model_b"]) for r in rows):
        mine = [r for r in rows if (r["model_a"], r["model_b"]) == pair]
        lines.append(f"{pair[0]} vs {pair[1]}: Spearman {np.mean([r['spearman'] for r in mine]):.3f}, "
                     f"top-10 % IoU {np.mean([r['top10_iou'] for r in mine]):.3f} over {counted(len(mine), 'image')}")
    return lines


def comparison_figure(result: Comparison) -> "Figure":
    """Images × models grid of overlays, each titled with that model's top-1 prediction (names drawn as written)."""
    from matplotlib.figure import Figure

    labels = list(result.maps)
    rows, columns = len(result.images), len(labels) + 1
    panel = 2.6
    fig = Figure(figsize=(panel * columns, 2.4 * rows), layout="tight")
    axes = fig.subplots(rows, columns, squeeze=False)
    for row, image_path in enumerate(result.images):
        axes[row, 0].imshow(result.pictures[row])
        axes[row, 0].set_title(fit_text(Path(image_path).name, panel * TITLE_SHARE, 8), fontsize=8, **LITERAL)
        for column, label in enumerate(labels, start=1):
            axes[row, column].imshow(result.overlays[label][row])
            title = (fit_text(label, panel * TITLE_SHARE, 7, lines=1) + "\n"
                     + fit_text(result.predictions[label][row], panel * TITLE_SHARE, 7, lines=2))
            axes[row, column].set_title(title, fontsize=7, **LITERAL)
    for axis in axes.flat:
        axis.axis("off")
    return fig


def plot_comparison(result: Comparison, path: "str | os.PathLike[str]") -> None:
    """:func:`comparison_figure` as a PNG."""
    write_atomic(path, figure_bytes(comparison_figure(result)))
