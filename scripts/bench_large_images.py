"""Old vs new rendering of one large photo, side by side in one run: what ``vitroll annotate`` and ``overlay
--figure`` do per image after the model.

    python scripts/bench_large_images.py                 # 6000 × 4000, 3 rounds
    python scripts/bench_large_images.py --size 3000 2000 --rounds 5

The old path is tests/reference_rendering.py (two-pass normalisation, float32 NumPy blend, fancy-indexed colours,
float64 statistics, libpng's default filters) and the figure with ``SHOWN_SIDE`` lifted (matplotlib resamples the
full image). Each round times old then new of every stage; the fastest round counts, as CPU seconds of this process
(other processes on the machine slow the wall clock, less so this) and wall seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from reference_rendering import (reference_encode_png, reference_normalize, reference_overlay,  # noqa: E402
                                 reference_summary)
from vitroll.io import encode_png, load_image  # noqa: E402
from vitroll.maps import normalize, summary, to_original  # noqa: E402
from vitroll.overlay import overlay  # noqa: E402
from vitroll.pipelines.explain import ExplainSettings, figure_png  # noqa: E402
from vitroll.preprocess import Preprocessing  # noqa: E402

overlay_module = sys.modules["vitroll.overlay"]  # vitroll.overlay is also the function's name in the package


def best_of(function: Callable[[], object], rounds: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of the fastest of ``rounds`` calls."""
    cpu, wall = [], []
    for _ in range(rounds):
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        function()
        cpu.append(time.process_time() - cpu_start)
        wall.append(time.perf_counter() - wall_start)
    return min(cpu), min(wall)


def old_figure(image: np.ndarray, saliency: np.ndarray, overlaid: np.ndarray) -> bytes:
    shown_side = overlay_module.SHOWN_SIDE
    overlay_module.SHOWN_SIDE = 10**9
    try:
        return figure_png("photo.jpg", image, saliency, overlaid, ExplainSettings())
    finally:
        overlay_module.SHOWN_SIDE = shown_side


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, nargs=2, default=(6000, 4000), metavar=("WIDTH", "HEIGHT"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    photo = np.asarray(load_image(Path(__file__).resolve().parents[1] / "sample_images" / "astronaut.jpg"))
    image = cv2.resize(photo, tuple(args.size), interpolation=cv2.INTER_CUBIC)
    geometry = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3).geometry(image.shape[:2])
    saliency = to_original(np.random.default_rng(0).random((14, 14)).astype(np.float32), geometry)
    overlaid = overlay(image, saliency)
    stages = {
        "normalize (to [0, 1])": (lambda: reference_normalize(saliency), lambda: normalize(saliency)),
        "overlay (colour + blend)": (lambda: reference_overlay(image, saliency), lambda: overlay(image, saliency)),
        "PNG encode": (lambda: reference_encode_png(overlaid), lambda: encode_png(overlaid)),
        "summary statistics": (lambda: reference_summary(saliency), lambda: summary(saliency)),
        "figure (overlay --figure)": (lambda: old_figure(image, saliency, overlaid),
                                      lambda: figure_png("photo.jpg", image, saliency, overlaid, ExplainSettings())),
    }
    print(f"{args.size[0]}×{args.size[1]} photo, best of {args.rounds} rounds; seconds")
    print(f"{'stage':28s} {'old cpu':>8s} {'new cpu':>8s} {'ratio':>6s}   "
          f"{'old wall':>8s} {'new wall':>8s} {'ratio':>6s}")

    def report(name: str, old_cpu: float, new_cpu: float, old_wall: float, new_wall: float) -> None:
        print(f"{name:28s} {old_cpu:8.3f} {new_cpu:8.3f} {old_cpu / new_cpu:5.1f}×   "
              f"{old_wall:8.3f} {new_wall:8.3f} {old_wall / new_wall:5.1f}×")

    totals = np.zeros(4)
    for name, (old, new) in stages.items():
        old_cpu, old_wall = best_of(old, args.rounds)
        new_cpu, new_wall = best_of(new, args.rounds)
        totals += (old_cpu, new_cpu, old_wall, new_wall)
        report(name, old_cpu, new_cpu, old_wall, new_wall)
    report("all", *totals)
    old_size, new_size = len(reference_encode_png(overlaid)), len(encode_png(overlaid))
    print(f"PNG size: old {old_size / 1e6:.1f} MB, new {new_size / 1e6:.1f} MB ({new_size / old_size - 1:+.0%})")


if __name__ == "__main__":
    main()
