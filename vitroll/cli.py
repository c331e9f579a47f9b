"""The ``vitroll`` command: parse, call a pipeline, print. User mistakes end in one line and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from vitroll import __version__
from vitroll.commands import COMMANDS
from vitroll.errors import VitrollError

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitroll", description="Explain Vision Transformers with attention rollout.")
    parser.add_argument("--version", action="version", version=f"vitroll {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (VitrollError, ValueError) as error:
        print(f"vitroll: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("vitroll: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
