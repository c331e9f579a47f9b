"""Throughput of ``vitroll annotate`` next to the model's own forward pass and a one-image-at-a-time baseline.

    python scripts/bench_batch.py              # 64 JPEGs of 224 px, vit_small_patch16_224 (random init), batch 16
    python scripts/bench_batch.py --quick      # 32 images
    python scripts/bench_batch.py --device cuda --precision bf16 --images 512 --batch-size 64 --workers 8

In one run, on the same images: (a) the plain model forward over the same DataLoader (decode + preprocess in
workers, no saliency, nothing written); (b) ``annotate`` end to end (rollout, overlays + heatmaps + manifest
written); (c) a jacobgil/vit-explain-style loop: per image, PIL decode, fused attention off and ``attn_drop``
hooked, full-matrix rollout, OpenCV colormap and PNG. Prints images/s and the ratios b/a and b/c. On a GPU every
timing ends with a device synchronisation; ``--precision`` is annotate's autocast, applied to (a) and (d) alike
(the baseline, like vit-explain, stays float32). ``scripts/gpu_check.py`` runs :func:`measure` too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import platform
import tempfile
import time
from pathlib import Path
from typing import Optional

import cv2
import numpy as np
import timm
import torch
from PIL import Image

from vitroll.methods.base import model_device
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import PRECISIONS, AnnotateOptions, annotate
from vitroll.pipelines.inputs import discover
from vitroll.pipelines.stream import decoded_batches, read_image
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


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels, so a wall-clock time covers the work (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The autocast region ``annotate --precision`` uses, for the model-only measurements."""
    dtype = PRECISIONS[precision]
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def plain_forward(model, folder: Path, batch_size: int, workers: int, precision: str = "fp32") -> float:
    """Images/s of the model's forward over the same batch stream (DataLoader, pinned transfers) as ``annotate``."""
    device = model_device(model)
    batches = decoded_batches([item.path for item in discover(folder)], read_image, Preprocessing.from_model(model),
                              batch_size=batch_size, workers=workers, device=device)
    started = time.perf_counter()
    count = 0
    with torch.no_grad(), autocast(device, precision):
        for batch in batches:
            model(batch.tensor)
            count += len(batch.tensor)
    synchronize(device)
    return count / (time.perf_counter() - started)


def forward_one_at_a_time(model, folder: Path, count: int, precision: str = "fp32") -> float:
    """The model alone, batch 1, on preprocessed tensors already on its device: the ceiling of any per-image
    pipeline."""
    device = model_device(model)
    tensors = [batch.tensor for batch in decoded_batches([item.path for item in discover(folder)[:count]], read_image,
                                                         Preprocessing.from_model(model), batch_size=1, device=device)]
    synchronize(device)
    started = time.perf_counter()
    with torch.no_grad(), autocast(device, precision):
        for tensor in tensors:
            model(tensor)
    synchronize(device)
    return len(tensors) / (time.perf_counter() - started)


def vitroll_annotate(model, folder: Path, out: Path, batch_size: int, workers: int, precision: str = "fp32",
                     writer_threads: Optional[int] = None) -> float:
    """Images/s of annotate end to end; ``writer_threads`` None: annotate's default."""
    options = AnnotateOptions(batch_size=batch_size, workers=workers, resume=False, progress=False, precision=precision)
    if writer_threads is not None:
        options = dataclasses.replace(options, writer_threads=writer_threads)
    result = annotate(folder, out, model, ExplainSettings(), identity={"model": "bench"}, options=options)
    return result.ok / result.elapsed


def per_image_baseline(model, folder: Path, out: Path, count: int) -> float:
    """vit-explain's recipe, one image at a time."""
    device = model_device(model)
    built = {"input_size": (3, *model.patch_embed.img_size)}  # pretrained_cfg keeps 224 when built with img_size
    transform = timm.data.create_transform(**timm.data.resolve_data_config(built, model=model))
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
            model(transform(image).unsqueeze(0).to(device))
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


def measure(model, scratch: Path, count: int, batch_size: int, workers: int, precision: str = "fp32",
            baseline_count: int = 32) -> dict[str, float]:
    """Images/s of (a) the plain forward, (b) annotate, (c) the per-image baseline and (d) the forward alone at
    batch 1, on ``count`` generated JPEGs of the model's input size under ``scratch`` (after a warm-up batch)."""
    size = model.patch_embed.img_size[0]
    for name, images in (("in", count), ("warm", batch_size)):
        (scratch / name).mkdir()
        make_images(scratch / name, images, size)
    plain_forward(model, scratch / "warm", batch_size, 0, precision)  # warm-up: first-call allocations
    vitroll_annotate(model, scratch / "warm", scratch / "warm_out", batch_size, 0, precision)
    forward = plain_forward(model, scratch / "in", batch_size, workers, precision)
    vitroll = vitroll_annotate(model, scratch / "in", scratch / "out", batch_size, workers, precision)
    (scratch / "baseline").mkdir()
    baseline = per_image_baseline(model, scratch / "in", scratch / "baseline", min(count, baseline_count))
    single = forward_one_at_a_time(model, scratch / "in", min(count, baseline_count), precision)
    return {"forward": forward, "annotate": vitroll, "per_image": baseline, "single": single}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=list(PRECISIONS), default="fp32")
    parser.add_argument("--quick", action="store_true", help="32 images")
    args = parser.parse_args()
    count = 32 if args.quick else args.images
    torch.manual_seed(0)
    model = timm.create_model(args.model).eval().to(args.device)
    with tempfile.TemporaryDirectory() as scratch:
        speeds = measure(model, Path(scratch), count, args.batch_size, args.workers, args.precision)
    forward, vitroll, baseline, single = (speeds[k] for k in ("forward", "annotate", "per_image", "single"))
    print(f"{args.model} (random init), {count} JPEGs of 224 px, batch {args.batch_size}, {args.workers} workers, "
          f"{args.precision} on {args.device}; {platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    print("| pipeline | images/s |")
    print("|---|---|")
    print(f"| (a) plain forward over the DataLoader | {forward:.2f} |")
    print(f"| (b) vitroll annotate (rollout, overlays, heatmaps, manifest) | {vitroll:.2f} |")
    print(f"| (c) per-image baseline (vit-explain style) | {baseline:.2f} |")
    print(f"| (d) model forward alone, one image at a time (no decode, no saliency) | {single:.2f} |")
    print(f"annotate / forward = {vitroll / forward:.2f} (target ≥ 0.6); "
          f"annotate / per-image = {vitroll / baseline:.2f} "
          "(target ≥ 3)")
    print(f"batching gain of the model itself on this machine: (a)/(d) = {forward / single:.2f}; annotate cannot beat "
          f"the plain forward, so here (b)/(c) ≤ (a)/(c) = {forward / baseline:.2f}")


if __name__ == "__main__":
    main()
