"""Throughput of ``vitroll annotate`` next to the model's own forward pass and a one-image-at-a-time baseline.

    python scripts/bench_batch.py              # 64 JPEGs of 224 px, vit_small_patch16_224 (random init), batch 16
    python scripts/bench_batch.py --quick      # 32 images

In one run, on the same images: (a) the plain model forward over the same DataLoader (decode + preprocess in
workers, no saliency, nothing written); (b) ``annotate`` end to end (rollout, overlays + heatmaps + manifest
written); (c) a jacobgil/vit-explain-style loop: per image, PIL decode, fused attention off and ``attn_drop``
hooked, full-matrix rollout, OpenCV colormap and PNG. Prints images/s and the ratios b/a and b/c.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import timm
import torch
from PIL import Image
from torch.utils.data import DataLoader

from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import AnnotateOptions, annotate
from vitroll.pipelines.inputs import DecodedImages, collate, discover
from vitroll.preprocess import Preprocessing

SAMPLES = Path(__file__).resolve().parents[1] / "sample_images"


def make_images(folder: Path, count: int, size: int = 224) -> None:
    """``count`` JPEGs: random crops of the sample photos, resized to ``size``."""
    rng = np.random.default_rng(0)
    photos = [np.asarray(Image.open(p).convert("RGB")) for p in sorted(SAMPLES.glob("*.jpg"))]
    for index in range(count):
        photo = photos[index % len(photos)]
        side = int(rng.integers(min(photo.shape[:2]) // 2, min(photo.shape[:2])))
        top, left = (int(rng.integers(0, photo.shape[d] - side + 1)) for d in (0, 1))
        crop = Image.fromarray(photo[top:top + side, left:left + side]).resize((size, size), Image.BICUBIC)
        crop.save(folder / f"img{index:03d}.jpg", quality=90)


def plain_forward(model, folder: Path, batch_size: int, workers: int) -> float:
    loader = DataLoader(DecodedImages(discover(folder), Preprocessing.from_model(model)), batch_size=batch_size,
                        num_workers=workers, collate_fn=collate)
    started = time.perf_counter()
    count = 0
    with torch.no_grad():
        for batch in loader:
            model(batch.tensor)
            count += len(batch.indices)
    return count / (time.perf_counter() - started)


def forward_one_at_a_time(model, folder: Path, count: int) -> float:
    """The model alone, batch 1, on preprocessed tensors: the ceiling of any per-image pipeline."""
    dataset = DecodedImages(discover(folder)[:count], Preprocessing.from_model(model))
    tensors = [dataset[i]["tensor"][None] for i in range(len(dataset))]
    started = time.perf_counter()
    with torch.no_grad():
        for tensor in tensors:
            model(tensor)
    return len(tensors) / (time.perf_counter() - started)


def vitroll_annotate(model, folder: Path, out: Path, batch_size: int, workers: int) -> float:
    options = AnnotateOptions(batch_size=batch_size, workers=workers, resume=False, progress=False)
    result = annotate(folder, out, model, ExplainSettings(), identity={"model": "bench"}, options=options)
    return result.ok / result.elapsed


def per_image_baseline(model, folder: Path, out: Path, count: int) -> float:
    """vit-explain's recipe, one image at a time."""
    config = timm.data.resolve_data_config({}, model=model)
    transform = timm.data.create_transform(**config)
    captured: list[torch.Tensor] = []
    handles = []
    for block in model.blocks:
        block.attn.fused_attn = False
        handles.append(block.attn.attn_drop.register_forward_hook(lambda _m, _i, o: captured.append(o.cpu())))
    paths = sorted(folder.glob("*.jpg"))[:count]
    started = time.perf_counter()
    with torch.no_grad():
        for path in paths:
            image = Image.open(path).convert("RGB")
            captured.clear()
            model(transform(image).unsqueeze(0))
            result = torch.eye(captured[0].size(-1))
            for attention in captured:
                fused = attention.mean(dim=1)
                flat = fused.view(fused.size(0), -1)
                _, indices = flat.topk(int(flat.size(-1) * 0.9), -1, False)
                indices = indices[indices != 0]
                flat[0, indices] = 0
                a = (fused + torch.eye(fused.size(-1))) / 2
                a = a / a.sum(dim=-1, keepdim=True)
                result = torch.matmul(a[0], result)
            mask = result[0, 1:]
            width = int(mask.size(-1) ** 0.5)
            mask = (mask.reshape(width, width) / mask.max()).numpy()
            rgb = np.asarray(image)
            heat = cv2.applyColorMap(np.uint8(255 * cv2.resize(mask, rgb.shape[1::-1])), cv2.COLORMAP_JET)
            cam = np.float32(heat) / 255 + np.float32(rgb[..., ::-1]) / 255
            cv2.imwrite(str(out / f"{path.stem}.png"), np.uint8(255 * cam / cam.max()))
    elapsed = time.perf_counter() - started
    for handle in handles:
        handle.remove()
    for block in model.blocks:
        block.attn.fused_attn = True
    return len(paths) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--quick", action="store_true", help="32 images")
    args = parser.parse_args()
    count = 32 if args.quick else args.images
    torch.manual_seed(0)
    model = timm.create_model(args.model).eval()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        (scratch / "in").mkdir()
        make_images(scratch / "in", count)
        warm = scratch / "warm"
        warm.mkdir()
        make_images(warm, args.batch_size)
        plain_forward(model, warm, args.batch_size, 0)  # warm-up: first-call allocations
        vitroll_annotate(model, warm, scratch / "warm_out", args.batch_size, 0)
        forward = plain_forward(model, scratch / "in", args.batch_size, args.workers)
        vitroll = vitroll_annotate(model, scratch / "in", scratch / "out", args.batch_size, args.workers)
        (scratch / "baseline").mkdir()
        baseline = per_image_baseline(model, scratch / "in", scratch / "baseline", min(count, 32))
        single = forward_one_at_a_time(model, scratch / "in", min(count, 32))
    print(f"{args.model} (random init), {count} JPEGs of 224 px, batch {args.batch_size}, {args.workers} workers; "
          f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print("| pipeline | images/s |")
    print("|---|---|")
    print(f"| (a) plain forward over the DataLoader | {forward:.2f} |")
    print(f"| (b) vitroll annotate (rollout, overlays, heatmaps, manifest) | {vitroll:.2f} |")
    print(f"| (c) per-image baseline (vit-explain style) | {baseline:.2f} |")
    print(f"| (d) model forward alone, one image at a time (no decode, no saliency) | {single:.2f} |")
    print(f"annotate / forward = {vitroll / forward:.2f} (target ≥ 0.6); annotate / per-image = {vitroll / baseline:.2f} "
          "(target ≥ 3)")
    print(f"batching gain of the model itself on this machine: (a)/(d) = {forward / single:.2f}; annotate cannot beat "
          f"the plain forward, so here (b)/(c) ≤ (a)/(c) = {forward / baseline:.2f}")


if __name__ == "__main__":
    main()
