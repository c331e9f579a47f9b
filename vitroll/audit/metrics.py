"""Where a saliency map puts its mass on a medical image: outside the body, in the border, on burned-in text, in an ROI.

All functions take the map in original-image pixels (``maps.to_original``; NaN where the model saw nothing)
and turn it into a distribution that sums to 1 (:func:`mass`); every fraction below is a share of that mass.
Masks are boolean arrays of the image's (H, W).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import cv2
import numpy as np

from vitroll.errors import ImageReadError, ImageTooLargeError, InputValueError
from vitroll.io.dicom import UNKNOWN
from vitroll.io.images import DEFAULT_MAX_PIXELS, load_mask
from vitroll.io.textfile import read_text_file
from vitroll.wording import argument

ROI_METRICS = ("roi_energy", "pointing_hit", "topk_iou")
"""The metrics measured only where an image has a region of interest."""
METRIC_NAMES = ("outside_body", "border", "annotation", *ROI_METRICS)
"""Per-image metrics, in report order (the last three only where an ROI is given)."""


def grey_of(image: np.ndarray) -> np.ndarray:
    """(H, W) uint8 grey values of an RGB (H, W, 3) or grey (H, W) uint8 image."""
    image = np.asarray(image)
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY) if image.ndim == 3 else image.astype(np.uint8)


def fill_holes(mask: np.ndarray) -> np.ndarray:
    """``mask`` with every background region not connected to the image border filled in."""
    padded = np.pad(mask.astype(np.uint8) * 255, 1)
    flood = padded.copy()
    cv2.floodFill(flood, np.zeros((flood.shape[0] + 2, flood.shape[1] + 2), np.uint8), (0, 0), 255)
    return mask.astype(bool) | (flood == 0)[1:-1, 1:-1]


def largest_component(mask: np.ndarray) -> np.ndarray:
    """The largest 8-connected component of ``mask`` (all False when it is empty)."""
    count, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if count <= 1:
        return np.zeros(mask.shape, dtype=bool)
    biggest = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    return labels == biggest


def body_mask(image: np.ndarray) -> np.ndarray:
    """The body: Otsu threshold of the (slightly blurred) grey image, largest connected component, holes filled.

    Assumes the body is brighter than the surrounding air (true after windowing and MONOCHROME1 inversion).
    A constant image is all body (nothing can be told apart).
    """
    grey = grey_of(image)
    if int(grey.max()) == int(grey.min()):
        return np.ones(grey.shape, dtype=bool)
    blurred = cv2.GaussianBlur(grey, (5, 5), 0)
    _, binary = cv2.threshold(blurred, 0, 1, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    return fill_holes(largest_component(binary > 0))


NO_BODY_OUTLINE = {
    "US": "ultrasound", "IVUS": "intravascular ultrasound", "XC": "external-camera photography",
    "ES": "endoscopy", "OP": "ophthalmic photography", "OPT": "ophthalmic tomography", "IVOCT": "intravascular OCT",
    "GM": "general microscopy", "SM": "slide microscopy",
}
"""Modalities whose images show no body against dark air: an Otsu outline traces tissue echoes, a lit scene or a
stained slide, never the body's edge."""

GREY_RADIOLOGY = frozenset({"CT", "MR", "CR", "DX", "MG", "RF", "XA", "PT", "NM", "PX", "IO", "RG", "DR"})
"""Modalities whose colour images (fused or pseudo-colour displays) still show the body against dark air."""


def body_outline_exemption(modality: str, colour: bool) -> Optional[str]:
    """Why the automatic body outline does not apply to an image (so the share outside it is not measured), or None.

    It does not apply to the modalities in :data:`NO_BODY_OUTLINE`, nor to colour images of any other modality
    outside :data:`GREY_RADIOLOGY` (OT, SC, unstated: photographs, screen captures, renderings).
    """
    modality = modality.strip().upper()
    if modality in NO_BODY_OUTLINE:
        return (f"not measured: the body outline does not apply to {NO_BODY_OUTLINE[modality]} (Modality {modality}); "
                f"pass {argument('body_masks')} to measure it")
    if colour and modality not in GREY_RADIOLOGY:
        stated = f"Modality {modality}" if modality and modality.lower() != UNKNOWN else "no Modality"
        return (f"not measured: a colour image with {stated} (a photograph, screen capture or rendering) has no body "
                f"outline to threshold; pass {argument('body_masks')} to measure it")
    return None


def border_band(shape_hw: tuple[int, int], fraction: float = 0.05) -> np.ndarray:
    """Pixels within ``fraction`` of the height (top, bottom) or of the width (left, right) from the edge."""
    height, width = shape_hw
    band_h, band_w = max(1, round(fraction * height)), max(1, round(fraction * width))
    band = np.zeros((height, width), dtype=bool)
    band[:band_h], band[-band_h:], band[:, :band_w], band[:, -band_w:] = True, True, True, True
    return band


def annotation_mask(
    image: np.ndarray, body: Optional[np.ndarray] = None, *, max_area_fraction: float = 0.02,
    threshold_fraction: float = 0.9, min_contrast: int = 80,
) -> np.ndarray:
    """Likely burned-in annotations (text, side markers, rulers): small, bright, high-contrast components.

    A component counts when its pixels are ≥ ``threshold_fraction`` of the image maximum, it covers less than
    ``max_area_fraction`` of the image, its mean is at least ``min_contrast`` grey levels above the median of a
    thin ring around it, and (when ``body`` is given) most of it lies outside the body. The mask is dilated by
    1 % of the shorter side so that it covers the strokes' surroundings.
    """
    grey = grey_of(image)
    peak = int(grey.max())
    found = np.zeros(grey.shape, dtype=bool)
    if peak < 64:
        return found
    binary = (grey >= math.ceil(threshold_fraction * peak)).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(binary, connectivity=8)
    limit = max_area_fraction * grey.size
    ring_kernel = np.ones((5, 5), np.uint8)
    for label in range(1, count):
        if stats[label, cv2.CC_STAT_AREA] >= limit:
            continue
        x, y, w, h = (int(v) for v in stats[label, :4])
        top, left = max(0, y - 3), max(0, x - 3)
        window = labels[top:y + h + 3, left:x + w + 3] == label
        ring = cv2.dilate(window.astype(np.uint8), ring_kernel).astype(bool) & ~window
        patch = grey[top:y + h + 3, left:x + w + 3]
        if not ring.any() or patch[window].mean() - np.median(patch[ring]) < min_contrast:
            continue
        if body is not None and body[top:y + h + 3, left:x + w + 3][window].mean() > 0.5:
            continue
        found[top:y + h + 3, left:x + w + 3] |= window
    if found.any():
        margin = max(1, round(0.01 * min(grey.shape)))
        found = cv2.dilate(found.astype(np.uint8), np.ones((2 * margin + 1, 2 * margin + 1), np.uint8)).astype(bool)
    return found


def mass(saliency: np.ndarray) -> Optional[np.ndarray]:
    """The map as a distribution over pixels: NaN and negatives → 0, divided by the sum; None when it is all zero."""
    values = np.nan_to_num(np.asarray(saliency, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    values = np.clip(values, 0.0, None)
    total = values.sum()
    return values / total if total > 0 else None


def top_region(p: np.ndarray, percent: float) -> np.ndarray:
    """The ``percent`` % of pixels with the most mass (at least one pixel)."""
    flat = p.ravel()
    k = min(flat.size, max(1, int(round(percent / 100.0 * flat.size))))
    region = np.zeros(flat.size, dtype=bool)
    region[np.argpartition(flat, flat.size - k)[flat.size - k:]] = True
    return region.reshape(p.shape)


def roi_metrics(p: np.ndarray, roi: np.ndarray, *, top_percent: float = 5.0) -> dict[str, float]:
    """Energy inside the ROI, pointing game (the peak pixel inside the ROI: 1/0) and IoU of the top ``top_percent``
    %."""
    roi = roi.astype(bool)
    top = top_region(p, top_percent)
    union = np.count_nonzero(top | roi)
    peak = np.unravel_index(int(np.argmax(p)), p.shape)
    return {
        "roi_energy": float(p[roi].sum()),
        "pointing_hit": float(roi[peak]),
        "topk_iou": float(np.count_nonzero(top & roi) / union) if union else float("nan"),
    }


@dataclass(frozen=True)
class MetricSettings:
    border_fraction: float = 0.05
    """Width of the border band as a fraction of each side."""
    top_percent: float = 5.0
    """Size of the top region for the IoU with the ROI, in % of the pixels."""


def image_metrics(
    saliency: np.ndarray, body: Optional[np.ndarray], annotations: np.ndarray, roi: Optional[np.ndarray] = None,
    settings: MetricSettings = MetricSettings(),
) -> dict[str, float]:
    """All metrics of one image: fractions of the map's mass outside ``body`` (NaN without a body), in the border
    band, on ``annotations``, and the ROI metrics when ``roi`` is given (else NaN). All NaN when the map has no mass."""
    metrics = {name: float("nan") for name in METRIC_NAMES}
    p = mass(saliency)
    if p is None:
        return metrics
    if body is not None:
        metrics["outside_body"] = float(p[~body].sum())
    metrics["border"] = float(p[border_band(p.shape, settings.border_fraction)].sum())
    metrics["annotation"] = float(p[annotations].sum())
    if roi is not None:
        metrics.update(roi_metrics(p, roi, top_percent=settings.top_percent))
    return metrics


class MaskShapeError(InputValueError):
    """A mask file whose width to height is not its image's: stretched onto the image (as a mask of the same shape at
    another scale is), its region would not lie where it was drawn. Its message names the file and both sizes."""


def _scaled_copy(mask_hw: tuple[int, int], shape_hw: tuple[int, int]) -> bool:
    """Whether a mask of ``mask_hw`` pixels is an image of ``shape_hw`` at some scale: each side rounded to whole
    pixels moves height × width apart by at most half the sum of the larger pair's sides."""
    (height, width), (rows, columns) = mask_hw, shape_hw
    return abs(height * columns - width * rows) <= max(height + width, rows + columns) / 2


def _read_mask(path: Path, shape_hw: tuple[int, int], max_pixels: Optional[int]) -> np.ndarray:
    try:
        mask = load_mask(path, max_pixels=max_pixels)
    except ImageTooLargeError:
        raise
    except ImageReadError:
        raise InputValueError(f"cannot read mask image {path.name}") from None
    if mask.shape != tuple(shape_hw):
        if not _scaled_copy(mask.shape, shape_hw):
            raise MaskShapeError(f"mask image {path.name} is {mask.shape[1]} × {mask.shape[0]} pixels, not the "
                                 f"image's {shape_hw[1]} × {shape_hw[0]} at any scale")
        mask = cv2.resize(mask.astype(np.uint8), (shape_hw[1], shape_hw[0]), interpolation=cv2.INTER_NEAREST)
    return mask > 0


def _without_tracebacks(error: Exception) -> Exception:
    """``error`` with no traceback, nor its cause or context: kept, a traceback holds its frames and their callers'
    alive (an audit's image being measured), as many as the error is raised again."""
    chain: list[BaseException] = []
    link: Optional[BaseException] = error
    while link is not None and all(link is not done for done in chain):  # a chain may loop back
        link.__traceback__ = None
        chain.append(link)
        link = link.__cause__ or link.__context__
    return error


class MaskSource:
    """Masks by image stem: PNG files ``DIR/<stem>.png`` and/or boxes from a CSV ``file,x0,y0,x1,y1``.

    Box coordinates are original-image pixels, ``x1``/``y1`` exclusive; the ``file`` column may hold the
    image's file name or stem. Several boxes of one file are united. The last mask made (or the error its PNG gave) is
    kept for the next call of the same image at the same size: the frames of a multi-frame file come one after
    another, and its PNG is decoded once, not once a frame.
    """

    def __init__(self, folder: "str | os.PathLike[str] | None" = None,
                 boxes_csv: "str | os.PathLike[str] | None" = None):
        self.folder = Path(folder) if folder is not None else None
        if self.folder is not None and not self.folder.is_dir():
            raise InputValueError(f"mask folder {self.folder} "
                                  + ("is a file, not a folder" if self.folder.exists() else "does not exist"))
        self.boxes: dict[str, list[tuple[int, int, int, int]]] = {}
        if boxes_csv is not None:
            self.boxes = read_boxes(boxes_csv)
        self._last: Optional[tuple[tuple[Path, tuple[int, int], Optional[int]], "np.ndarray | Exception | None"]] = None

    def __bool__(self) -> bool:
        return self.folder is not None or bool(self.boxes)

    def get(self, image_path: Path, shape_hw: tuple[int, int], *,
            max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> Optional[np.ndarray]:
        """The mask of ``image_path`` at ``shape_hw``, or None when neither a PNG nor a box names it. Its PNG is read
        as :func:`~vitroll.io.images.load_mask` reads a mask (transparency, or non-zero pixels of any depth).

        Raises :class:`ValueError` when its PNG cannot be read as an image, an
        :class:`~vitroll.errors.ImageTooLargeError` when it is larger than ``max_pixels`` (refused from its header).
        """
        key = (image_path, tuple(shape_hw), max_pixels)
        if self._last is None or self._last[0] != key:
            try:
                self._last = key, self._made(image_path, shape_hw, max_pixels)
            except (ValueError, ImageTooLargeError) as error:
                self._last = key, _without_tracebacks(error)
        made = self._last[1]
        if isinstance(made, Exception):
            raise made.with_traceback(None)  # raised as it was, its traceback would grow by this call's frames
        return None if made is None else made.copy()  # the caller's to change, the kept one not

    def _made(self, image_path: Path, shape_hw: tuple[int, int], max_pixels: Optional[int]) -> Optional[np.ndarray]:
        mask = None
        if self.folder is not None:
            candidate = self.folder / f"{image_path.stem}.png"
            if candidate.is_file():
                mask = _read_mask(candidate, shape_hw, max_pixels)
        boxes = [box for key in {image_path.name, image_path.stem} for box in self.boxes.get(key, [])]
        if boxes:
            mask = np.zeros(shape_hw, dtype=bool) if mask is None else mask
            for x0, y0, x1, y1 in boxes:
                mask[max(0, y0):max(0, y1), max(0, x0):max(0, x1)] = True
        return mask


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _box(row: list[str]) -> tuple[int, int, int, int]:
    """The box of a ``file,x0,y0,x1,y1`` row; :class:`ValueError` saying what is wrong with it."""
    if not row[0].strip():
        raise ValueError("the file column is empty")
    try:
        numbers = [float(value) for value in row[1:]]
    except ValueError:
        raise ValueError(f"box coordinates must be numbers; got {','.join(row[1:])}") from None
    if not all(math.isfinite(number) for number in numbers):
        raise ValueError(f"box coordinates must be finite numbers; got {','.join(row[1:])}")
    x0, y0, x1, y1 = (int(round(number)) for number in numbers)
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"the box {x0},{y0},{x1},{y1} is empty: x1 must be greater than x0 and y1 than y0 "
                         "(x1, y1 exclusive)")
    return x0, y0, x1, y1


def read_boxes(path: "str | os.PathLike[str]") -> dict[str, list[tuple[int, int, int, int]]]:
    """``file,x0,y0,x1,y1`` rows (a header row is optional) → {file: [boxes]}.

    A row that is not a file name and four finite numbers with x0 < x1 and y0 < y1 is a :class:`ValueError` naming
    the file, the line and the fault.
    """
    boxes: dict[str, list[tuple[int, int, int, int]]] = {}
    rows = csv.reader(read_text_file(path, "boxes").splitlines())
    for number, row in enumerate(rows, start=1):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 5:
            raise InputValueError(f"{path}: line {number}: expected file,x0,y0,x1,y1; got {len(row)} fields")
        try:
            box = _box(row)
        except ValueError as error:
            if number == 1 and not any(_is_number(value) for value in row[1:]):  # a header: file,x0,y0,x1,y1
                continue
            raise InputValueError(f"{path}: line {number}: {error}") from None
        boxes.setdefault(row[0].strip(), []).append(box)
    return boxes


def group_statistics(rows: list[Mapping[str, float]],
                     names: tuple[str, ...] = METRIC_NAMES) -> dict[str, dict[str, float]]:
    """Per metric: mean, median and count of the finite values in ``rows``."""
    stats = {}
    for name in names:
        values = np.array([row[name] for row in rows if name in row and np.isfinite(row[name])], dtype=np.float64)
        stats[name] = {
            "mean": float(values.mean()) if values.size else float("nan"),
            "median": float(np.median(values)) if values.size else float("nan"),
            "count": int(values.size),
        }
    return stats
