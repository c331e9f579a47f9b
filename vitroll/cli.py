"""The ``vitroll`` command: parse, call a pipeline, print. User mistakes end in one line and a non-zero exit."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import io
import os
import sys
from typing import Any, Iterable, Iterator, NoReturn, Optional, Sequence

from vitroll._version import __version__
from vitroll.commands import COMMANDS
from vitroll.errors import EXIT_USER_ERROR, VitrollError, one_line
from vitroll.io.names import READABLE, error_line
from vitroll.pipelines.ranks import launched_rank, leave_to_rank_zero
from vitroll.wording import worded_for_the_command_line

EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a program whose reader went away (``vitroll … | head -1``)."""


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean A, B?"`` for the candidates closest to ``word``, or ``""`` when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.75)
    return f"; did you mean {', '.join(close)}?" if close else ""


class OneLineArgumentParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one ``vitroll: error: …`` line (argparse prints the usage too),
    naming the closest sub-command, option or choice to a misspelled one.

    Sub-command parsers are made with the parent's class, so they report the same way and name themselves.
    """

    words: Sequence[str] = ()
    """The command line being parsed (:meth:`parse_args` sets it for the sub-command parsers' errors too)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("vitroll").strip()
        where = f"{command}: " if command else ""
        if message.startswith("the following arguments are required"):
            # argparse checks what is missing before what it did not know: a mistyped option is the mistake to name
            unknown = self._unknown_options(OneLineArgumentParser.words, command)
            message = self._unrecognized(unknown) if unknown else message
        message = f"{message}{_option_like_file_hint(OneLineArgumentParser.words)}"
        line = error_line(f"{where}{message} (see `{self.prog} --help`)")
        if launched_rank() != 0:  # under torchrun every rank parses the same command line: rank 0 tells it
            self.exit(leave_to_rank_zero(line, EXIT_USER_ERROR))
        self.exit(EXIT_USER_ERROR, f"{line}\n")

    def format_help(self) -> str:
        """argparse's help, with the descriptions' docstring markup (````code````) read as plain `code`."""
        return super().format_help().replace("``", "`")

    def parse_args(self, args: Optional[Sequence[str]] = None,  # type: ignore[override]
                   namespace: Optional[argparse.Namespace] = None) -> argparse.Namespace:
        """argparse's ``parse_args``, but arguments a sub-command does not know are that sub-command's error (argparse
        reports them as the top-level parser's), with the closest options it has; then each action's
        ``check_parsed(value)``, where it has one, is called (its ``argparse.ArgumentError`` the usage error)."""
        OneLineArgumentParser.words = list(sys.argv[1:] if args is None else args)
        parsed, unknown = self.parse_known_args(args, namespace)
        parser = self._sub_command_parser(parsed) or self
        if unknown:
            parser.error(parser._unrecognized(unknown))
        for action in parser._actions:  # checks that import torch (--device) wait for every other argument
            if hasattr(action, "check_parsed"):
                try:
                    action.check_parsed(getattr(parsed, action.dest))
                except argparse.ArgumentError as error:
                    parser.error(str(error))
        return parsed

    def _unrecognized(self, unknown: Sequence[str]) -> str:
        """argparse's message for arguments it did not know, with the closest option to a misspelled one."""
        options = [option for option in self._option_string_actions if option.startswith("--")]
        hints = [did_you_mean(word.partition("=")[0], options) for word in unknown if word.startswith("--")]
        return f"unrecognized arguments: {' '.join(unknown)}{next((hint for hint in hints if hint), '')}"

    def _unknown_options(self, words: Sequence[str], command: str) -> list[str]:
        """The words of ``words`` given to this parser (those after ``command``, its name, for a sub-command's) that
        are written as options but name none of its own, in full or abbreviated. Words after ``--`` are inputs, and
        so are ``-`` and negative numbers."""
        if command:
            words = words[words.index(command) + 1:] if command in words else []
        words = words[:words.index("--")] if "--" in words else words
        return [word for word in words if word.startswith("-") and word != "-"
                and not self._negative_number_matcher.match(word) and not self._names_an_option(word.partition("=")[0])]

    def _names_an_option(self, name: str) -> bool:
        if name in self._option_string_actions:
            return True
        if name.startswith("--"):  # argparse takes an unambiguous abbreviation of a long option
            return any(option.startswith(name) for option in self._option_string_actions)
        return name[:2] in self._option_string_actions  # a short option with its value attached: -n4

    def _sub_command_parser(self, parsed: argparse.Namespace) -> Optional[argparse.ArgumentParser]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and getattr(parsed, action.dest, None):
                return action.choices[getattr(parsed, action.dest)]
        return None

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse's own check, with the closest choices named first
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}{did_you_mean(str(value), choices)} "
                                                 f"(choose from {', '.join(choices)})")


def _option_like_file_hint(words: Sequence[str]) -> str:
    """A hint for a file or folder whose name starts with ``-`` (argparse took it for an option): how to name it.
    Words after ``--`` are inputs already."""
    options = words[:words.index("--")] if "--" in words else words
    path = next((word for word in options if len(word) > 1 and word.startswith("-") and os.path.lexists(word)), None)
    if path is None:
        return ""
    kind = "folder" if os.path.isdir(path) else "file"
    return f"; {path} is a {kind} read as an option: write ./{path} (or put it after --, which ends the options)"


class _CommandParsers(dict):
    """The sub-command parsers by name; each gets its arguments from its module, imported then, the first time it is
    looked up (argparse does when it parses its command; ``vitroll --help`` looks up none), so that a command line
    imports only its own command's module. Reading them all (``values``, ``items``) registers them all."""

    def __init__(self) -> None:
        super().__init__()
        self._registered: set[str] = set()

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        parser = super().__getitem__(name)
        if name not in self._registered:
            self._registered.add(name)
            importlib.import_module(f"vitroll.commands.{name}").register(parser)
        return parser

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[name] if name in self else default

    def values(self) -> list[argparse.ArgumentParser]:  # type: ignore[override]
        return [self[name] for name in self]

    def items(self) -> list[tuple[str, argparse.ArgumentParser]]:  # type: ignore[override]
        return [(name, self[name]) for name in self]


class _LazySubParsersAction(argparse._SubParsersAction):
    """argparse's sub-command action over :class:`_CommandParsers`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_parser_map = self.choices = _CommandParsers()


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(prog="vitroll", description=(
        "Explain transformers (image classifiers, image–text models, captioners, text models) with attention "
        "rollout and its relatives."))
    parser.add_argument("--version", action="version", version=f"vitroll {__version__}")
    parser.register("action", "parsers", _LazySubParsersAction)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_line in COMMANDS.items():
        subparsers.add_parser(name, help=help_line)
    return parser


def _silence_stdout() -> None:
    """Point stdout at the null device so that the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


@contextlib.contextmanager
def _readable_output() -> Iterator[None]:
    """While a command runs, print a file name that is not UTF-8 with its bytes as ``\\xe9`` on stdout and stderr
    alike (stdout's handler is ``strict`` in most locales: such a name stopped a command after its work; stderr spelt
    it ``\\udce9``). The streams are the process's: their own handlers come back after, for a program that calls
    :func:`main` and prints on."""
    streams = [(stream, stream.errors) for stream in (sys.stdout, sys.stderr) if isinstance(stream, io.TextIOWrapper)]
    for stream, _ in streams:
        stream.reconfigure(errors=READABLE)
    try:
        yield
    finally:
        for stream, errors in streams:
            stream.reconfigure(errors=errors)


def main(argv: Optional[Sequence[str]] = None) -> int:
    with _readable_output(), worded_for_the_command_line():
        try:
            return _run(argv)
        except KeyboardInterrupt:  # while parsing too: checking --device imports torch, which takes seconds
            print("vitroll: interrupted", file=sys.stderr)
            return 130


def _run(argv: Optional[Sequence[str]]) -> int:
    args = build_parser().parse_args(argv)
    args.argv = OneLineArgumentParser.words  # for a command that runs itself again (annotate --processes)
    try:
        status = args.run(args)
        sys.stdout.flush()  # a reader that went away shows here at the latest, while it can still be handled
        return status
    except (VitrollError, ValueError) as error:
        print(error_line(str(error)), file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # the reader of our output closed it: stop quietly, as `cat … | head` does
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as error:  # the file system refused (permissions, a full disk): the user's to fix, not a bug
        print(error_line(one_line(error)), file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
