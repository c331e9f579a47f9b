"""Slow references for the image-sized rendering path, as vitroll computed it before the large-image speed-ups
(two-pass normalisation, float32 NumPy blend, fancy-indexed colours, float64 statistics, libpng's default filters):
the tests hold the fast code to them, and scripts/bench_large_images.py times both."""

from __future__ import annotations

import numpy as np
from scipy import special

from vitroll.maps import as_map, peak_location, scaled_into_float32, upsample
from vitroll.overlay import lookup_table, rgb_uint8


def reference_colorize(values: np.ndarray, cmap: str = "jet") -> np.ndarray:
    """Values in [0, 1] (H, W) → RGB uint8 (H, W, 3); NaN → black."""
    values = np.asarray(values, dtype=np.float32)
    index = np.clip(np.nan_to_num(values, nan=0.0) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    colors = lookup_table(cmap)[index]
    colors[~np.isfinite(values)] = 0
    return colors


def reference_blend(image: np.ndarray, colors: np.ndarray, alpha: float, where: np.ndarray | None = None) -> np.ndarray:
    """``(1 − α)·image + α·colors`` in float32, rounded half up, only where ``where`` (H, W) is True."""
    mixed = image.astype(np.float32) * (1.0 - alpha) + colors.astype(np.float32) * alpha
    out = np.clip(mixed + 0.5, 0, 255).astype(np.uint8)
    if where is not None:
        out[~where] = image[~where]
    return out


def reference_normalize(saliency: np.ndarray, *, mode: str = "minmax",
                        percentiles: tuple[float, float] = (1.0, 99.0)) -> np.ndarray:
    """:func:`vitroll.maps.normalize` as it was: the values scaled into float32 in a pass of their own, then their
    finite values copied out for their range."""
    saliency = scaled_into_float32(saliency)
    finite = saliency[np.isfinite(saliency)]
    if finite.size == 0:  # infinities are the ends whatever the finite values: +inf 1, −inf 0
        return np.clip(saliency, 0.0, 1.0).astype(np.float32)
    if mode == "minmax":
        low, high = float(finite.min()), float(finite.max())
    else:
        low, high = (float(v) for v in np.percentile(finite, percentiles))
        if high <= low:
            low, high = float(finite.min()), float(finite.max())
    if high <= low:
        return np.clip(np.where(np.isfinite(saliency), 0.0, saliency), 0.0, 1.0).astype(np.float32)
    return np.clip((saliency - low) / (high - low), 0.0, 1.0).astype(np.float32)


def reference_overlay(image: np.ndarray, heatmap: np.ndarray, *, cmap: str = "jet", alpha: float = 0.5,
                      interpolation: str = "bilinear", normalization: str = "minmax") -> np.ndarray:
    """:func:`vitroll.overlay.overlay` through the references above."""
    image = rgb_uint8(image)
    saliency = as_map(heatmap, "heatmap")
    if saliency.shape != image.shape[:2]:
        saliency = upsample(saliency, image.shape[:2], interpolation=interpolation)
    values = reference_normalize(saliency, mode=normalization)
    return reference_blend(image, reference_colorize(values, cmap), alpha, where=np.isfinite(values))


def reference_summary(saliency: np.ndarray, *, top_fraction: float = 0.1) -> dict[str, float]:
    """:func:`vitroll.maps.summary` in float64 throughout."""
    values = np.asarray(saliency, dtype=np.float64)
    finite = np.clip(values[np.isfinite(values)], 0.0, None)
    total = finite.sum()
    row, col = peak_location(values)
    if total <= 0 or finite.size < 2:
        return {"peak_row": row, "peak_col": col, "entropy": float("nan"), "top_mass": float("nan")}
    p = finite / total
    nonzero = p[p > 0]
    entropy = float(-(nonzero * np.log(nonzero)).sum() / np.log(p.size))
    k = max(1, int(round(top_fraction * p.size)))
    top_mass = float(np.partition(p, p.size - k)[p.size - k:].sum())
    return {"peak_row": row, "peak_col": col, "entropy": entropy, "top_mass": top_mass}


def summary_before_fast_top_mass(saliency: np.ndarray, *, top_fraction: float = 0.1) -> dict[str, float]:
    """:func:`vitroll.maps.summary` as it was before its fast paths (vitroll 8292ce5): one partition of every positive
    value, the peak from a filled copy, float64 copies per block. Its numbers must stay those of the new one, bit
    for bit."""
    values = np.asarray(saliency)
    values = values.astype(np.result_type(values.dtype, np.float32), copy=False)
    finite = values[np.isfinite(values)]
    positive = finite[finite > 0]
    total = float(positive.sum(dtype=np.float64))
    row, col = peak_location(values)
    if total <= 0 or finite.size < 2:
        return {"peak_row": row, "peak_col": col, "entropy": float("nan"), "top_mass": float("nan")}
    block = 1 << 20
    mass_log_mass = sum(float(special.xlogy(part, part).sum()) for part in
                        (positive[start: start + block].astype(np.float64) for start in range(0, positive.size, block)))
    entropy = (np.log(total) - mass_log_mass / total) / np.log(finite.size)
    k = max(1, int(round(top_fraction * finite.size)))
    top = positive if positive.size <= k else np.partition(positive, positive.size - k)[positive.size - k:]
    return {"peak_row": row, "peak_col": col, "entropy": float(entropy),
            "top_mass": float(top.sum(dtype=np.float64)) / total}


def reference_encode_png(rgb: np.ndarray) -> bytes:
    """PNG bytes at zlib level 1 with libpng's default (adaptive, all five) filters."""
    import cv2

    ok, buffer = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 1])
    assert ok
    return buffer.tobytes()
