"""What the RLE codestream check costs beside the decode it guards: a cine's frames read by ``read_dicom``.

    python scripts/bench_rle_check.py                 # a 512×512 16-bit CT-like cine of 20 frames
    python scripts/bench_rle_check.py --frames 50 --size 1024 --rounds 5

Before reading each RLE frame shown, :func:`~vitroll.io.dicom.read_dicom` compares the length its first segment
decodes to with Rows × Columns. Timed side by side in one process: that length as pydicom's pure-Python decoder gives
it (the segment decoded, as before) and as :func:`~vitroll.io.dicom.reading.rle_segment_length` counts it, for one
segment and for a whole ``read_dicom`` of the cine with each. The fastest of ``--rounds`` runs counts.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Callable
from unittest import mock

import numpy as np


def ct_like_cine(path: Path, size: int, frames: int) -> bytes:
    """Write an RLE cine of ``frames`` noisy ``size``² 16-bit CT-like frames (pydicom's CT_small, enlarged) at
    ``path``; its first frame's first segment."""
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.encaps import generate_frames
    from pydicom.pixels.decoders.rle import _rle_parse_header
    from pydicom.uid import RLELossless

    dataset = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    scale = -(-size // dataset.Rows)
    base = np.kron(dataset.pixel_array, np.ones((scale, scale), dataset.pixel_array.dtype))[:size, :size]
    noise = np.random.default_rng(0).integers(0, 4, (frames, size, size))
    cine = (base[None] + noise).astype(base.dtype)
    dataset.Rows = dataset.Columns = size
    dataset.NumberOfFrames = frames
    dataset.PixelData = cine.tobytes()
    dataset.compress(RLELossless, encoding_plugin="pydicom")
    dataset.save_as(path)
    frame = next(generate_frames(dataset.PixelData, number_of_frames=frames))
    offsets = _rle_parse_header(frame[:64]) + [len(frame)]
    return frame[offsets[0]:offsets[1]]


def fastest(call: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    from pydicom.pixels.decoders.rle import _rle_decode_segment

    from vitroll.io.dicom import read_dicom
    from vitroll.io.dicom.reading import rle_segment_length

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cine.dcm"
        segment = ct_like_cine(path, args.size, args.frames)
        assert rle_segment_length(segment) == len(_rle_decode_segment(segment)) == args.size ** 2
        decoded = fastest(lambda: _rle_decode_segment(segment), args.rounds * 10)
        counted = fastest(lambda: rle_segment_length(segment), args.rounds * 10)
        print(f"first segment ({len(segment)} bytes → {args.size ** 2}): decoded {decoded * 1e3:.2f} ms, "
              f"counted {counted * 1e3:.2f} ms")
        by_decoding = mock.patch("vitroll.io.dicom.reading.rle_segment_length",
                                 lambda segment: len(_rle_decode_segment(segment)))
        with by_decoding:
            before = fastest(lambda: read_dicom(path), args.rounds)
        after = fastest(lambda: read_dicom(path), args.rounds)
        unchecked = mock.patch("vitroll.io.dicom.reading._compressed_problem", lambda *args, **kwargs: None)
        with unchecked:
            bare = fastest(lambda: read_dicom(path), args.rounds)
        per_frame = 1e3 / args.frames
        print(f"read_dicom of {args.frames} frames {args.size}×{args.size}, per frame: segment decoded "
              f"{before * per_frame:.2f} ms, counted {after * per_frame:.2f} ms, no codestream check "
              f"{bare * per_frame:.2f} ms")


if __name__ == "__main__":
    main()
