"""What a file holds, told by its first bytes where its name may not say: DICOM Part 10."""

from __future__ import annotations

import os

DICOM_MAGIC_OFFSET = 128
DICOM_MAGIC = b"DICM"


def is_dicom(path: "str | os.PathLike[str]") -> bool:
    """Whether ``path`` is a DICOM Part 10 file: the 4 bytes ``DICM`` after the 128-byte preamble.

    Files without the preamble are not recognised here; :func:`vitroll.io.dicom.read_dicom` still reads them."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(DICOM_MAGIC_OFFSET + len(DICOM_MAGIC))
    except OSError:
        return False
    return head[DICOM_MAGIC_OFFSET:] == DICOM_MAGIC
