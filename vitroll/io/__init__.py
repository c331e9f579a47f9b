"""Reading inputs: images (robust decoding).

Its names are imported from their modules on first use (PEP 562): :mod:`vitroll.io.images` imports numpy and Pillow,
which the command line's parsers, importing :mod:`vitroll.io.names` and the like, must not wait for."""

from __future__ import annotations

from vitroll.lazy import LazyNames

_NAMES = LazyNames(__name__, {
    "vitroll.io.images": ("IMAGE_SUFFIXES", "encode_png", "load_image"),
    "vitroll.io.writing": ("write_atomic",),
})
__all__ = _NAMES.all
__getattr__ = _NAMES.getattr
__dir__ = _NAMES.dir
