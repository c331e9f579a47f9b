"""Registries whose built-in entries are registered on first read, so that importing vitroll imports no model library.

The built-in model families, attention readouts and refusals are registered by importing :mod:`vitroll.adapters`,
which imports torch and timm. :mod:`vitroll.capture` holds the registries and reads them, but cannot import the
adapters, which are built on it; ``vitroll/__init__.py``, above both, hands that import over with :func:`defer`, and
each :class:`Registry` runs it before it is first read or written. ``import vitroll.cli`` therefore reaches no model
library, and a deep import (``from vitroll.capture import AttentionRecorder``) still finds timm's families.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, TypeVar

Entry = TypeVar("Entry")

_DEFERRED: list[Callable[[], object]] = []


def defer(registration: Callable[[], object]) -> None:
    """Run ``registration`` before any :class:`Registry` is first read or written."""
    _DEFERRED.append(registration)


def run_deferred() -> None:
    """Run the deferred registrations, each once, in the order deferred; a registration that itself reads a registry
    (the adapters adding their families) finds none left to run."""
    while _DEFERRED:
        _DEFERRED.pop(0)()


class Registry(list[Entry]):
    """A list of registered entries that runs the deferred registrations (:func:`run_deferred`) before it is read or
    an entry is replaced, so that the built-in entries come first and a user's registration (which reads the list to
    replace one of the same name) takes precedence. ``append`` runs none: the registries' own modules append their
    first entries while they are imported, before the adapters, which are built on them, can be."""

    def __iter__(self) -> Iterator[Entry]:
        run_deferred()
        return super().__iter__()

    def __reversed__(self) -> Iterator[Entry]:
        run_deferred()
        return super().__reversed__()

    def __len__(self) -> int:
        run_deferred()
        return super().__len__()

    def __getitem__(self, index: Any) -> Any:
        run_deferred()
        return super().__getitem__(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        run_deferred()
        super().__setitem__(index, value)

    def __contains__(self, entry: object) -> bool:
        run_deferred()
        return super().__contains__(entry)

    def __repr__(self) -> str:
        run_deferred()
        return super().__repr__()
