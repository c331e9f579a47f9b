"""DICOM pixel values to display RGB: modality LUT, VOI windows (written **width first, then level**), MONOCHROME1,
pixel padding, colour spaces and palettes, and the colour headers that cannot be shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from vitroll.io.dicom.deidentify import _items
from vitroll.io.images import finite_unit
from vitroll.wording import counted

if TYPE_CHECKING:
    from pydicom import Dataset


def _voi_proxy(width: float, level: float, function: str = "LINEAR") -> object:
    """A minimal dataset whose window output range is [0, 65535], to run pydicom's windowing with a known scale."""
    from pydicom.dataset import Dataset

    proxy = Dataset()
    proxy.PhotometricInterpretation = "MONOCHROME2"
    proxy.BitsStored = 16
    proxy.PixelRepresentation = 0
    proxy.WindowWidth = width
    proxy.WindowCenter = level
    proxy.VOILUTFunction = function
    return proxy


def _first(value: object) -> float:
    """First value of a possibly multi-valued DS element."""
    return float(_items(value)[0])


def window_to_unit(values: np.ndarray, width: float, level: float, function: str = "LINEAR") -> np.ndarray:
    """DICOM VOI windowing (PS3.3 C.11.2.1.2: LINEAR, LINEAR_EXACT, SIGMOID) of modality values → [0, 1]."""
    from pydicom.pixels import apply_voi_lut

    return apply_voi_lut(np.asarray(values, dtype=np.float64), _voi_proxy(width, level, function)) / 65535.0


def _to_unit(values: np.ndarray, dataset: object, window: Optional[tuple[float, float]]) -> np.ndarray:
    """Modality values → display values in [0, 1] (before any MONOCHROME1 inversion)."""
    from pydicom.pixels import apply_voi_lut

    if window is not None:
        return window_to_unit(values, *window)
    if "VOILUTSequence" in dataset:
        out = apply_voi_lut(values, dataset)
        lut = np.asarray(dataset.VOILUTSequence[0].LUTData, dtype=np.float64)
        low, high = float(lut.min()), float(lut.max())
        return np.clip((out - low) / (high - low), 0.0, 1.0) if high > low else np.zeros_like(out, dtype=np.float64)
    file_window = _file_window(dataset)
    if file_window is not None:
        return window_to_unit(values, *file_window)
    return finite_unit(values)


VOI_FUNCTIONS = ("LINEAR", "LINEAR_EXACT", "SIGMOID")
"""The VOI LUT functions of PS3.3 C.11.2.1.2; any other value is read as LINEAR, the default."""


def _file_window(dataset: object) -> Optional[tuple[float, float, str]]:
    """The file's own window (width, level, VOI LUT function), or None when it has none that can be used.

    Only the first Window Width/Center pair is read. A missing, empty or non-numeric value, a non-finite one, or a
    width the function does not allow (LINEAR needs W ≥ 1, the others W > 0) counts as no window: the frame is then
    shown by its own min–max, as a file without a window would be.
    """
    try:
        width, level = _first(dataset.WindowWidth), _first(dataset.WindowCenter)
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    function = str(dataset.get("VOILUTFunction", "LINEAR") or "LINEAR").strip().upper()
    function = function if function in VOI_FUNCTIONS else "LINEAR"
    usable_width = width >= 1.0 if function == "LINEAR" else width > 0.0
    if not (np.isfinite(width) and np.isfinite(level) and usable_width):
        return None
    return width, level, function


def _padding(raw: np.ndarray, dataset: object) -> Optional[np.ndarray]:
    """(H, W) bool: the stored values that Pixel Padding Value (up to Pixel Padding Range Limit) marks as no image,
    such as the corners outside a CT's circular field of view; None when the file names none."""
    try:
        value = _first(dataset.PixelPaddingValue)
        limit = _first(dataset.get("PixelPaddingRangeLimit", value))
    except (AttributeError, IndexError, TypeError, ValueError):
        return None
    low, high = min(value, limit), max(value, limit)
    return (raw >= low) & (raw <= high)


FRAME_MACROS = ("PixelValueTransformationSequence", "FrameVOILUTSequence")
"""Functional group macros of an enhanced multi-frame file (PS3.3 C.7.6.16.2.9, C.7.6.16.2.10) that hold a frame's
Rescale Slope/Intercept and its window, in place of the data set's own (which such a file leaves out)."""


def _frame_view(dataset: "Dataset", index: int) -> "Dataset":
    """The image pixel attributes (group 0028) that frame ``index`` of ``dataset`` is displayed with: the data set's,
    replaced by those of the :data:`FRAME_MACROS` in its shared functional groups, then in the frame's own. A file
    without functional groups is returned as it is."""
    from pydicom.dataset import Dataset

    groups = [sequence[position] for sequence, position in (
        (dataset.get("SharedFunctionalGroupsSequence") or (), 0),
        (dataset.get("PerFrameFunctionalGroupsSequence") or (), index)) if position < len(sequence)]
    macros = [macro[0] for group in groups for macro in (group.get(name) for name in FRAME_MACROS) if macro]
    if not macros:
        return dataset
    view = Dataset()
    for source in (dataset, *macros):
        for tag in source.keys():
            if tag.group == 0x0028:
                view[tag] = source[tag]
    return view


def _grey_to_rgb(raw: np.ndarray, dataset: object, window: Optional[tuple[float, float]]) -> np.ndarray:
    from pydicom.pixels import apply_modality_lut

    values = np.asarray(apply_modality_lut(raw, dataset), dtype=np.float64)
    padding = _padding(raw, dataset)
    if padding is not None and not padding.all():  # kept out of the min–max, where 65535 would blacken the image
        values[padding] = values[~padding].min()
    unit = np.nan_to_num(_to_unit(values, dataset, window), nan=0.0)  # NaN pixels (float pixel data) black
    if str(dataset.PhotometricInterpretation).strip() == "MONOCHROME1":
        unit = 1.0 - unit
    if padding is not None:
        unit[padding] = 0.0  # black whatever the polarity: it is no part of the body
    grey = np.round(np.clip(unit, 0.0, 1.0) * 255.0).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1)


SAMPLES_PER_PIXEL = {"MONOCHROME1": 1, "MONOCHROME2": 1, "PALETTE COLOR": 1, "RGB": 3, "YBR_FULL": 3,
                     "YBR_FULL_422": 3, "YBR_PARTIAL_422": 3, "YBR_PARTIAL_420": 3, "YBR_ICT": 3, "YBR_RCT": 3,
                     "HSV": 3, "XYB": 3, "ARGB": 4, "CMYK": 4}
"""The Samples per Pixel each Photometric Interpretation of PS3.3 C.7.6.3.1.2 (retired ones included) has."""

SHOWN_COLOUR = ("PALETTE COLOR", "RGB", "YBR_FULL", "YBR_FULL_422", "YBR_PARTIAL_422", "YBR_PARTIAL_420", "YBR_ICT",
                "YBR_RCT")
"""The colour Photometric Interpretations that are converted to RGB."""


def _samples_problem(samples: int, photometric: str) -> Optional[str]:
    """Why ``samples`` per pixel contradict a DICOM term ``photometric`` (RGB with 1 sample: its bytes would be
    read as grey), a sentence; None when they agree or ``photometric`` is no DICOM term."""
    expected = SAMPLES_PER_PIXEL.get(photometric)
    if expected is None or expected == samples:
        return None
    return (f"This DICOM file's header is inconsistent: SamplesPerPixel is {samples}, but PhotometricInterpretation "
            f"{photometric} has {counted(expected, 'sample')} per pixel, so its pixels cannot be told apart.")


def _colour_header_problem(samples: int, photometric: str) -> Optional[str]:
    """Why the header of a colour image (``samples`` > 1, or a palette) keeps its pixels from being shown, a
    sentence; None when nothing does. A value that is no DICOM term is not quoted: a header field may hold anything."""
    if photometric not in SAMPLES_PER_PIXEL:
        return (f"This DICOM file's PhotometricInterpretation is no DICOM term, so how its {samples} samples per "
                "pixel make a colour is not said.")
    problem = _samples_problem(samples, photometric)
    if problem is not None:
        return problem
    if photometric not in SHOWN_COLOUR:
        return (f"This DICOM file's PhotometricInterpretation, {photometric}, is not one that vitroll converts to "
                "RGB, so its pixels are not shown.")
    return None


def _colour_to_rgb(raw: np.ndarray, dataset: object) -> np.ndarray:
    from pydicom.pixels import apply_color_lut, convert_color_space

    photometric = str(dataset.PhotometricInterpretation).strip()
    if photometric == "PALETTE COLOR":
        raw = apply_color_lut(raw, dataset)
    elif photometric.startswith("YBR") and photometric != "YBR_RCT" and photometric != "YBR_ICT":
        raw = convert_color_space(raw, photometric, "RGB")
    raw = np.asarray(raw)
    if raw.dtype == np.uint8:
        return raw
    bits = int(dataset.get("BitsStored", 16) or 16)
    if photometric == "PALETTE COLOR":
        bits = 16 if raw.max() > 255 else 8
    return np.round(np.clip(raw.astype(np.float64) / (2 ** bits - 1), 0, 1) * 255).astype(np.uint8)
