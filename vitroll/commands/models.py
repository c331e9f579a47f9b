"""``vitroll models [PATTERN]``: the supported model families, and which timm model names match a pattern."""

from __future__ import annotations

import argparse
from vitroll.capture.families import FAMILIES
from vitroll.models.timm import supported_timm_names


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list supported families and timm models matching a pattern",
                                   description=__doc__)
    parser.add_argument("pattern", nargs="?", metavar="PATTERN",
                        help="timm name pattern, e.g. 'deit*' (without it: the families only)")
    parser.add_argument("--pretrained", action="store_true", help="only names with pretrained weights (name.tag)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    print("Supported families:")
    for family in FAMILIES:
        print(f"  {family.name:<5} {', '.join(family.name_patterns)}  — {family.notes}")
    if args.pattern is None:
        return 0
    import timm

    names = timm.list_models(args.pattern, pretrained=args.pretrained)
    supported = supported_timm_names(args.pattern, pretrained=args.pretrained)
    print(f"\n{len(names)} timm models match {args.pattern!r} ({len(supported & set(names))} supported):")
    for name in names:
        print(f"  {'supported  ' if name in supported else 'unsupported'}  {name}")
    return 0
