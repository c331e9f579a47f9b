"""How ``vitroll annotate`` scales with its writer threads when the model is not the bottleneck.

    python scripts/bench_writers.py                      # 128 JPEGs of 224 px, writer threads 1, 2 and 4
    python scripts/bench_writers.py --threads 1 2 4 8    # on a machine with more cores

A one-layer vit_tiny (random init) keeps the model's share of each batch small, so what is left is what annotate
does per image on the CPU — decode in the loader, then render, PNG-encode and write in the writer threads — as on a
GPU, where the model is fast. Each thread count runs annotate end to end on the same images, in one process, twice
in turn (the faster run counts); prints images/s and the gain over one thread.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import timm
import torch

from bench_batch import make_images
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import AnnotateOptions, annotate


def images_per_second(model: torch.nn.Module, folder: Path, out: Path, threads: int, batch_size: int,
                      workers: int) -> float:
    options = AnnotateOptions(batch_size=batch_size, workers=workers, writer_threads=threads, resume=False,
                              progress=False)
    result = annotate(folder, out, model, ExplainSettings(), identity={"model": "bench"}, options=options)
    return result.ok / result.elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=128)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", depth=1).eval()
    speeds: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "in"
        folder.mkdir()
        make_images(folder, args.images)
        images_per_second(model, folder, Path(scratch) / "warm-up", 1, args.batch_size, args.workers)
        for _ in range(args.rounds):
            for threads in args.threads:
                speed = images_per_second(model, folder, Path(scratch) / f"out{threads}", threads, args.batch_size,
                                          args.workers)
                speeds[threads] = max(speeds.get(threads, 0.0), speed)
    print(f"annotate, 1-layer vit_tiny, {args.images} JPEGs of 224 px, batch {args.batch_size}, {args.workers} "
          f"loader workers, {os.cpu_count()} CPU cores, torch {torch.__version__}")
    print("| writer threads | images/s | gain over 1 thread |")
    print("|---|---|---|")
    for threads in args.threads:
        print(f"| {threads} | {speeds[threads]:.1f} | {speeds[threads] / speeds[args.threads[0]]:.2f} |")


if __name__ == "__main__":
    main()
