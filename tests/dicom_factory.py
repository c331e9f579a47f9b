"""Synthetic DICOM files for tests, written with pydicom (Explicit VR Little Endian unless told otherwise).

Every file carries fake identifiers (:data:`FAKE_IDS`) so that tests can prove none of them reaches a report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping, Optional

import numpy as np

FAKE_IDS = {
    "PatientName": "Zyxwuvt^Qwerpoiu",
    "PatientID": "PID-77331-XQ",
    "InstitutionName": "Grandvale Hospital Trust",
    "AccessionNumber": "ACC99182734",
    "StudyDate": "19870213",
    "PatientBirthDate": "19450708",
    "ReferringPhysicianName": "Doctor^Nebulon",
    "StudyID": "STUDY-4471",
}
STUDY_UID = "1.2.826.0.1.3680043.8.498.99887766554433"
SOP_UID_PREFIX = "1.2.826.0.1.3680043.8.498.1122334455"
PHI_STRINGS = [*FAKE_IDS.values(), STUDY_UID, SOP_UID_PREFIX, "Zyxwuvt", "Qwerpoiu", "Grandvale", "PID-77331"]


def write_dicom(
    path: Path,
    pixels: np.ndarray,
    *,
    photometric: str = "MONOCHROME2",
    signed: bool = False,
    slope: Optional[float] = None,
    intercept: Optional[float] = None,
    window: Optional[tuple[float, float]] = None,
    transfer_syntax: Optional[str] = None,
    pixel_bytes: Optional[bytes] = None,
    with_pixels: bool = True,
    number: int = 1,
    **tags: object,
) -> Path:
    """Write ``pixels`` ((H, W), (F, H, W) multi-frame, or (H, W, 3) colour) as a DICOM file with fake identifiers.

    ``window`` is (width, level) written as WindowWidth/WindowCenter. ``pixel_bytes`` with an encapsulated
    ``transfer_syntax`` writes those bytes as one encapsulated fragment.
    """
    from pydicom.dataset import FileDataset, FileMetaDataset
    from pydicom.encaps import encapsulate
    from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, UID

    pixels = np.asarray(pixels)
    syntax = UID(transfer_syntax or ExplicitVRLittleEndian)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = f"{SOP_UID_PREFIX}.{number}"
    meta.TransferSyntaxUID = syntax
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = SecondaryCaptureImageStorage
    ds.SOPInstanceUID = f"{SOP_UID_PREFIX}.{number}"
    ds.StudyInstanceUID = STUDY_UID
    ds.SeriesInstanceUID = STUDY_UID + ".1"
    for name, value in FAKE_IDS.items():
        setattr(ds, name, value)
    ds.Modality = "CT"
    ds.Manufacturer = "Acme Imaging"
    ds.ManufacturerModelName = "Scanner 3000"
    ds.BodyPartExamined = "CHEST"
    ds.PatientSex = "F"
    ds.PatientAge = "045Y"
    for name, value in tags.items():
        setattr(ds, name, value)
    colour = photometric not in ("MONOCHROME1", "MONOCHROME2")
    frames = pixels.shape[0] if (pixels.ndim == 3 and not colour) or pixels.ndim == 4 else 1
    ds.Rows, ds.Columns = pixels.shape[-3:-1] if colour else pixels.shape[-2:]
    ds.SamplesPerPixel = 3 if colour else 1
    ds.PhotometricInterpretation = photometric
    if colour:
        ds.PlanarConfiguration = 0
    if frames > 1:
        ds.NumberOfFrames = frames
    floating = pixels.dtype.kind == "f"  # float32 pixels go to FloatPixelData (Parametric Map style)
    bits = 32 if floating else 8 if pixels.dtype.itemsize == 1 else 16
    ds.BitsAllocated = bits
    ds.BitsStored = bits
    ds.HighBit = bits - 1
    ds.PixelRepresentation = 1 if signed else 0
    if slope is not None:
        ds.RescaleSlope = slope
        ds.RescaleIntercept = intercept or 0
    if window is not None:
        ds.WindowWidth, ds.WindowCenter = window
    if with_pixels:
        if pixel_bytes is not None:
            ds.PixelData = encapsulate([pixel_bytes])
            ds["PixelData"].VR = "OB"
        elif floating:
            ds.FloatPixelData = pixels.astype("<f4").tobytes()
        else:
            ds.PixelData = pixels.astype(pixels.dtype.newbyteorder("<")).tobytes()
            ds["PixelData"].VR = "OB" if bits == 8 else "OW"
    ds.save_as(path, enforce_file_format=True)
    return path


def body_phantom(size: int = 64, *, marker: bool = True, dtype=np.uint16, low: int = 0, high: int = 1000) -> np.ndarray:
    """A bright disc (the "body") on a dark background, with an optional small bright square marker in the top-left
    corner."""
    yy, xx = np.mgrid[:size, :size]
    inside = (yy - size / 2) ** 2 + (xx - size / 2) ** 2 < (0.3 * size) ** 2
    image = np.where(inside, (low + high) // 2, low).astype(dtype)
    if marker:
        image[2:6, 2:8] = high
    return image


def write_dual_personality_tiff(path: Path, pixels: np.ndarray, **tags: object) -> Path:
    """Write 8-bit grey ``pixels`` (H, W) as a DICOM file (:func:`write_dicom`) whose 128-byte preamble is a TIFF
    header pointing at its PixelData, so that TIFF readers (Pillow) decode the same pixels (DICOM PS3.10 7.5)."""
    import struct

    pixels = np.asarray(pixels, dtype=np.uint8)
    write_dicom(path, pixels, **tags)
    data = bytearray(path.read_bytes())
    rows, columns = pixels.shape
    pixel_offset = len(data) - pixels.size  # PixelData, an even number of bytes here, is the last element
    # (tag, type SHORT=3 / LONG=4, count, value): width, length, 8 bits, no compression, min-is-black, strip
    entries = [(256, 3, 1, columns), (257, 3, 1, rows), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
               (273, 4, 1, pixel_offset), (278, 3, 1, rows), (279, 4, 1, pixels.size)]
    directory = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *entry) for entry in entries)
    data[:128] = (b"II*\x00" + struct.pack("<I", 8) + directory + bytes(4)).ljust(128, b"\x00")
    path.write_bytes(bytes(data))
    return path


def patched_testdata(path: Path, name: str, count: int,
                                 patches: Mapping[int, Callable[[bytearray], bytes]]) -> Path:
    """pydicom's compressed test file ``name`` written to ``path`` with each frame ``index`` of its ``count`` replaced
    by ``patches[index](frame bytes)``."""
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.encaps import encapsulate, generate_frames

    dataset = pydicom.dcmread(get_testdata_file(name))
    frames = list(generate_frames(dataset.PixelData, number_of_frames=count))
    for index, patch in patches.items():
        frames[index] = patch(bytearray(frames[index]))
    dataset.PixelData = encapsulate(frames)
    dataset.save_as(path)
    return path


def rle_segments(frame: bytearray, segments: int) -> bytes:
    """An RLE ``frame`` whose header states ``segments`` segments."""
    frame[:4] = segments.to_bytes(4, "little")
    return bytes(frame)
