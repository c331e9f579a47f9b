"""``vitroll models [PATTERN]``: the models shipped with vitroll, the supported model families, and which timm
model names match a pattern."""

from __future__ import annotations

import argparse

from vitroll.capture.families import FAMILIES
from vitroll.models.timm import supported_timm_names
from vitroll.testbed.model import TESTBED_NAME

SHIPPED_MODELS = {
    TESTBED_NAME: "four-shape image classifier, the default --model: overlay, compare, annotate, evaluate, sanity",
    "vitroll-clip-shapes": "image–text model of two-shape images: overlay --text, evaluate --testbed-kind pairs",
    "vitroll-caption-shapes": "captioner of two-shape images: caption, evaluate --testbed-kind captions",
    "vitroll-text-keyword": "text classifier where a planted key word decides: text, evaluate --testbed-kind text",
    "vitroll-text-shortcut": "text classifier that leans on a group word, a planted bias: text",
}
"""What each model shipped with vitroll (:mod:`vitroll.testbed`) is, and the sub-commands that take it; these
work offline, without a download."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list supported families and timm models matching a pattern",
                                   description=__doc__)
    parser.add_argument("pattern", nargs="?", metavar="PATTERN",
                        help="timm name pattern, e.g. 'deit*' (without it: the families only)")
    parser.add_argument("--pretrained", action="store_true", help="only names with pretrained weights (name.tag)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print("Shipped with vitroll (offline):")
    for name, what in SHIPPED_MODELS.items():
        print(f"  {name:<22} {what}")
    print("\nSupported families:")
    for family in FAMILIES:
        print(f"  {family.name:<5} {', '.join(family.name_patterns)}  — {family.notes}")
    if args.pattern is None:
        return 0
    import timm

    names = timm.list_models(args.pattern, pretrained=args.pretrained)
    supported = supported_timm_names(args.pattern, pretrained=args.pretrained)
    print(f"\n{len(names)} timm models match {args.pattern!r} ({len(supported & set(names))} supported)"
          f"{':' if names else ''}")
    for name in names:
        print(f"  {'supported  ' if name in supported else 'unsupported'}  {name}")
    return 0
