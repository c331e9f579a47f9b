"""Train the testbed ViT on synthetic shapes and ship it: ``vitroll/testbed/shapes_vit.safetensors`` + model card.

    python scripts/train_shapes.py                 # the shipped run (about 20–30 minutes on 2 CPU cores)
    python scripts/train_shapes.py --steps 300     # a smoke run

Fresh images every step (no epochs, no overfitting), drawn in a background process. The clutter (distractors
and texture noise) ramps from none to full over the first part of training — a ViT from scratch learns the
clean task first — then the model trains on full clutter. Accuracy is measured on full-clutter images of other
seeds: validation during training, the held-out test split once at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

from vitroll.testbed.model import ARCHITECTURE, DATA, WEIGHTS, build_testbed_model
from vitroll.testbed.shapes import CLASSES, arrays
from vitroll.testbed.training import (add_training_arguments, augment, optimise, start_training, to_tensor,
                                      wrapped_card)

TRAIN_SEED, VALIDATION_SEED, TEST_SEED = 1, 2, 3


class TrainingBatches(IterableDataset):
    """Endless batches of fresh training images; batch ``i`` uses clutter ``schedule(i)``."""

    def __init__(self, batch_size: int, total_steps: int, ramp_fraction: float) -> None:
        self.batch_size, self.total_steps, self.ramp_fraction = batch_size, total_steps, ramp_fraction

    def clutter(self, step: int) -> float:
        return min(1.0, step / max(1.0, self.ramp_fraction * self.total_steps))

    def __iter__(self):
        for step in range(self.total_steps):
            config = replace(DATA, clutter=self.clutter(step))
            images, _, labels = arrays(TRAIN_SEED, self.batch_size, config, start=step * self.batch_size)
            yield to_tensor(images), torch.from_numpy(labels)


@torch.no_grad()
def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    model.eval()
    predictions = torch.cat([model(chunk).argmax(-1) for chunk in images.split(256)])
    model.train()
    return (predictions == labels).float().mean().item()


def write_model_card(curve_file: Path) -> None:
    """MODEL_CARD.md beside the weights, from the training record (``--card-only`` rewrites it alone)."""
    record = json.loads(curve_file.read_text())
    summary, curve = record["summary"], record["curve"]
    rows = "\n".join(f"| {p['step']} | {p['minutes']} | {p['clutter']} | {p['train_loss']} | {p['val_accuracy']} |"
                     for p in curve)
    card = f"""# vitroll-shapes — the testbed ViT shipped with vitroll

A small timm `VisionTransformer` trained from scratch by `scripts/train_shapes.py` on the synthetic images of
`vitroll.testbed.shapes`: one large target shape ({", ".join(summary["classes"])}) decides the class, among up to
{summary["data"]["max_distractors"]} small distractor shapes of every kind and texture noise. Its attention has a
known right answer (the target's mask), which is what `vitroll evaluate` and the tests measure against.

- Architecture: `VisionTransformer({", ".join(f"{k}={v}" for k, v in summary["architecture"].items())})`,
  {sum(p.numel() for p in build_testbed_model().parameters()):,} parameters, weights `shapes_vit.safetensors` (float32).
- Input: {summary["data"]["image_size"]} px RGB, normalised with mean = std = 0.5, no crop (`crop_pct` 1.0).
- Data: fresh images every step from seed {summary["train_seed"]}; clutter ramped from none to full over the
  first {summary["clutter_ramp"]:.0%} of the steps; validation on seed {summary["validation_seed"]} (1000 images, full
  clutter); test on seed {summary["test_seed"]}.
- Training: {summary["steps"]} steps of batch {summary["batch_size"]}, AdamW (lr {summary["lr"]}, weight decay
  {summary["weight_decay"]}), {summary["warmup"]} warm-up steps then cosine, random flips and quarter turns;
  {summary["minutes"]} minutes on {summary["threads"]} CPU threads (torch {summary["torch"]}).
- **Held-out test accuracy: {summary["test_accuracy"]:.1%}** on {summary["test_images"]} full-clutter images of seed
  {summary["test_seed"]}.

Not a model of anything real: use it to check that an explanation method finds a known object, offline.

## Training curve

| step | minutes | clutter | train loss | validation accuracy |
|---|---|---|---|---|
{rows}
"""
    curve_file.with_name("MODEL_CARD.md").write_text(wrapped_card(card), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_training_arguments(parser, steps=3000, batch_size=128, lr=1e-3, weight_decay=0.05, warmup=300, eval_every=250)
    parser.add_argument("--ramp", type=float, default=0.3, help="fraction of steps over which clutter rises to full")
    parser.add_argument("--test-images", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--curve", type=Path, default=WEIGHTS.with_name("training_curve.json"))
    parser.add_argument("--card-only", action="store_true", help="rewrite MODEL_CARD.md from --curve and stop")
    args = parser.parse_args(argv)
    if args.card_only:
        write_model_card(args.curve)
        return
    start_training(args)

    model = build_testbed_model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    val_images, _, val_labels = arrays(VALIDATION_SEED, 1000, DATA)
    val_x, val_y = to_tensor(val_images), torch.from_numpy(val_labels)
    batches = TrainingBatches(args.batch_size, args.steps, args.ramp)
    loader = DataLoader(batches, batch_size=None, num_workers=1, prefetch_factor=4, persistent_workers=False)

    curve = []
    started = time.perf_counter()
    running_loss = 0.0
    for step, (images, labels) in enumerate(loader):
        loss = F.cross_entropy(model(augment(images)), labels)
        running_loss += optimise(model, optimizer, loss, step, args)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            point = dict(
                step=step + 1, minutes=round((time.perf_counter() - started) / 60, 2),
                clutter=round(batches.clutter(step), 3), train_loss=round(running_loss / args.eval_every, 4),
                val_accuracy=round(accuracy(model, val_x, val_y), 4),
            )
            running_loss = 0.0
            curve.append(point)
            print(json.dumps(point), flush=True)
            args.curve.write_text(json.dumps(curve, indent=1))

    test_images, _, test_labels = arrays(TEST_SEED, args.test_images, DATA)
    test_accuracy = accuracy(model, to_tensor(test_images), torch.from_numpy(test_labels))
    minutes = (time.perf_counter() - started) / 60
    print(f"held-out test accuracy (seed {TEST_SEED}, {args.test_images} images): {test_accuracy:.4f}; "
          f"{minutes:.1f} min")

    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(args.out))
    summary = dict(
        architecture=ARCHITECTURE, data=DATA.__dict__, classes=CLASSES, train_seed=TRAIN_SEED,
        validation_seed=VALIDATION_SEED, test_seed=TEST_SEED, test_images=args.test_images,
        test_accuracy=round(test_accuracy, 4), steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, warmup=args.warmup, clutter_ramp=args.ramp, minutes=round(minutes, 1),
        threads=torch.get_num_threads(), torch=torch.__version__,
    )
    args.curve.write_text(json.dumps(dict(summary=summary, curve=curve), indent=1))
    write_model_card(args.curve)


if __name__ == "__main__":
    main()
