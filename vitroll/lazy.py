"""Public names a package imports from their modules on first use (PEP 562).

``vitroll`` and ``vitroll.io`` re-export names whose modules import torch, numpy or Pillow; importing them only when a
name is first reached lets ``import vitroll.cli`` and ``vitroll --help`` answer without those libraries.

>>> _NAMES = LazyNames(__name__, {"vitroll.io.images": ("load_image",)})   # doctest: +SKIP
>>> __all__, __getattr__, __dir__ = _NAMES.all, _NAMES.getattr, _NAMES.dir  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Mapping, Sequence


class LazyNames:
    """The public names of the package ``package``, each imported from its module when first looked up.

    Parameters
    ----------
    package : str
        The dotted name of the package whose ``__getattr__`` and ``__dir__`` these are (its ``__name__``).
    public : Mapping[str, Sequence[str]]
        The names each module defines, by the module's dotted name.
    submodules : bool
        Whether a name that is none of ``public`` but a sub-module of ``package`` not imported yet is imported and
        returned (``vitroll.capture`` after ``import vitroll``), rather than an :class:`AttributeError`.
    """

    def __init__(self, package: str, public: Mapping[str, Sequence[str]], *, submodules: bool = False) -> None:
        self.package = package
        self.module_of = {name: module for module, names in public.items() for name in names}
        """The module of each public name."""
        self.submodules = submodules

    @property
    def all(self) -> list[str]:
        """The public names, in the order ``public`` gives them: the package's ``__all__``."""
        return list(self.module_of)

    def getattr(self, name: str) -> Any:
        """The package's ``__getattr__``: the public ``name`` imported from its module, then kept in the package's
        namespace so that the next lookup does not come here.

        Parameters
        ----------
        name : str
            An attribute the package's namespace does not hold yet.

        Returns
        -------
        Any
            The object ``name`` names in its module, or the sub-module ``package.name`` (with ``submodules``).

        Raises
        ------
        AttributeError
            Where ``name`` is no public name (nor, with ``submodules``, a sub-module).
        """
        if name in self.module_of:
            value = getattr(importlib.import_module(self.module_of[name]), name)
            vars(sys.modules[self.package])[name] = value
            return value
        if self.submodules and importlib.util.find_spec(f"{self.package}.{name}") is not None:
            return importlib.import_module(f"{self.package}.{name}")
        raise AttributeError(f"module {self.package!r} has no attribute {name!r}")

    def dir(self) -> list[str]:
        """The package's ``__dir__``: its ``__all__``, sorted. What the package imported to work (this class, its
        helpers, sub-modules bound as they were imported) is no part of its API, so ``dir()`` and a shell's completion
        do not offer it.

        Returns
        -------
        list[str]
            The names of the package's ``__all__`` (:attr:`all` where it has none), once each.
        """
        return sorted(set(getattr(sys.modules[self.package], "__all__", self.all)))
