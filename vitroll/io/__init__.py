"""Reading inputs: images (robust decoding).

Its names are imported from their modules on first use (PEP 562): :mod:`vitroll.io.images` imports numpy and Pillow,
which the command line's parsers, importing :mod:`vitroll.io.names` and the like, must not wait for."""

from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    "IMAGE_SUFFIXES": "vitroll.io.images", "encode_png": "vitroll.io.images", "load_image": "vitroll.io.images",
    "write_atomic": "vitroll.io.writing",
}

__all__ = list(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
