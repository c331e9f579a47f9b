"""A PNG whose header claims a size its few bytes of pixels do not hold: a large image to refuse, made cheaply."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

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
