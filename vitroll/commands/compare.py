"""``vitroll compare IMAGE… --model A --model B``: where do two (or more) models look? Writes a grid figure
(images × models, with predictions) and a CSV of per-image agreement (Spearman, top-10 % IoU) for every pair,
measured in the original image's pixels, so models of different patch and input sizes compare directly."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from vitroll.commands.common import (
    add_device_argument, add_method_arguments, add_render_arguments, add_trust_checkpoint_argument, output_folder,
    resolve_device, settings_from_args, warn_if_trusting,
)
from vitroll.models import class_names, load_model
from vitroll.pipelines.compare import Explainer, compare, pair_summaries, plot_comparison
from vitroll.preprocess import Preprocessing


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="compare the maps of several models on the same images",
                                   description=__doc__)
    parser.add_argument("images", nargs="+", metavar="IMAGE")
    parser.add_argument("--model", action="append", required=True, help="a model to compare (repeat: two or more)")
    parser.add_argument("--checkpoint", action="append",
                        help="weights for the model in the same position (repeat per model; 'none' for none)")
    add_trust_checkpoint_argument(parser)
    parser.add_argument("--pretrained", action="store_true", help="load the pretrained weights (timm's or torchvision's) for every model")
    add_device_argument(parser)
    parser.add_argument("--out", type=output_folder, default="compare", help="output folder")
    add_method_arguments(parser)
    add_render_arguments(parser)
    parser.set_defaults(run=run)


def explainers_from_args(args: argparse.Namespace) -> list[Explainer]:
    if len(args.model) < 2:
        raise ValueError("give at least two --model options to compare")
    checkpoints = args.checkpoint or []
    if checkpoints and len(checkpoints) != len(args.model):
        raise ValueError(f"{len(checkpoints)} --checkpoint for {len(args.model)} --model; give one per model ('none' to skip)")
    checkpoints = [None if c in (None, "none") else c for c in checkpoints] or [None] * len(args.model)
    warn_if_trusting(args, [c for c in checkpoints if c is not None])
    explainers, seen = [], {}
    for name, checkpoint in zip(args.model, checkpoints):
        model = load_model(name, pretrained=args.pretrained, checkpoint=checkpoint, trust_checkpoint=args.trust_checkpoint,
                           device=resolve_device(args.device))
        label = name if checkpoint is None else f"{name}:{Path(checkpoint).stem}"
        seen[label] = seen.get(label, 0) + 1
        label = label if seen[label] == 1 else f"{label}#{seen[label]}"
        explainers.append(Explainer(label, model, Preprocessing.from_model(model), class_names(model)))
    return explainers


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    result = compare(args.images, explainers_from_args(args), settings)
    for error in result.errors:
        print(f"vitroll: error: {error}", file=sys.stderr)
    if not result.images:
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "agreement.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["image", "model_a", "model_b", "spearman", "top10_iou"])
        writer.writeheader()
        writer.writerows(result.rows)
    plot_comparison(result, args.out / "grid.png")
    for line in pair_summaries(result.rows):
        print(line)
    print(f"wrote {args.out}/grid.png and agreement.csv")
    return 1 if result.errors else 0
