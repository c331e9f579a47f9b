"""``vitroll models [PATTERN]``: the models shipped with vitroll, the supported model families, and which timm
model names match a pattern."""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from typing import Optional, Sequence

from vitroll.commands.arguments import TESTBED_NAME

SHIPPED_MODELS = {
    TESTBED_NAME: "four-shape image classifier, the default --model: overlay, compare, annotate, evaluate, sanity",
    "vitroll-clip-shapes": "image–text model of two-shape images: overlay --text, evaluate --testbed-kind pairs",
    "vitroll-caption-shapes": "captioner of two-shape images: caption, evaluate --testbed-kind captions",
    "vitroll-text-keyword": "text classifier where a planted key word decides: text, evaluate --testbed-kind text",
    "vitroll-text-shortcut": "text classifier that leans on a group word, a planted bias: text",
}
"""What each model shipped with vitroll (:mod:`vitroll.testbed`) is, and the sub-commands that take it; these
work offline, without a download."""


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("pattern", nargs="?", metavar="PATTERN",
                        help="timm name pattern, e.g. 'deit*' (without it: the families only)")
    parser.add_argument("--pretrained", action="store_true", help="only names with pretrained weights (name.tag)")
    parser.set_defaults(run=run)


def _table(rows: Sequence[tuple[str, str]], name_width: int, width: Optional[int]) -> str:
    """``rows`` of (name, text) as lines: the names in a column ``name_width`` wide, the text after it wrapped to
    ``width`` characters with its further lines under its first (under the name, indented, when the text column would
    be narrower than 30 characters); each row on one line when ``width`` is None (piped: one line per row to grep)."""
    first = [f"  {name:<{name_width}}  " for name, _ in rows]
    if width is None:
        return "\n".join((start + text).rstrip() for start, (_, text) in zip(first, rows))
    lines = []
    for start, (name, text) in zip(first, rows):
        if width - len(start) >= 30:
            lines.extend(textwrap.wrap(text, width, initial_indent=start, subsequent_indent=" " * len(start),
                                       break_on_hyphens=False) or [start.rstrip()])  # a family without notes
        else:
            lines.append(f"  {name}")
            lines.extend(textwrap.wrap(text, max(width, 40), initial_indent=" " * 6, subsequent_indent=" " * 6,
                                       break_on_hyphens=False))
    return "\n".join(lines)


def _terminal_width() -> Optional[int]:
    """The terminal's width in characters (``COLUMNS`` when set), or None when stdout is no terminal."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def run(args: argparse.Namespace) -> int:
    # the families import torch (timm): here, not at the top, so that --help and usage errors answer at once
    from vitroll.capture.families import FAMILIES
    from vitroll.models.timm import supported_timm_names

    width = _terminal_width()
    families = [(family.name, " — ".join(part for part in (", ".join(family.name_patterns), family.notes) if part))
                for family in FAMILIES]
    name_width = max(len(name) for name in [*SHIPPED_MODELS, *(family.name for family in FAMILIES)])
    print("Shipped with vitroll (offline):")
    print(_table(list(SHIPPED_MODELS.items()), name_width, width))
    print("\nSupported families:")
    print(_table(families, name_width, width))
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
