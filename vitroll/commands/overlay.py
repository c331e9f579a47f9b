"""``vitroll overlay IMAGE…``: saliency overlays for a few images, with the top-5 predictions."""

from __future__ import annotations

import argparse
import sys

from vitroll.commands.common import (
    add_explain_arguments, integer, model_from_args, output_folder, preprocessing_from_args, settings_from_args,
)
from vitroll.models import class_names
from vitroll.pipelines.single import explain_files


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("overlay", help="write saliency overlays for images and print top-5 classes",
                                   description=__doc__)
    parser.add_argument("images", nargs="+", metavar="IMAGE")
    parser.add_argument("--out", type=output_folder, default="out", help="output folder (default: out/)")
    parser.add_argument("--figure", action="store_true", help="also save image | heatmap | overlay figures")
    parser.add_argument("--batch-size", type=integer(1), default=8)
    add_explain_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    model = model_from_args(args)
    names = class_names(model, args.class_names)
    failures = 0
    for result in explain_files(args.images, model, out_dir=args.out, settings=settings,
                                preprocessing=preprocessing_from_args(model, args), class_names=names,
                                batch_size=args.batch_size, save_figure=args.figure):
        if result.error:
            failures += 1
            print(f"vitroll: error: {result.error}", file=sys.stderr)
            continue
        print(f"{result.path} -> {result.overlay_path}")
        for rank, (_, name, probability) in enumerate(result.top or [], start=1):
            print(f"  {rank}. {name}  {probability:.3f}")
    return 1 if failures else 0
