"""Registries whose built-in entries are registered on first read, so that importing vitroll imports no model library.

The built-in model families, attention readouts and refusals are registered by importing :mod:`vitroll.adapters`,
which imports torch and timm. :mod:`vitroll.capture` holds the registries and reads them, but cannot import the
adapters, which are built on it; ``vitroll/__init__.py``, above both, hands that import over with :func:`defer`, and
each :class:`Registry` runs it before it is first read or written. ``import vitroll.cli`` therefore reaches no model
library, and a deep import (``from vitroll.capture import AttentionRecorder``) still finds timm's families.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

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


def _after_deferred(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of a list, run after the deferred registrations."""

    @functools.wraps(method)
    def run(self: list, *args: Any, **kwargs: Any) -> Any:
        run_deferred()
        return method(self, *args, **kwargs)

    return run


class Registry(list[Entry]):
    """A list of registered entries that runs the deferred registrations (:func:`run_deferred`) before any use but
    ``append``, so that the built-in entries come first and a user's registration (which reads the list to replace
    one of the same name) takes precedence. ``append`` runs none: the registries' own modules append their first
    entries while they are imported, before the adapters, which are built on them, can be."""

    __iter__ = _after_deferred(list.__iter__)
    __reversed__ = _after_deferred(list.__reversed__)
    __len__ = _after_deferred(list.__len__)
    __getitem__ = _after_deferred(list.__getitem__)
    __setitem__ = _after_deferred(list.__setitem__)
    __delitem__ = _after_deferred(list.__delitem__)
    __contains__ = _after_deferred(list.__contains__)
    __eq__ = _after_deferred(list.__eq__)
    __add__ = _after_deferred(list.__add__)
    __repr__ = _after_deferred(list.__repr__)
    copy = _after_deferred(list.copy)
    count = _after_deferred(list.count)
    index = _after_deferred(list.index)
    insert = _after_deferred(list.insert)
    extend = _after_deferred(list.extend)
    remove = _after_deferred(list.remove)
    pop = _after_deferred(list.pop)
    clear = _after_deferred(list.clear)
