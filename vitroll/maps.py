"""Saliency maps as arrays: upsampling onto the image, normalisation and summary statistics.

Plain functions over NumPy arrays; a map may also be given as a torch tensor on any device, as the methods return
it. A patch-grid map has shape (h, w); an image-sized map (H, W) holds NaN where the model saw nothing (outside the
centre crop).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import cv2
import numpy as np
from scipy import special

from vitroll.errors import InputTypeError, InputValueError, OptionValueError, options_by_keyword
from vitroll.preprocess import CropGeometry

if TYPE_CHECKING:
    import torch

Interpolation = Literal["bilinear", "bicubic", "nearest"]
_CV2_INTERPOLATION = {"bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC, "nearest": cv2.INTER_NEAREST}


def _cv2_flag(interpolation: str) -> int:
    try:
        return _CV2_INTERPOLATION[interpolation]
    except KeyError:
        raise OptionValueError(f"interpolation must be one of {', '.join(_CV2_INTERPOLATION)}; "
                               f"got {interpolation!r}") from None


def upsample(grid_map: "np.ndarray | torch.Tensor", size_hw: tuple[int, int], *,
             interpolation: Interpolation = "bilinear", padded_hw: tuple[int, int] | None = None) -> np.ndarray:
    """Stretch a grid map (h, w) over a whole image of ``size_hw`` = (H, W) (e.g. ``image.shape[:2]``) → float32
    (H, W).

    ``padded_hw`` = (H', W') ≥ (H, W) is for a model that pads its input up to whole patches, right and bottom
    (timm's ``dynamic_img_pad``): its grid covers those pixels, of which the image is the first (H, W), so its last
    patches, partly padding, end where the image ends (``geometry.padded_hw`` of the
    :class:`~vitroll.preprocess.CropGeometry` that preprocessing gives, for an image of the model's input size).
    None (also that of a model that does not pad): the grid covers the image.

    Parameters
    ----------
    grid_map : ndarray or torch.Tensor, shape (h, w)
        One map over the patch grid (a batch's ``maps[i]``), on any device.
    size_hw : (int, int)
        (H, W), the image's height and width.
    interpolation : {"nearest", "bilinear", "bicubic"}
        How values between cell centres are filled (OpenCV's resize).
    padded_hw : (int, int), optional
        (H', W') ≥ (H, W): the padded input the grid covers, of which the image is the top-left (H, W).

    Returns
    -------
    ndarray, float32, shape (H, W)
        The map stretched over the image.

    Raises
    ------
    InputTypeError, InputValueError
        For a ``grid_map`` that is not one (h, w) map, a size that is not two integers ≥ 1, or a ``padded_hw``
        smaller than ``size_hw``.
    """
    grid_map = as_map(grid_map, "grid_map")
    height, width = _size(size_hw)
    covered_h, covered_w = (height, width) if padded_hw is None else _padded_size(padded_hw, (height, width))
    stretched = cv2.resize(grid_map, (covered_w, covered_h), interpolation=_cv2_flag(interpolation))
    return stretched if (covered_h, covered_w) == (height, width) else np.ascontiguousarray(stretched[:height, :width])


def _size(size_hw: object, name: str = "size_hw") -> tuple[int, int]:
    """``size_hw`` as (H, W), refusing anything but two integers ≥ 1 (OpenCV's own errors are assertions)."""
    pair = tuple(size_hw) if isinstance(size_hw, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(isinstance(side, numbers.Integral) for side in pair):
        raise InputTypeError(f"{name} must be (H, W), two integers ≥ 1; got {type(size_hw).__name__} {size_hw!r}")
    if min(pair) < 1:
        raise InputValueError(f"{name} must be (H, W), two integers ≥ 1; got {pair}")
    return int(pair[0]), int(pair[1])


def _padded_size(padded_hw: object, size_hw: tuple[int, int]) -> tuple[int, int]:
    """``padded_hw`` as (H', W'), refusing one smaller than the image ``size_hw`` it pads."""
    padded = _size(padded_hw, "padded_hw")
    if padded[0] < size_hw[0] or padded[1] < size_hw[1]:
        raise InputValueError(f"padded_hw (H', W') must be at least the image's (H, W) = {size_hw}: the input "
                              f"padded up to whole patches, which the grid covers; got {padded} (an image of another "
                              "size than the model's input takes its map from to_original(grid_map, geometry))")
    return padded


def _check_geometry(geometry: object) -> None:
    if not isinstance(geometry, CropGeometry):
        raise InputTypeError("geometry must be the CropGeometry that Preprocessing gives with the tensor (tensor, "
                             f"geometry = Preprocessing.from_model(model)(image)); got {type(geometry).__name__}")


@options_by_keyword
def to_original(
    grid_map: "np.ndarray | torch.Tensor", geometry: CropGeometry, *, interpolation: Interpolation = "bilinear"
) -> np.ndarray:
    """Place a grid map (h, w) onto the original image through its preprocessing geometry.

    Parameters
    ----------
    grid_map : ndarray or torch.Tensor, shape (h, w)
        One map over the patch grid (a batch's ``maps[i]``), on any device.
    geometry : CropGeometry
        What preprocessing did to the image (``tensor, geometry = Preprocessing.from_model(model)(image)``).
    interpolation : {"nearest", "bilinear", "bicubic"}
        How values between cell centres are filled.

    Returns
    -------
    ndarray, float32, shape ``geometry.original_hw``
        The map in original pixels; NaN outside the region the model saw.
    """
    _check_geometry(geometry)
    grid_map = as_map(grid_map, "grid_map")
    height, width = geometry.original_hw
    affine = geometry.grid_to_original_affine(grid_map.shape)
    warped = cv2.warpAffine(
        grid_map, affine, (width, height),
        flags=_cv2_flag(interpolation) | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REPLICATE,
    )
    top, left, bottom, right = geometry.original_box()
    ys = np.arange(height, dtype=np.float64) + 0.5
    xs = np.arange(width, dtype=np.float64) + 0.5
    inside = ((ys >= top) & (ys <= bottom))[:, None] & ((xs >= left) & (xs <= right))[None, :]
    warped[~inside] = np.nan
    return warped


@options_by_keyword
def normalize(
    saliency: np.ndarray, *, mode: Literal["minmax", "percentile"] = "minmax",
    percentiles: tuple[float, float] = (1.0, 99.0),
) -> np.ndarray:
    """Scale a map to [0, 1], ignoring NaN (kept as NaN) and infinities (+inf becomes 1, −inf 0).

    ``minmax`` maps the smallest finite value to 0 and the largest to 1; ``percentile`` clips to the given
    percentiles first (robust to a few extreme patches), unless they are equal (a map flat but for a few values, which
    are then its only structure: scaled as ``minmax``). A constant map (its finite values all one) becomes all zeros.
    Order is kept: a value not above another is not scaled above it, so +inf, above every finite value, is 1 and −inf
    0 whatever the finite values are (none, one value or a range). Finite values of any magnitude (float64 up to
    ±1.8e308, or down to 1e-300) are scaled without overflow (:func:`scaled_into_float32`).

    Parameters
    ----------
    saliency : ndarray or torch.Tensor, any shape
        The values to scale: a map (h, w) or (H, W), or a batch of them.
    mode : {"minmax", "percentile"}
        Scale between the smallest and the largest value, or between the ``percentiles``.
    percentiles : (float, float)
        (low, high), ``0 ≤ low < high ≤ 100``: the percentiles of the finite values that become 0 and 1 (``mode``
        ``"percentile"`` only); values beyond them are clipped.

    Returns
    -------
    ndarray, float32, the shape of ``saliency``
        Values in [0, 1], NaN where ``saliency`` is NaN (overlay's "no map here", outside the model's crop); +inf as 1
        and −inf as 0.

    Raises
    ------
    OptionValueError
        (a ValueError) For an unknown ``mode`` or ``percentiles`` that are not ``0 ≤ low < high ≤ 100``.
    """
    low_percentile, high_percentile = percentiles
    if not 0 <= low_percentile < high_percentile <= 100:
        raise OptionValueError(f"percentiles must be (low, high) with 0 <= low < high <= 100; got {tuple(percentiles)}")
    if mode not in ("minmax", "percentile"):
        raise OptionValueError(f"mode must be 'minmax' or 'percentile'; got {mode!r}")
    saliency = as_numpy(saliency, held_float(saliency))
    finite = np.isfinite(saliency)
    if not finite.any():
        return _infinities_as_ends(saliency.astype(np.float32))
    # one pass finds the range, which also tells whether float32 needs the values scaled (scaled_into_float32's
    # own pass over them, and a copy of the finite values, cost as much as the rest on a 6000×4000 map)
    low, high = _finite_range_of(saliency, finite)
    largest = max(-low, high)
    if _fits_float32(largest):
        saliency = saliency.astype(np.float32, copy=False)
        low, high = float(np.float32(low)), float(np.float32(high))  # the cast values' range: rounding keeps order
    else:
        saliency = _float32_scaled(saliency, largest)
        low, high = _finite_range_of(saliency, finite)
    if mode == "percentile":
        clipped_low, clipped_high = (float(v) for v in np.percentile(saliency[finite], percentiles))
        if clipped_high > clipped_low:  # else all but a few values are equal: those few are the map, not outliers
            low, high = clipped_low, clipped_high
    if high <= low:
        return _infinities_as_ends(np.where(finite, 0.0, saliency).astype(np.float32))
    unit = np.subtract(saliency, low, dtype=np.float32)  # in place from here: one array, not four temporaries
    unit /= high - low
    return np.clip(unit, 0.0, 1.0, out=unit)


def _infinities_as_ends(values: np.ndarray) -> np.ndarray:
    """``values`` (float32, any shape) with +inf as 1 and −inf as 0, NaN kept, in place."""
    return np.clip(values, 0.0, 1.0, out=values)


def held_float(values: "np.ndarray | object") -> "type[np.floating]":
    """float64 for values held in 8 bytes or more (float64, int64), else float32: the float type that loses none of
    their range."""
    held = values if hasattr(values, "detach") else np.asarray(values)
    return np.float64 if held.dtype.itemsize > 4 else np.float32


def scaled_into_float32(values: "np.ndarray | object") -> np.ndarray:
    """``values`` (any shape, given as anything :func:`as_numpy` takes) as float32, first scaled by a power of two
    where their largest finite magnitude lies outside 2**±64: in float32 they would overflow (or their differences
    would) or flush to 0. Only for what a positive scale leaves alone (normalisation, colours), never for the values
    themselves; values within that range are only cast."""
    values = as_numpy(values, held_float(values))
    largest = float(np.max(np.abs(values), where=np.isfinite(values), initial=0.0))
    return values.astype(np.float32, copy=False) if _fits_float32(largest) else _float32_scaled(values, largest)


def _fits_float32(largest: float) -> bool:
    """Whether values whose largest finite magnitude is ``largest`` need no scaling into float32."""
    return largest == 0.0 or 2.0**-64 <= largest <= 2.0**64


def _float32_scaled(values: np.ndarray, largest: float) -> np.ndarray:
    """``values`` whose largest finite magnitude is ``largest`` scaled by a power of two to about 1, as float32."""
    _, exponent = math.frexp(largest)
    return np.ldexp(values.astype(np.float64, copy=False), -exponent).astype(np.float32)


def _finite_range_of(values: np.ndarray, finite: np.ndarray) -> tuple[float, float]:
    """(smallest, largest) of ``values`` where ``finite`` (at least one)."""
    return (float(np.min(values, where=finite, initial=np.inf)),
            float(np.max(values, where=finite, initial=-np.inf)))


def peak_location(saliency: np.ndarray) -> tuple[int, int]:
    """(row, column) of the largest finite value."""
    filled = np.where(np.isfinite(saliency), saliency, -np.inf)
    return tuple(int(i) for i in np.unravel_index(np.argmax(filled), filled.shape))


def summary(saliency: np.ndarray, *, top_fraction: float = 0.1) -> dict[str, float]:
    """Summary statistics of a non-negative map (NaN ignored).

    Returns ``peak_row``, ``peak_col``, ``entropy`` (of the map as a distribution, in nats, normalised by
    ``log(n)`` to [0, 1]) and ``top_mass`` (fraction of mass in the top ``top_fraction`` of pixels).

    A float32 map stays float32 (an image-sized one is 24 M values for a 6000×4000 photo); sums and logarithms are
    taken in float64, in blocks, so the result equals the all-float64 computation to about 1e-12.
    """
    values = np.asarray(saliency)
    values = values.astype(np.result_type(values.dtype, np.float32), copy=False)
    finite = np.isfinite(values)
    finite_count = int(np.count_nonzero(finite))
    # zeros add nothing below; np.partition slows down 50× on many equal values
    positive = values[np.logical_and(finite, values > 0, out=finite)]
    total = float(positive.sum(dtype=np.float64))
    # the first largest finite value: the first place of the largest positive one, without a filled copy
    row, col = (peak_location(values) if total <= 0 else
                tuple(int(i) for i in np.unravel_index(np.argmax(values == positive.max()), values.shape)))
    if total <= 0 or finite_count < 2:
        return {"peak_row": row, "peak_col": col, "entropy": float("nan"), "top_mass": float("nan")}
    block = 1 << 20
    mass_log_mass = sum(float(special.xlogy(part, part, dtype=np.float64).sum())
                        for part in (positive[start: start + block] for start in range(0, positive.size, block)))
    # -Σ p·log p with p = mass / total, written so that no normalised copy is needed
    entropy = (np.log(total) - mass_log_mass / total) / np.log(finite_count)
    k = max(1, int(round(top_fraction * finite_count)))
    return {"peak_row": row, "peak_col": col, "entropy": float(entropy), "top_mass": _top_sum(positive, k) / total}


def _top_sum(positive: np.ndarray, k: int) -> float:
    """Sum in float64 of the ``k`` largest of ``positive`` (1-D, all > 0), as NumPy sums one partition of it.

    A float32 map's top values usually span little range, so their float64 sum is exact in any order; then they are
    found among the values above a threshold a sample of 4096 sets (a few % of a photo's), not by partitioning all.
    Anything else, the sum of its one partition, as before: the result must not change by a bit.
    """
    if positive.size <= k:
        return float(positive.sum(dtype=np.float64))
    if positive.dtype == np.float32 and positive.size > 8 * 4096:
        sample = np.sort(positive[:: positive.size // 4096])
        # the sample's top share k / n and a margin of a few standard errors: rarely too few candidates
        share = k / positive.size
        kept = int(sample.size * min(1.0, share + 4 * math.sqrt(share / sample.size) + 0.002)) + 1
        candidates = positive[positive >= sample[max(0, sample.size - kept)]]
        if candidates.size >= k:  # the k largest of all are among them: the others lie below every candidate
            top = np.partition(candidates, candidates.size - k)[candidates.size - k:]
            smallest, largest = float(top.min()), float(top.max())
            # every value of the top is a multiple of the smallest one's float32 spacing; below 2 ** 53 of those, each
            # partial sum is a float64, so the order of the additions cannot change the sum
            if k * largest <= 2.0 ** 52 * float(np.spacing(np.float32(smallest))):
                return float(top.sum(dtype=np.float64))
    return float(np.partition(positive, positive.size - k)[positive.size - k:].sum(dtype=np.float64))


def grid_box_in_original(geometry: CropGeometry, grid_hw: tuple[int, int],
                         cell: tuple[int, int]) -> tuple[float, float, float, float]:
    """Extent (top, left, bottom, right) in original pixels of patch ``cell`` = (row, col) of a ``grid_hw`` grid; a
    last patch partly padding (:attr:`~vitroll.preprocess.CropGeometry.padded_hw`) ends where the input ends."""
    (sy, sx), (crop_top, crop_left) = geometry.scale, geometry.crop_top_left
    (input_h, input_w), (covered_h, covered_w) = geometry.input_hw, geometry.grid_hw_pixels
    cell_h = covered_h / grid_hw[0]
    cell_w = covered_w / grid_hw[1]
    row, col = cell
    return (
        (crop_top + row * cell_h) / sy, (crop_left + col * cell_w) / sx,
        (crop_top + min((row + 1) * cell_h, input_h)) / sy, (crop_left + min((col + 1) * cell_w, input_w)) / sx,
    )


@dataclass(frozen=True)
class KeyPatch:
    """One of the highest-scoring patches of a map, located in the original image.

    Attributes
    ----------
    row, col : int
        The cell in the grid map (h, w).
    score : float
        The map's value there.
    box : (int, int, int, int)
        (left, top, right, bottom) in original pixels, right/bottom exclusive, clipped to the image.
    """

    row: int
    col: int
    score: float
    box: tuple[int, int, int, int]
    """(left, top, right, bottom) in original pixels, right/bottom exclusive, clipped to the image."""


def key_patches(grid_map: "np.ndarray | torch.Tensor", geometry: CropGeometry, k: int = 5) -> list[KeyPatch]:
    """The ``k`` highest-scoring cells of a grid map (h, w), best first, with their boxes in original pixels.

    Ties are broken by position (row-major), so the result is deterministic. ``k`` is an int ≥ 0 (TypeError or
    ValueError otherwise); more than the grid has gives every cell. Only cells over the image count: a cell wholly in
    the padding around it (``crop_mode="border"``, a ``crop_pct`` above 1) holds none of its pixels.

    Parameters
    ----------
    grid_map : ndarray or torch.Tensor, shape (h, w)
        One map over the patch grid; NaN cells rank last.
    geometry : CropGeometry
        What preprocessing did to the image, to place each cell's box in original pixels.
    k : int
        How many cells, ≥ 0.

    Returns
    -------
    list of KeyPatch
        At most ``k``: each cell's ``row``, ``col`` in the grid, its ``score`` and its ``box`` (left, top, right,
        bottom) in original pixels, right/bottom exclusive, highest score first.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise InputTypeError(f"k must be an int (how many patches); got {type(k).__name__} {k!r}")
    if k < 0:
        raise OptionValueError(f"k must be >= 0 (how many patches); got {k}")
    _check_geometry(geometry)
    grid_map = as_map(grid_map, "grid_map", dtype=np.float64)
    flat = np.nan_to_num(grid_map, nan=-np.inf).ravel()
    height, width = geometry.original_hw
    patches = []
    for index in np.argsort(-flat, kind="stable"):
        if len(patches) == k:
            break
        row, col = divmod(int(index), grid_map.shape[1])
        top, left, bottom, right = grid_box_in_original(geometry, grid_map.shape, (row, col))
        box = tuple(min(max(0, int(np.floor(edge + 0.5))), size)
                    for edge, size in ((left, width), (top, height), (right, width), (bottom, height)))
        if box[2] > box[0] and box[3] > box[1]:
            patches.append(KeyPatch(row, col, float(grid_map[row, col]), box))
    return patches


def as_numpy(saliency: "np.ndarray | object", dtype: "type[np.floating]" = np.float32) -> np.ndarray:
    """A NumPy array of ``dtype`` (float32 by default) of a map given as ndarray or torch tensor (any device, also
    one that requires grad)."""
    if hasattr(saliency, "detach"):
        tensor = saliency.detach().cpu()  # NumPy has no bfloat16: a float type first
        saliency = (tensor.double() if dtype == np.float64 else tensor.float()).numpy()
    return np.asarray(saliency, dtype=dtype)


def as_map(saliency: "np.ndarray | object", name: str = "map", dtype: "type[np.floating]" = np.float32) -> np.ndarray:
    """One map (h, w) given as ndarray or torch tensor (:func:`as_numpy`), as a NumPy array of ``dtype``.

    Raises
    ------
    InputValueError
        For any other shape, naming the argument ``name``; for a batch (B, h, w), pointing to one of its maps; for
        values that are not real numbers (complex, strings, objects) or a tensor on the meta device.
    """
    if getattr(saliency, "is_meta", False):
        raise InputValueError(f"{name} is a tensor on the meta device, which holds no values: compute it with a "
                              "model whose weights are loaded")
    kind = "f" if hasattr(saliency, "detach") and not saliency.is_complex() else np.asarray(saliency).dtype.kind
    if kind not in "biuf":
        held = f"{saliency.dtype}" if hasattr(saliency, "dtype") else f"a {type(saliency).__name__}"
        raise InputValueError(f"{name} must hold real numbers (float, int or bool); got {held}")
    values = as_numpy(saliency, dtype)
    if values.ndim != 2 or 0 in values.shape:
        batch = "; a batch of maps? pass one of them, e.g. maps[0]" if values.ndim == 3 else ""
        raise InputValueError(f"{name} must be 2-D (h, w), h and w ≥ 1; got shape {values.shape}{batch}")
    return values


__all__ = ["KeyPatch", "as_map", "as_numpy", "grid_box_in_original", "key_patches", "normalize", "peak_location",
           "held_float", "scaled_into_float32", "summary", "to_original", "upsample"]
