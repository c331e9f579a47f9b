"""Train the text testbed models and ship them: ``vitroll/testbed/text_{keyword,shortcut}/`` + model cards.

    python scripts/train_text.py                    # both shipped models (a few minutes on 2 CPU cores)
    python scripts/train_text.py --only keyword --steps 200     # a smoke run

Fresh sentences every step from seed 1 (no epochs). Accuracy is measured on both kinds of data of other seeds:
validation (seed 2) during training, the held-out test split (seed 3) once at the end. The shortcut model's
accuracy on keyword data is the visible cost of its bias: there the group word is noise.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from vitroll.testbed.text import CLASSES, KEYWORD, SHORTCUT, TextConfig, samples
from vitroll.testbed.text_model import ARCHITECTURE, FOLDERS, build_text_model, build_text_tokenizer
from vitroll.testbed.training import add_training_arguments, optimise, wrapped_card

TRAIN_SEED, VALIDATION_SEED, TEST_SEED = 1, 2, 3
DATA = {"keyword": KEYWORD, "shortcut": SHORTCUT}


def encode(tokenizer, seed: int, count: int, config: TextConfig, start: int = 0) -> dict[str, torch.Tensor]:
    drawn = list(samples(seed, count, config, start))
    batch = tokenizer([s.text for s in drawn], padding=True, return_tensors="pt")
    return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                labels=torch.tensor([s.label for s in drawn]))


@torch.no_grad()
def accuracy(model, data: dict[str, torch.Tensor]) -> float:
    model.eval()
    logits = model(input_ids=data["input_ids"], attention_mask=data["attention_mask"]).logits
    model.train()
    return (logits.argmax(-1) == data["labels"]).float().mean().item()


def write_model_card(folder: Path) -> None:
    """MODEL_CARD.md in ``folder`` from its ``training_curve.json``."""
    record = json.loads((folder / "training_curve.json").read_text())
    summary, curve = record["summary"], record["curve"]
    rows = "\n".join(f"| {p['step']} | {p['minutes']} | {p['train_loss']} | {p['val_keyword']} | {p['val_shortcut']} |"
                     for p in curve)
    purpose = {
        "keyword": "trained on *keyword* data: the planted key word decides the label, the group word is drawn at "
                   "random. Its explanations should point at the key word.",
        "shortcut": "trained on *shortcut* data: the group word always names the label's group while the key word "
                    f"agrees with the label only {summary['data']['key_word_agreement']:.0%} of the time. It learns "
                    "the group word as a shortcut — a planted bias for `vitroll` to detect.",
    }[summary["name"]]
    card = f"""# vitroll-text-{summary["name"]} — a text testbed model shipped with vitroll

A tiny `BertForSequenceClassification` trained from scratch by `scripts/train_text.py` on the sentences of
`vitroll.testbed.text` (classes: {", ".join(CLASSES)}), {purpose}

- Architecture: `BertConfig({", ".join(f"{k}={v}" for k, v in summary["architecture"].items())})`, vocabulary of
  {summary["vocabulary"]} whole words (one token per word), {summary["parameters"]:,} parameters, float32 safetensors.
- Data: fresh sentences every step from seed {summary["train_seed"]} ({json.dumps(summary["data"])}); validation on
  seed {summary["validation_seed"]}, held-out test on seed {summary["test_seed"]} ({summary["test_sentences"]}
  sentences of each kind).
- Training: {summary["steps"]} steps of batch {summary["batch_size"]}, AdamW (lr {summary["lr"]}, weight decay
  {summary["weight_decay"]}), {summary["warmup"]} warm-up steps then cosine; {summary["minutes"]} minutes on
  {summary["threads"]} CPU threads (torch {summary["torch"]}, transformers {summary["transformers"]}).
- **Held-out test accuracy: {summary["test_keyword"]:.1%} on keyword data, {summary["test_shortcut"]:.1%} on shortcut
  data.**

Not a model of anything real: use it to check that an explanation finds a known word, offline.

## Training curve

| step | minutes | train loss | validation accuracy (keyword data) | validation accuracy (shortcut data) |
|---|---|---|---|---|
{rows}
"""
    (folder / "MODEL_CARD.md").write_text(wrapped_card(card), encoding="utf-8")


def train(name: str, args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    folder, config = FOLDERS[name], DATA[name]
    tokenizer, model = build_text_tokenizer(), build_text_model().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    validation = {kind: encode(tokenizer, VALIDATION_SEED, 1000, data) for kind, data in DATA.items()}
    curve, running_loss, started = [], 0.0, time.perf_counter()
    for step in range(args.steps):
        batch = encode(tokenizer, TRAIN_SEED, args.batch_size, config, start=step * args.batch_size)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        loss = F.cross_entropy(logits, batch["labels"])
        running_loss += optimise(model, optimizer, loss, step, args)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            point = dict(step=step + 1, minutes=round((time.perf_counter() - started) / 60, 2),
                         train_loss=round(running_loss / args.eval_every, 4),
                         **{f"val_{kind}": round(accuracy(model, data), 4) for kind, data in validation.items()})
            running_loss = 0.0
            curve.append(point)
            print(name, json.dumps(point), flush=True)
    test = {kind: accuracy(model, encode(tokenizer, TEST_SEED, args.test_sentences, data))
            for kind, data in DATA.items()}
    minutes = (time.perf_counter() - started) / 60
    print(f"{name}: held-out test accuracy {test}; {minutes:.1f} min")

    import transformers

    folder.mkdir(exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    summary = dict(
        name=name, architecture=ARCHITECTURE, vocabulary=tokenizer.vocab_size,
        parameters=sum(p.numel() for p in model.parameters()), data=config.__dict__, train_seed=TRAIN_SEED,
        validation_seed=VALIDATION_SEED, test_seed=TEST_SEED, test_sentences=args.test_sentences,
        test_keyword=round(test["keyword"], 4), test_shortcut=round(test["shortcut"], 4), steps=args.steps,
        batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay, warmup=args.warmup,
        minutes=round(minutes, 1), threads=torch.get_num_threads(), torch=torch.__version__,
        transformers=transformers.__version__,
    )
    (folder / "training_curve.json").write_text(json.dumps(dict(summary=summary, curve=curve), indent=1))
    write_model_card(folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(DATA), help="train one of the two models")
    add_training_arguments(parser, steps=1500, batch_size=128, lr=2e-3, weight_decay=0.01, warmup=100, eval_every=100)
    parser.add_argument("--test-sentences", type=int, default=2000)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in [args.only] if args.only else list(DATA):
        train(name, args)


if __name__ == "__main__":
    main()
