"""What a file holds, told by its first bytes where its name may not say: DICOM Part 10, image formats, a few
other kinds users mistake for them."""

from __future__ import annotations

import os
from typing import NamedTuple, Optional

DICOM_MAGIC_OFFSET = 128
DICOM_MAGIC = b"DICM"


class Signature(NamedTuple):
    """Bytes that start a file of one kind."""

    offset: int
    magic: bytes
    kind: str
    """What the file is, as a user would say it (``JPEG image``, ``PDF document``)."""
    image: bool
    """An image format Pillow reads for vitroll."""


SIGNATURES = (
    Signature(0, b"\x89PNG\r\n\x1a\n", "PNG image", True),
    Signature(0, b"\xff\xd8\xff", "JPEG image", True),
    Signature(0, b"GIF87a", "GIF image", True),
    Signature(0, b"GIF89a", "GIF image", True),
    Signature(0, b"II*\x00", "TIFF image", True),
    Signature(0, b"MM\x00*", "TIFF image", True),
    Signature(8, b"WEBP", "WebP image", True),
    *(Signature(0, b"P" + digit + space, "PPM/PGM image", True) for digit in (b"2", b"3", b"5", b"6")
      for space in (b" ", b"\n", b"\r", b"\t")),
    Signature(0, b"BM", "BMP image", True),
    Signature(0, b"%PDF-", "PDF document", False),
    Signature(0, b"PK\x03\x04", "ZIP archive", False),
    Signature(0, b"\x1f\x8b", "gzip archive", False),
)
"""Checked in order; WebP also needs ``RIFF`` at byte 0, checked beside it."""


def _head(path: "str | os.PathLike[str]", size: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def is_dicom(path: "str | os.PathLike[str]") -> bool:
    """Whether ``path`` is a DICOM Part 10 file: the 4 bytes ``DICM`` after the 128-byte preamble.

    Files without the preamble are not recognised here; :func:`vitroll.io.dicom.read_dicom` still reads them."""
    return _head(path, DICOM_MAGIC_OFFSET + len(DICOM_MAGIC))[DICOM_MAGIC_OFFSET:] == DICOM_MAGIC


HEIF_SUFFIXES = frozenset({".heic", ".heif", ".hif"})
HEIF_BRANDS = frozenset({b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"})
"""The ``ftyp`` brands of HEIF files (HEIC: an iPhone's photos since iOS 11); AVIF's ``avif`` brand, which Pillow
reads, is not among them."""


def is_heif(path: "str | os.PathLike[str]") -> bool:
    """Whether ``path`` is a HEIF/HEIC file: an ISO media ``ftyp`` box of a HEIF brand at byte 4."""
    head = _head(path, 12)
    return head[4:8] == b"ftyp" and head[8:12] in HEIF_BRANDS


def sniff(path: "str | os.PathLike[str]") -> Optional[Signature]:
    """The :data:`SIGNATURES` entry that the first bytes of ``path`` match, whatever its name; None for none (or a
    file that cannot be opened)."""
    head = _head(path, 16)
    for signature in SIGNATURES:
        if head[signature.offset:signature.offset + len(signature.magic)] == signature.magic:
            if signature.kind == "WebP image" and not head.startswith(b"RIFF"):
                continue
            return signature
    return None
