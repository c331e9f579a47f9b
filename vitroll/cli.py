"""The ``vitroll`` command: parse, call a pipeline, print. User mistakes end in one line and a non-zero exit."""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Optional, Sequence

from vitroll._version import __version__
from vitroll.commands import COMMANDS
from vitroll.errors import EXIT_USER_ERROR, VitrollError, one_line

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a program whose reader went away (``vitroll … | head -1``)."""


class OneLineArgumentParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``vitroll: error: …`` line (argparse prints the usage too).

    Sub-command parsers are made with the parent's class, so they report the same way and name themselves.
    """

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("vitroll").strip()
        where = f"{command}: " if command else ""
        self.exit(EXIT_USER_ERROR, f"vitroll: error: {where}{message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="vitroll", description=(
        "Explain transformers (image classifiers, image–text models, captioners, text models) with attention "
        "rollout and its relatives."))
    parser.add_argument("--version", action="version", version=f"vitroll {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def _silence_stdout() -> None:
    """Point stdout at the null device so that the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = args.run(args)
        sys.stdout.flush()  # a reader that went away shows here at the latest, while it can still be handled
        return status
    except (VitrollError, ValueError) as error:
        print(f"vitroll: error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # the reader of our output closed it: stop quietly, as `cat … | head` does
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as error:  # the file system refused (permissions, a full disk): the user's to fix, not a bug
        print(f"vitroll: error: {one_line(error)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("vitroll: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
