"""Burned-in text: decide whether a frame's pixels are searched (always, unless told to trust its header), find
its text regions, and fill them.

Regions come from the text detector of rapidocr (PP-OCR's DB detector as ONNX, shipped inside the rapidocr
wheel, so it runs offline). Detection only: no text is recognised, so none is held in memory or written.
The detector is created once per process, on first use (a forked DataLoader worker builds its own: an ONNX Runtime
session's thread pool does not survive a fork).

Polygons are (K, 4, 2) float32 arrays of (x, y) corners in the frame's pixels.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Mapping

import cv2
import numpy as np

from vitroll.errors import VitrollError
from vitroll.io.dicom import INSTALL_HINT, UNKNOWN
from vitroll.wording import argument

if TYPE_CHECKING:
    from rapidocr import RapidOCR

DETECTION_SIDE = 736
"""Shorter side the detector sees (rapidocr's default): smaller frames are enlarged towards it…"""
MAX_UPSCALE = 2.0
"""…by at most this factor: enlarged further, anatomy in small frames (64 × 64 MR) is read as one huge glyph."""
MAX_DETECTION_SIDE = 2000
"""Longer side beyond which frames are shrunk for detection (rapidocr's default bound)."""
DETECTION_TILE = 960
"""Largest side of the pieces the detector is given: on a larger input the DB model loses small text (on a
2000 × 2000 input, three 18 px lines of a mammogram's header: none found; on 960 × 960 tiles of it: all)."""
TILE_OVERLAP = 192
"""Neighbouring tiles share this many pixels, so that text cut by one tile's edge lies whole in the other."""
MAX_LINE_FRACTION = 1 / 3
"""A region thicker than this share of the shorter side of what the detector saw (the frame, or its tile) is a
blob of anatomy or of a flat area, not a line of text…"""
LINE_ELONGATION = 4.0
"""…unless it is at least this many times as long as it is thick: a line of text on a frame hardly taller than the
line (blobs seen on pydicom's files and on flat discs are at most 2.6 times as long as thick)."""
MARGIN_FRACTION = 0.25
"""Each region is widened on every side by this share of its thickness (anti-aliased edges, descenders)…"""
MIN_MARGIN_PX = 2
"""…and by at least this many pixels."""
FILL_RGB = (0, 0, 0)


@dataclass(frozen=True)
class TextCheck:
    """Whether a frame's pixels are searched for burned-in text, and the reason shown in the report."""

    check: bool
    reason: str


def skipped_on_request() -> TextCheck:
    """The check of a frame not searched because the caller kept burned-in text, in the caller's words:
    ``not checked: --keep-burned-in-text`` on the command line, ``keep_burned_in_text=True`` from Python."""
    return TextCheck(False, f"not checked: {argument('keep_burned_in_text', True)}")


CHECKED_DESPITE_HEADER_NO = "BurnedInAnnotation NO: checked anyway"
"""Reason of a frame whose header says BurnedInAnnotation NO, searched all the same (the default)."""


def trusted_header_no() -> str:
    """Reason of a frame whose header says BurnedInAnnotation NO, not searched because the header was trusted
    (``--trust-burned-in-header``, ``trust_burned_in_header=True`` from Python)."""
    return f"not checked: BurnedInAnnotation NO ({argument('trust_burned_in_header', True)})"


def text_check(metadata: Mapping[str, str], *, has_header: bool, secondary_capture: bool,
               trust_header: bool = False) -> TextCheck:
    """The rule: every frame's pixels are searched, whatever its header says; with ``trust_header``
    (``--trust-burned-in-header``) a header saying ``BurnedInAnnotation`` NO skips the search, except for ultrasound,
    secondary captures and files without a DICOM header, which are always searched.

    ``BurnedInAnnotation`` is often wrong (left at NO by a scanner that writes its header into the pixels, or copied
    by a converter), so by default it only names the reason: a frame whose header says NO is searched all the same.

    Parameters
    ----------
    metadata
        The file's safe header fields (``Modality``, ``BurnedInAnnotation``; ``unknown`` where absent).
    has_header
        False for PNG/TIFF inputs.
    secondary_capture
        The header marks a secondary capture (SOP class or ConversionType).
    trust_header
        Skip the search where the header says ``BurnedInAnnotation`` NO (the header's word taken for the pixels).
    """
    if not has_header:
        return TextCheck(True, "no DICOM header")
    if metadata.get("Modality", "").upper() == "US":
        return TextCheck(True, "ultrasound: always checked")
    if secondary_capture:
        return TextCheck(True, "secondary capture: always checked")
    burned_in = metadata.get("BurnedInAnnotation", UNKNOWN)
    if burned_in.upper() == "NO":
        return TextCheck(False, trusted_header_no()) if trust_header else TextCheck(True, CHECKED_DESPITE_HEADER_NO)
    return TextCheck(True, "BurnedInAnnotation absent" if burned_in == UNKNOWN else f"BurnedInAnnotation {burned_in}")


def require_text_detector() -> None:
    """Raise a one-line :class:`VitrollError` naming the install command when rapidocr or onnxruntime is missing."""
    try:
        import onnxruntime  # noqa: F401
        import rapidocr  # noqa: F401
    except ImportError as error:
        raise VitrollError(
            f"removing burned-in text from audit images needs rapidocr and onnxruntime ({error.name} is missing): "
            f"{INSTALL_HINT}; or pass {argument('keep_burned_in_text', True)} if the pixels are known to carry no "
            "identifiers"
        ) from None


def _detector() -> "RapidOCR":
    return _detector_of_process(os.getpid())


@lru_cache(maxsize=1)
def _detector_of_process(pid: int) -> "RapidOCR":
    """rapidocr's engine: detection only, its coloured log silenced, one ONNX thread per torch thread."""
    import torch
    from rapidocr import RapidOCR

    return RapidOCR(params={
        "Global.log_level": "critical", "Global.use_cls": False, "Global.use_rec": False,
        # frames arrive already scaled by _detection_scale; no further resizing inside rapidocr
        "Global.min_side_len": 1, "Global.max_side_len": 1_000_000, "Det.limit_side_len": 32,
        "EngineConfig.onnxruntime.intra_op_num_threads": torch.get_num_threads(),
    })


def _detection_scale(shape_hw: tuple[int, int]) -> float:
    short, long = min(shape_hw), max(shape_hw)
    return min(MAX_UPSCALE, max(1.0, DETECTION_SIDE / short), MAX_DETECTION_SIDE / long)


def _lines(polygons: np.ndarray, shorter_side: int) -> np.ndarray:
    """The polygons (K, 4, 2) that may be lines of text on an image of that shorter side: thin enough
    (:data:`MAX_LINE_FRACTION`) or long enough (:data:`LINE_ELONGATION`)."""
    if not len(polygons):
        return polygons
    sides = np.array([sorted(cv2.minAreaRect(polygon)[1]) for polygon in polygons])
    return polygons[(sides[:, 0] <= MAX_LINE_FRACTION * shorter_side) | (sides[:, 1] >= LINE_ELONGATION * sides[:, 0])]


def _tile_starts(length: int) -> list[int]:
    """Offsets of the tiles along a side of ``length`` pixels: evenly spread, at least :data:`TILE_OVERLAP` shared."""
    if length <= DETECTION_TILE:
        return [0]
    count = math.ceil((length - DETECTION_TILE) / (DETECTION_TILE - TILE_OVERLAP)) + 1
    return [round(index * (length - DETECTION_TILE) / (count - 1)) for index in range(count)]


def _detect_in_tiles(bgr: np.ndarray) -> np.ndarray:
    """Text polygons (K, 4, 2) of a BGR uint8 frame (H, W, 3), detected tile by tile, in its pixels; blobs (not
    :func:`_lines` of their tile) dropped."""
    found = []
    for top in _tile_starts(bgr.shape[0]):
        for left in _tile_starts(bgr.shape[1]):
            tile = np.ascontiguousarray(bgr[top:top + DETECTION_TILE, left:left + DETECTION_TILE])
            boxes = getattr(_detector()(tile), "boxes", None)
            if boxes is None or len(boxes) == 0:
                continue
            found.append(_lines(np.asarray(boxes, dtype=np.float32), min(tile.shape[:2])) + np.float32([left, top]))
    return np.concatenate(found) if found else np.zeros((0, 4, 2), dtype=np.float32)


def find_text_regions(image: np.ndarray) -> np.ndarray:
    """Text regions of an RGB uint8 frame (H, W, 3) as (K, 4, 2) float32 polygons in its pixels (K may be 0).

    The frame is scaled for the detector (:func:`_detection_scale`) and searched in overlapping tiles of at most
    :data:`DETECTION_TILE` pixels a side. Regions that are not :func:`_lines` of their tile or of the frame (blobs
    of anatomy) are dropped.
    """
    require_text_detector()
    height, width = image.shape[:2]
    scale = _detection_scale((height, width))
    size = (max(32, round(width * scale)), max(32, round(height * scale)))
    resized = cv2.resize(image, size, interpolation=cv2.INTER_CUBIC if scale > 1 else cv2.INTER_AREA)
    return _lines(_detect_in_tiles(resized[..., ::-1]) / np.float32([size[0] / width, size[1] / height]),
                  min(height, width))


def region_mask(polygons: np.ndarray, shape_hw: tuple[int, int]) -> np.ndarray:
    """(H, W) bool mask of ``polygons`` (K, 4, 2), each widened by :data:`MARGIN_FRACTION` of its thickness."""
    mask = np.zeros(shape_hw, dtype=np.uint8)
    for polygon in polygons:
        centre, (side_a, side_b), angle = cv2.minAreaRect(np.asarray(polygon, dtype=np.float32))
        margin = max(MIN_MARGIN_PX, math.ceil(MARGIN_FRACTION * min(side_a, side_b)))
        corners = cv2.boxPoints((centre, (side_a + 2 * margin, side_b + 2 * margin), angle))
        cv2.fillPoly(mask, [np.round(corners).astype(np.int32)], 1)
    return mask.astype(bool)


def fill_regions(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A copy of the RGB frame (H, W, 3) with the pixels under ``mask`` (H, W) set to :data:`FILL_RGB`."""
    filled = image.copy()
    filled[mask] = FILL_RGB
    return filled


__all__ = [
    "CHECKED_DESPITE_HEADER_NO", "TextCheck", "fill_regions", "find_text_regions", "region_mask",
    "require_text_detector", "skipped_on_request", "text_check", "trusted_header_no",
]
