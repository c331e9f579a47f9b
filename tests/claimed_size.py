"""Images whose headers claim a size their few bytes of pixels do not hold: large images to refuse, made cheaply."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def png_claiming_size(path: Path, width: int, height: int) -> Path:
    """Write an 8×8 grey PNG at ``path`` with its IHDR chunk patched to ``width`` × ``height`` (CRC recomputed): Pillow
    opens it at that size and fails only when decoding the missing rows."""
    Image.new("L", (8, 8), 128).save(path)
    data = bytearray(path.read_bytes())
    data[16:24] = struct.pack(">II", width, height)  # after the signature (8), the chunk length (4) and b"IHDR" (4)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))  # over the chunk type and its 13 bytes of data
    path.write_bytes(bytes(data))
    return path


def float_tiff_claiming_size(path: Path, width: int, height: int) -> Path:
    """Write an 8×6 float RGB TIFF (which Pillow cannot read, OpenCV can) at ``path`` with its ImageWidth and
    ImageLength tags patched to ``width`` × ``height`` (each at most 65535: the tags OpenCV writes are SHORT)."""
    import cv2

    assert cv2.imwrite(str(path), np.zeros((6, 8, 3), np.float32))
    data = bytearray(path.read_bytes())
    assert data[:4] == b"II*\0"
    directory = struct.unpack_from("<I", data, 4)[0]
    for entry in range(struct.unpack_from("<H", data, directory)[0]):
        at = directory + 2 + 12 * entry
        tag, kind = struct.unpack_from("<HH", data, at)
        if tag in (256, 257):  # ImageWidth, ImageLength
            struct.pack_into("<H" if kind == 3 else "<I", data, at + 8, width if tag == 256 else height)
    path.write_bytes(bytes(data))
    return path
