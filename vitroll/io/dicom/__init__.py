"""DICOM (and 16-bit PNG/TIFF) decoding for audits: display-ready 8-bit RGB frames and PHI-free metadata.

A DICOM file is recognised by ``DICM`` at byte 128 (any extension, ``.dcm`` or none); a file without that
preamble (an old ACR-NEMA style data set) is read when its first element belongs to group 0002 or 0008, and its
transfer syntax is then the encoding pydicom found. Compressed pixel data goes through pydicom's decoder plugins
(pylibjpeg with openjpeg and rle, python-gdcm, Pillow: the ``dicom`` extra). Grey images go
through the modality LUT (Rescale Slope/Intercept; an enhanced multi-frame file's, and its windows, from its
functional groups), then a VOI transform — the user's window, else the file's
VOI LUT or a usable Window Center/Width, else the frame's own finite min–max — and MONOCHROME1 is inverted so that high
values are bright; pixels that Pixel Padding Value marks as no image are left out of the min–max and shown black.
Colour images (RGB, YBR_*, PALETTE COLOR) become RGB. Every frame is returned as (H, W, 3) uint8.

Only a whitelist of non-identifying header fields leaves this package (:data:`SAFE_FIELDS`, plus an age band);
studies are keyed by a salted hash.

Three modules, one job each: :mod:`~vitroll.io.dicom.deidentify` (which header values may be shown),
:mod:`~vitroll.io.dicom.display` (pixel values to display RGB) and :mod:`~vitroll.io.dicom.reading` (reading and
decoding files, with the reasons for what cannot be read); their public names, and the windows' presets and parsing
(:mod:`vitroll.io.windows`), are imported from here.

Windows are written **width first, then level**: ``(W, L)``, on the command line ``--window W,L``.
"""

from vitroll.io.dicom.deidentify import SAFE_FIELDS, UNKNOWN, WITHHELD, age_band, safe_metadata, salted_key
from vitroll.io.dicom.display import window_to_unit
from vitroll.io.dicom.reading import (
    INSTALL_HINT, NOT_DICOM_OR_IMAGE, DicomImage, decode_failure, decoder_advice, frame_count,
    header_frames, is_dicom, is_secondary_capture, read_any, read_dicom, recognizable_withheld,
)
from vitroll.io.windows import WINDOW_PRESETS, parse_window

__all__ = [
    "DicomImage", "INSTALL_HINT", "NOT_DICOM_OR_IMAGE", "SAFE_FIELDS", "UNKNOWN", "WINDOW_PRESETS", "WITHHELD",
    "age_band", "decode_failure", "decoder_advice", "frame_count", "header_frames", "is_dicom", "is_secondary_capture",
    "parse_window", "read_any", "read_dicom", "recognizable_withheld", "safe_metadata", "salted_key", "window_to_unit",
]
