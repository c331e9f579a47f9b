"""Train the captioning testbed (a tiny VisionEncoderDecoderModel on two-shape images) and ship it:
``vitroll/testbed/caption_shapes/``.

    python scripts/train_captioner.py --threads 1                 # the shipped run
    python scripts/train_captioner.py --threads 1 --steps 100     # a smoke run

Each step draws fresh images of seed 1 and trains the decoder teacher-forced with cross-entropy on their captions
(:mod:`vitroll.testbed.captions`: "a disk left of a square", "a cross above a triangle"), ``[SEP]`` ending each,
padding ignored. No flips or turns: the captions' spatial words would change with them. Validation (seed 2) and
the held-out test (seed 3) caption greedily with ``generate`` and count exact captions and shape words right.
The folder is written at every evaluation, so a run stopped early leaves its latest model.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from vitroll.testbed.captioner_model import (
    DECODER_ARCHITECTURE, ENCODER_ARCHITECTURE, FOLDER, MAX_NEW_TOKENS, PAD, build_caption_model,
    build_caption_processor, build_caption_tokenizer,
)
from vitroll.testbed.captions import CAPTION_WORDS, caption_for, shape_word_positions
from vitroll.testbed.shape_pairs import PairsConfig, samples
from vitroll.testbed.shapes import CLASSES
from vitroll.testbed.training import add_training_arguments, optimise, start_training, to_tensor, wrapped_card

TRAIN_SEED, VALIDATION_SEED, TEST_SEED = 1, 2, 3
DATA = PairsConfig()


def split(seed: int, count: int, start: int = 0) -> tuple[torch.Tensor, list[str]]:
    """Images (n, 3, S, S) and their captions."""
    drawn = list(samples(seed, count, DATA, start))
    return to_tensor(np.stack([each.image for each in drawn])), [caption_for(each) for each in drawn]


def teacher_forcing(tokenizer, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder inputs ``[CLS] w1 … wn`` and labels ``w1 … wn [SEP]``, padding labelled −100."""
    ids = tokenizer(captions, padding=True, return_tensors="pt").input_ids
    labels = ids[:, 1:].clone()
    labels[labels == PAD] = -100
    return ids[:, :-1], labels


@torch.no_grad()
def caption(model, tokenizer, images: torch.Tensor, batch_size: int = 256) -> list[str]:
    """Greedy captions of ``images``."""
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(images), batch_size):
        generated = model.generate(pixel_values=images[start:start + batch_size], max_new_tokens=MAX_NEW_TOKENS)
        out += tokenizer.batch_decode(generated, skip_special_tokens=True)
    model.train(was_training)
    return [" ".join(text.split()) for text in out]


def accuracies(model, tokenizer, images: torch.Tensor, truths: list[str]) -> dict[str, float]:
    """``exact``: share of captions equal to the truth; ``shape_words``: share of the truth's shape words that the
    generated caption has at the same place."""
    generated = caption(model, tokenizer, images)
    exact = np.mean([g == t for g, t in zip(generated, truths)])
    hits = []
    for g, t in zip(generated, truths):
        words, want = g.split(), t.split()
        hits += [index < len(words) and words[index] == want[index] for index in shape_word_positions(t)]
    return dict(exact=round(float(exact), 4), shape_words=round(float(np.mean(hits)), 4))


def write_model_card(record: dict) -> None:
    summary, curve = record["summary"], record["curve"]
    rows = "\n".join(f"| {p['step']} | {p['minutes']} | {p['train_loss']} | {p['val_exact']} | {p['val_shape_words']} |"
                     for p in curve)
    test = (f"**Held-out test (seed {summary['test_seed']}, {summary['test_images']} images): exact-caption accuracy "
            f"{summary['test_exact']:.1%}, shape-word accuracy {summary['test_shape_words']:.1%}.**"
            if "test_exact" in summary else "**Run stopped before the held-out test: see the validation curve.**")
    card = f"""# vitroll-caption-shapes — the captioning testbed model shipped with vitroll

A tiny transformers `VisionEncoderDecoderModel` (ViT encoder, BERT decoder with cross-attention) trained from
scratch by `scripts/train_captioner.py` on the images of `vitroll.testbed.shape_pairs`: two large shapes of
different classes ({", ".join(CLASSES)}), one in each half (left/right or top/bottom) of a textured 64 px image.
Its captions (`vitroll.testbed.captions`) name both shapes in reading order — `a disk left of a square`,
`a cross above a triangle` ("left of" whenever the middle column separates the two shapes, also in the ~10 % of
images where the middle row does too; "above" when only the middle row does) — so each shape word has a mask its
per-word map should point into (`vitroll.testbed.captions.shape_word_targets`).

- Encoder: `ViTConfig({", ".join(f"{k}={v}" for k, v in summary["encoder"].items())})`; decoder:
  `BertConfig({", ".join(f"{k}={v}" for k, v in summary["decoder"].items())}, is_decoder=True,
  add_cross_attention=True)` over a whole-word vocabulary of {summary["vocabulary"]} tokens
  (`{" ".join(summary["words"])}` and BERT's specials; `[CLS]` starts a caption, `[SEP]` ends it);
  {summary["parameters"]:,} parameters, float32 safetensors ({summary["safetensors_bytes"]:,} bytes); images
  normalised with mean = std = 0.5 (`ViTImageProcessor`, no resize). Greedy captions:
  `model.generate(pixel_values, max_new_tokens={summary["max_new_tokens"]})`.
- Data: fresh images every step from seed {summary["train_seed"]}, no augmentation (flips and turns would change
  the spatial words); validation on seed {summary["validation_seed"]} ({summary["validation_images"]} images),
  held-out test on seed {summary["test_seed"]}.
- Training: teacher-forced cross-entropy, {summary["steps_done"]} of {summary["steps"]} steps of batch
  {summary["batch_size"]}, AdamW (lr {summary["lr"]}, weight decay {summary["weight_decay"]}), {summary["warmup"]}
  warm-up steps then cosine; {summary["minutes"]} minutes on {summary["threads"]} CPU thread(s)
  (torch {summary["torch"]}, transformers {summary["transformers"]}).
- {test} Exact: the whole greedy caption equals the truth (chance ≈ 1/24); shape words: the word at each of the
  truth's two shape-word places is right.

Not a model of anything real: use it to check, offline, that a caption word's map points at the shape the word
names.

Reproduce: `PYTHONPATH=. python scripts/train_captioner.py {summary["command"]}`

## Training curve

| step | minutes | train loss | validation exact | validation shape words |
|---|---|---|---|---|
{rows}
"""
    (FOLDER / "MODEL_CARD.md").write_text(wrapped_card(card), encoding="utf-8")


def save(model, tokenizer, record: dict) -> None:
    import transformers

    FOLDER.mkdir(exist_ok=True)
    model.save_pretrained(FOLDER)
    tokenizer.save_pretrained(FOLDER)
    build_caption_processor().save_pretrained(FOLDER)
    record["summary"].update(safetensors_bytes=(FOLDER / "model.safetensors").stat().st_size,
                             torch=torch.__version__, transformers=transformers.__version__)
    (FOLDER / "training_curve.json").write_text(json.dumps(record, indent=1))
    write_model_card(record)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_training_arguments(parser, steps=6000, batch_size=64, lr=1e-3, weight_decay=0.05, warmup=300, eval_every=500)
    parser.add_argument("--validation-images", type=int, default=256)
    parser.add_argument("--test-images", type=int, default=1000)
    parser.add_argument("--no-save", action="store_true", help="train and evaluate only (tuning runs)")
    args = parser.parse_args(argv)
    start_training(args)

    tokenizer, model = build_caption_tokenizer(), build_caption_model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    validation = split(VALIDATION_SEED, args.validation_images)
    summary = dict(
        encoder=ENCODER_ARCHITECTURE, decoder=DECODER_ARCHITECTURE, vocabulary=tokenizer.vocab_size,
        words=list(CAPTION_WORDS), parameters=sum(p.numel() for p in model.parameters()),
        max_new_tokens=MAX_NEW_TOKENS, train_seed=TRAIN_SEED, validation_seed=VALIDATION_SEED, test_seed=TEST_SEED,
        validation_images=args.validation_images, steps=args.steps, steps_done=0, batch_size=args.batch_size,
        lr=args.lr, weight_decay=args.weight_decay, warmup=args.warmup, threads=torch.get_num_threads(),
        command=" ".join(argv) if argv is not None else " ".join(__import__("sys").argv[1:]),
    )
    record = dict(summary=summary, curve=[])
    running_loss, started = 0.0, time.perf_counter()
    for step in range(args.steps):
        images, captions = split(TRAIN_SEED, args.batch_size, start=step * args.batch_size)
        decoder_input_ids, labels = teacher_forcing(tokenizer, captions)
        loss = model(pixel_values=images, decoder_input_ids=decoder_input_ids, labels=labels).loss
        running_loss += optimise(model, optimizer, loss, step, args)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            scores = accuracies(model, tokenizer, *validation)
            point = dict(step=step + 1, minutes=round((time.perf_counter() - started) / 60, 2),
                         train_loss=round(running_loss / ((step % args.eval_every) + 1), 4),
                         val_exact=scores["exact"], val_shape_words=scores["shape_words"])
            running_loss = 0.0
            record["curve"].append(point)
            summary.update(steps_done=step + 1, minutes=point["minutes"])
            print(json.dumps(point), flush=True)
            if not args.no_save:
                save(model, tokenizer, record)
    scores = accuracies(model, tokenizer, *split(TEST_SEED, args.test_images))
    minutes = (time.perf_counter() - started) / 60
    print(f"held-out test (seed {TEST_SEED}, {args.test_images} images): {scores}; {minutes:.1f} min", flush=True)
    summary.update(test_images=args.test_images, test_exact=scores["exact"], test_shape_words=scores["shape_words"],
                   minutes=round(minutes, 1))
    if not args.no_save:
        save(model, tokenizer, record)


if __name__ == "__main__":
    main()
