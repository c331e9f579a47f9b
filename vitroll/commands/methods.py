"""``vitroll methods [NAME]``: the saliency methods, each with its options (types and defaults, read from the
method's signature) and what it needs; with NAME, one method and its documentation."""

from __future__ import annotations

import argparse
import inspect

from typing import TYPE_CHECKING

from vitroll.commands.arguments import OPTION_UNITS, method_names

if TYPE_CHECKING:
    from vitroll.methods import Method


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("name", nargs="?", choices=method_names(), metavar="NAME",
                        help="one method (without it: all of them)")
    parser.set_defaults(run=run)


def needs(method: Method) -> str:
    """What running ``method`` takes beyond a forward pass: ``gradients``, optional packages."""
    wants = (["gradients"] if method.needs_gradients else []) + list(method.requires)
    return ", ".join(wants) or "a forward pass"


def describe(method: Method) -> list[str]:
    """The lines ``vitroll methods`` prints for ``method``: its name and needs, then one option per line (its unit
    after ``#`` where it has one)."""
    options = [f"    {option.describe()}" + (f"  # {OPTION_UNITS[name]}" if name in OPTION_UNITS else "")
               for name, option in method.options.items()]
    return [f"{method.name}  (needs {needs(method)})", *(options or ["    no options"])]


def run(args: argparse.Namespace) -> int:
    # the methods import torch: here, not at the top, so that --help and usage errors answer at once
    from vitroll.methods import METHODS

    if args.name:
        print("\n".join(describe(METHODS[args.name])))
        print(f"\n{inspect.getdoc(METHODS[args.name].compute) or ''}")
        return 0
    for name in sorted(METHODS):
        print("\n".join(describe(METHODS[name])))
    print("\nGive an option with --option KEY=VALUE (repeatable), or with its own flag where it has one "
          "(--discard-ratio …).")
    return 0
