"""Train the image–text testbed (a tiny CLIPModel on two-shape images) and ship it: ``vitroll/testbed/clip_shapes/``.

    python scripts/train_image_text.py                  # the shipped run
    python scripts/train_image_text.py --steps 100      # a smoke run

Each step scores fresh images of seed 1 against the four prompts naming the shapes (one template a step) and
trains with cross-entropy towards the two shapes present (half the target each): the logit of a prompt must come
from where its shape is. Validation (seed 2) and the held-out test (seed 3) count an image right when its two
best-scoring prompts name exactly its two shapes.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset

from vitroll.testbed.image_text_model import (
    FOLDER, PROJECTION_DIM, TEXT_ARCHITECTURE, VISION_ARCHITECTURE, build_pairs_model, build_pairs_processor,
    build_pairs_tokenizer,
)
from vitroll.testbed.shape_pairs import PROMPTS, PairsConfig, prompt_for, samples
from vitroll.testbed.shapes import CLASSES
from vitroll.testbed.training import (add_training_arguments, augment, optimise, start_training, to_tensor,
                                      wrapped_card)

TRAIN_SEED, VALIDATION_SEED, TEST_SEED = 1, 2, 3
DATA = PairsConfig()


def split(seed: int, count: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (n, 3, S, S) and their two-hot targets (n, classes)."""
    drawn = list(samples(seed, count, DATA, start))
    targets = torch.zeros(count, len(CLASSES))
    for row, each in enumerate(drawn):
        targets[row, list(each.labels)] = 1.0
    return to_tensor(np.stack([each.image for each in drawn])), targets


class TrainingBatches(IterableDataset):
    def __init__(self, batch_size: int, steps: int) -> None:
        self.batch_size, self.steps = batch_size, steps

    def __iter__(self):
        for step in range(self.steps):
            yield split(TRAIN_SEED, self.batch_size, start=step * self.batch_size)


def prompt_ids(tokenizer, template: int) -> dict[str, torch.Tensor]:
    """The four prompts naming the classes with one template, tokenised."""
    texts = [prompt_for(label, template) for label in range(len(CLASSES))]
    return dict(tokenizer(texts, padding=True, return_tensors="pt"))


@torch.no_grad()
def pair_accuracy(model, tokenizer, images: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of images whose two best prompts (every template, logits averaged) name their two shapes."""
    model.eval()
    logits = torch.stack([model(pixel_values=images, **prompt_ids(tokenizer, t)).logits_per_image
                          for t in range(len(PROMPTS))]).mean(0)
    model.train()
    chosen = torch.zeros_like(targets).scatter_(1, logits.topk(2, dim=1).indices, 1.0)
    return (chosen == targets).all(dim=1).float().mean().item()


def write_model_card(record: dict) -> None:
    summary, curve = record["summary"], record["curve"]
    rows = "\n".join(f"| {p['step']} | {p['minutes']} | {p['train_loss']} | {p['val_accuracy']} |" for p in curve)
    card = f"""# vitroll-clip-shapes — the image–text testbed model shipped with vitroll

A tiny transformers `CLIPModel` trained from scratch by `scripts/train_image_text.py` on the images of
`vitroll.testbed.shape_pairs`: two large shapes of different classes ({", ".join(CLASSES)}), one in each half of
a textured 64 px image. Each step scores the images against the four prompts naming the shapes (templates:
{"; ".join(f"`{p}`" for p in PROMPTS)}) and trains towards the two shapes present, so a prompt's image–text
logit has to depend on its shape — so the right map for "a square" covers the square, not the other shape, and
whether an explanation's map follows the prompt is what `vitroll evaluate --testbed-kind pairs` measures.

- Vision tower: `CLIPVisionConfig({", ".join(f"{k}={v}" for k, v in summary["vision"].items())})`; text tower:
  `CLIPTextConfig({", ".join(f"{k}={v}" for k, v in summary["text"].items())})` over a whole-word vocabulary of
  {summary["vocabulary"]} tokens (BERT WordPiece tokenizer, `[SEP]` pooled); projection {summary["projection_dim"]};
  {summary["parameters"]:,} parameters, float32 safetensors; images normalised with mean = std = 0.5.
- Data: fresh images every step from seed {summary["train_seed"]}, random flips and quarter turns; validation on
  seed {summary["validation_seed"]} (500 images), held-out test on seed {summary["test_seed"]}
  ({summary["test_images"]} images).
- Training: {summary["steps"]} steps of batch {summary["batch_size"]}, AdamW (lr {summary["lr"]}, weight decay
  {summary["weight_decay"]}), {summary["warmup"]} warm-up steps then cosine; {summary["minutes"]} minutes on
  {summary["threads"]} CPU threads (torch {summary["torch"]}, transformers {summary["transformers"]}).
- **Held-out test accuracy: {summary["test_accuracy"]:.1%}** (an image counts when its two best prompts name
  exactly its two shapes; chance is 1/6).

Not a model of anything real: use it to check that an image–text explanation follows the text, offline.

## Training curve

| step | minutes | train loss | validation accuracy |
|---|---|---|---|
{rows}
"""
    (FOLDER / "MODEL_CARD.md").write_text(wrapped_card(card), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_training_arguments(parser, steps=2000, batch_size=64, lr=1e-3, weight_decay=0.05, warmup=200, eval_every=250)
    parser.add_argument("--test-images", type=int, default=2000)
    args = parser.parse_args(argv)
    start_training(args)

    tokenizer, model = build_pairs_tokenizer(), build_pairs_model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    validation = split(VALIDATION_SEED, 500)
    loader = DataLoader(TrainingBatches(args.batch_size, args.steps), batch_size=None, num_workers=1, prefetch_factor=4)
    curve, running_loss, started = [], 0.0, time.perf_counter()
    for step, (images, targets) in enumerate(loader):
        texts = prompt_ids(tokenizer, int(torch.randint(len(PROMPTS), ())))
        logits = model(pixel_values=augment(images), **texts).logits_per_image
        loss = F.cross_entropy(logits, targets / targets.sum(1, keepdim=True))
        running_loss += optimise(model, optimizer, loss, step, args)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            point = dict(step=step + 1, minutes=round((time.perf_counter() - started) / 60, 2),
                         train_loss=round(running_loss / args.eval_every, 4),
                         val_accuracy=round(pair_accuracy(model, tokenizer, *validation), 4))
            running_loss = 0.0
            curve.append(point)
            print(json.dumps(point), flush=True)
    test_accuracy = pair_accuracy(model, tokenizer, *split(TEST_SEED, args.test_images))
    minutes = (time.perf_counter() - started) / 60
    print(f"held-out test accuracy (seed {TEST_SEED}, {args.test_images} images): {test_accuracy:.4f}; "
          f"{minutes:.1f} min")

    import transformers

    FOLDER.mkdir(exist_ok=True)
    model.save_pretrained(FOLDER)
    tokenizer.save_pretrained(FOLDER)
    build_pairs_processor().save_pretrained(FOLDER)
    summary = dict(
        vision=VISION_ARCHITECTURE, text=TEXT_ARCHITECTURE, projection_dim=PROJECTION_DIM,
        vocabulary=tokenizer.vocab_size, parameters=sum(p.numel() for p in model.parameters()),
        train_seed=TRAIN_SEED, validation_seed=VALIDATION_SEED, test_seed=TEST_SEED, test_images=args.test_images,
        test_accuracy=round(test_accuracy, 4), steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, warmup=args.warmup, minutes=round(minutes, 1),
        threads=torch.get_num_threads(), torch=torch.__version__, transformers=transformers.__version__,
    )
    record = dict(summary=summary, curve=curve)
    (FOLDER / "training_curve.json").write_text(json.dumps(record, indent=1))
    write_model_card(record)


if __name__ == "__main__":
    main()
