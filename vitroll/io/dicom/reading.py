"""Reading and decoding DICOM files (and images told by their first bytes) into display-ready frames, with reasons
in one sentence for what cannot be read: which decoder would read a transfer syntax, headers that do not fit their
pixel data, files cut short."""

from __future__ import annotations

import contextlib
import io
import os
import re
import struct
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Iterator, Optional, Sequence

import numpy as np

from vitroll.errors import ImageReadError, RecognizableFeaturesError
from vitroll.io.dicom.deidentify import safe_metadata
from vitroll.io.dicom.display import _colour_header_problem, _colour_to_rgb, _frame_view, _grey_to_rgb, _samples_problem
from vitroll.io.formats import is_dicom, sniff
from vitroll.io.images import (DEFAULT_MAX_PIXELS, IMAGE_SUFFIXES, cannot_open, check_size, load_image_with_profile,
                               megapixels)
from vitroll.wording import argument, counted

if TYPE_CHECKING:
    from PIL import Image
    from pydicom import Dataset

SECONDARY_CAPTURE_CLASS_PREFIX = "1.2.840.10008.5.1.4.1.1.7"
"""SOP classes of secondary captures (screenshots, scanned film, multi-frame SC): text often burned in."""


@dataclass
class DicomImage:
    """Decoded frames of one file with its safe metadata."""

    frames: list[tuple[int, np.ndarray]]
    """(frame index, RGB uint8 (H, W, 3)) for each frame returned."""
    metadata: dict[str, str] = field(default_factory=dict)
    """:data:`~vitroll.io.dicom.deidentify.SAFE_FIELDS` plus ``age-band`` (``unknown`` where absent)."""
    study_uid: Optional[str] = None
    """StudyInstanceUID — an identifier: hash it, print it only with the user's consent."""
    identifiers: dict[str, str] = field(default_factory=dict)
    """PatientID, StudyInstanceUID, SOPInstanceUID (for ``--keep-ids`` only)."""
    dicom: bool = True
    """Read as DICOM (frames numbered); False for PNG/TIFF/… images."""
    colour: bool = False
    """A colour image: a colour PhotometricInterpretation, or (for other images) channels that differ."""
    secondary_capture: bool = False
    """The header marks a secondary capture (:func:`is_secondary_capture`)."""
    frame_count: int = 1
    """Frames in the file, whether or not all were decoded."""
    icc_profile: Optional[bytes] = None
    """The ICC profile (0028,2000) of a colour image's pixels: the data set's, or its first optical path's (whole-slide
    microscopy); for another image, the profile it embeds (:func:`~vitroll.io.images.load_image_with_profile`).
    :func:`~vitroll.io.images.srgb_display` shows the pixels in sRGB with it."""
    profiled: Optional[Image.Image] = None
    """The pixels ``icc_profile`` describes where they are not the frame's RGB values: a CMYK photo's inks."""


def is_secondary_capture(dataset: object) -> bool:
    """A Secondary Capture SOP class (``1.2.840.10008.5.1.4.1.1.7…``) or a ConversionType: a captured image."""
    sop_class = str(getattr(dataset, "SOPClassUID", "") or "")
    return sop_class.startswith(SECONDARY_CAPTURE_CLASS_PREFIX) or bool(getattr(dataset, "ConversionType", None))


def _error_text(error: BaseException) -> str:
    """The whole message of ``error`` on one line (pydicom's per-plugin lines joined by ``; ``), else its type.

    Memory addresses in object reprs (``<_io.BytesIO object at 0x7f…>``) are dropped: they differ per process.
    """
    text = re.sub(r" at 0x[0-9A-Fa-f]+", "", str(error))
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return " ".join(lines[:1] + ["; ".join(lines[1:])]).strip() if lines[0].endswith(":") else " ".join(lines)


def recognizable_withheld(allowed_by: str = "allow_recognizable") -> str:
    """Why a file whose header says RecognizableVisualFeatures YES is refused, naming what would read it in the
    caller's words: ``--allow-recognizable-features`` on the command line, the argument ``allowed_by`` from Python
    (:func:`read_dicom`'s ``allow_recognizable``, the audit's ``allow_recognizable_features``)."""
    return ("Withheld: its header says RecognizableVisualFeatures YES (a face photograph or a 3D surface rendering, "
            "whose pixels can identify the patient), so it is neither explained nor drawn; "
            f"{argument(allowed_by, True)} audits it.")


PREAMBLE_LESS_GROUPS = (0x0002, 0x0008)
"""First element groups that make a file without the ``DICM`` preamble a DICOM data set (file meta, identification)."""

NOT_DICOM_OR_IMAGE = ("This file is neither DICOM (no 'DICM' marker after a 128-byte preamble, and no DICOM data set "
                      "at its start) nor, by its first bytes, an image format vitroll reads (PNG, JPEG, TIFF, BMP, "
                      "GIF, WebP, PPM/PGM).")


PIXEL_DATA_DEFERRED = "256 KB"
"""Elements larger than this are left in a Part 10 file until used: its frames are read one at a time from the file."""


def _read_dataset(path: Path) -> tuple["Dataset", bool]:
    """The pydicom dataset of ``path`` and whether it is a Part 10 file (its large elements, the pixel data, left in
    the file: :data:`PIXEL_DATA_DEFERRED`); else a preamble-less data set read whole (its encoding kept as its
    transfer syntax so that native pixel data decodes)."""
    import pydicom
    from pydicom.errors import InvalidDicomError
    from pydicom.uid import ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian

    try:
        return pydicom.dcmread(path, defer_size=PIXEL_DATA_DEFERRED), True
    except InvalidDicomError:
        pass
    dataset = pydicom.dcmread(path, force=True)
    first = next(iter(dataset), None)
    if first is None or first.tag.group not in PREAMBLE_LESS_GROUPS:
        raise ImageReadError(path, NOT_DICOM_OR_IMAGE)
    if "TransferSyntaxUID" not in dataset.file_meta:
        implicit, little = dataset.original_encoding
        dataset.file_meta.TransferSyntaxUID = (
            ImplicitVRLittleEndian if implicit else ExplicitVRLittleEndian if little else ExplicitVRBigEndian)
    return dataset, False


PIXEL_DATA_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")
"""The elements that hold an image's pixels (integer, float and double pixel data)."""


def _pixel_data_length_problem(path: Path, dataset: "Dataset", count: int, *, from_file: bool) -> Optional[str]:
    """Why the native pixel data of ``dataset`` cannot be the ``count`` frames its header describes, a sentence; None
    when its length fits them (or its pixel data is compressed, or the header lacks what the length follows from: the
    decoder then names it).

    pydicom reads a frame from the first bytes of whatever length the pixel data has, so a header that says 1 sample
    per pixel over RGB bytes, too few rows or columns, 8 bits for 16 or fewer frames than there are showed a wrong
    image as if it were right. One padding byte after an odd length is allowed (PS3.5 8.1.1), and so are further
    trailing zero bytes, which pydicom drops as excess padding (its MR_small_padded.dcm); other bytes beyond the
    frames are image data the header does not account for. ``from_file``: a deferred value is read from ``path``
    (a Part 10 file that is not deflated)."""
    from pydicom.dataelem import RawDataElement
    from pydicom.datadict import tag_for_keyword
    from pydicom.pixels.utils import get_expected_length

    syntax = dataset.file_meta.get("TransferSyntaxUID")
    if syntax is None or syntax.is_encapsulated:
        return None
    tag = tag_for_keyword(next(keyword for keyword in PIXEL_DATA_KEYWORDS if keyword in dataset))
    element = dataset.get_item(tag, keep_deferred=True)
    raw = isinstance(element, RawDataElement)
    if raw and element.length == UNDEFINED_LENGTH or not raw and element.is_undefined_length:
        return None  # fragments under a native transfer syntax: the decoder tells
    length = element.length if raw else len(element.value or b"")
    try:
        expected = get_expected_length(dataset, unit="bytes")
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    padded = expected + expected % 2
    if length in (expected, padded) or length > padded and _zeros_from(path, dataset, tag, padded, from_file=from_file):
        return None
    frame = expected // count
    ratio = ("" if not (expected and length) else f" ({length // expected} times that)" if length % expected == 0
             else f" ({counted(length // frame, 'frame')} of the {count} its header counts)"
             if count > 1 and expected % count == 0 and length % frame == 0
             else f" (1/{expected // length} of that)" if expected % length == 0 else "")
    subsampled = ", PhotometricInterpretation YBR_FULL_422" if "YBR_FULL_422" in str(
        dataset.get("PhotometricInterpretation", "")) else ""  # two samples per pixel, not three
    return (f"This DICOM file's header does not fit its pixel data: Rows {dataset.Rows}, Columns {dataset.Columns}, "
            f"SamplesPerPixel {dataset.get('SamplesPerPixel', 1)}{subsampled} and BitsAllocated "
            f"{dataset.BitsAllocated} over {counted(count, 'frame')} make {expected} bytes, but its pixel data holds "
            f"{length}{ratio}, so the image would be drawn wrong and is not shown.")


@contextlib.contextmanager
def _encapsulated_pixel_data(path: Path, dataset: "Dataset", *, from_file: bool) -> Iterator[BinaryIO]:
    """The encapsulated pixel data of ``dataset`` as a buffer positioned at its Basic Offset Table item: the file from
    where the value starts when it is still there (:data:`PIXEL_DATA_DEFERRED`), else the value read."""
    from pydicom.dataelem import RawDataElement
    from pydicom.datadict import tag_for_keyword

    element = dataset.get_item(tag_for_keyword("PixelData"), keep_deferred=True)
    if from_file and isinstance(element, RawDataElement) and element.value is None:
        with open(path, "rb") as file:
            file.seek(element.value_tell)
            yield file
        return
    yield io.BytesIO(element.value if isinstance(element, RawDataElement) else dataset.PixelData)


CODESTREAM_PEEK = 4096
"""Bytes read from a JPEG or JPEG 2000 frame's first fragment to find its SOF or SIZ marker (within its first hundreds
of bytes); an RLE frame, one fragment by the standard, is read whole to count its first segment's decoded length."""


def _fragment(buffer: BinaryIO, position: int, size: Optional[int] = None) -> bytes:
    """The fragment whose item tag is at ``position`` (its first ``size`` bytes)."""
    buffer.seek(position + 4)
    length = int.from_bytes(buffer.read(4), "little")
    return buffer.read(length if size is None else min(length, size))


def _fragment_tail(buffer: BinaryIO, position: int) -> bytes:
    """The last bytes of the fragment whose item tag is at ``position`` without the padding after a codestream's end
    marker: zero bytes (to an even length) and 0xFF fill bytes (JPGExtended.dcm's frame ends ``FF D9 FF``)."""
    buffer.seek(position + 4)
    length = int.from_bytes(buffer.read(4), "little")
    buffer.seek(position + 8 + max(0, length - 64))
    return buffer.read(min(length, 64)).rstrip(b"\0\xff")


JPEG_END = b"\xff\xd9"
"""The marker that ends a JPEG or JPEG-LS codestream (EOI)."""


def _codestream_kind(start: bytes) -> Optional[str]:
    """The kind of codestream a fragment beginning with ``start`` (64 bytes) begins; None: it continues a frame."""
    if start.startswith(b"\xff\xd8\xff"):
        return "JPEG-LS" if start[3:4] == b"\xf7" else "JPEG"
    if start.startswith((J2K_START, b"\x00\x00\x00\x0cjP  ")):
        return "JPEG 2000"
    if len(start) == 64 and 1 <= int.from_bytes(start[:4], "little") <= 15 and start[4:8] == (64).to_bytes(4, "little"):
        return "RLE"
    return None


MOST_ROWS = 2**16 - 1
"""The most Rows or Columns a DICOM header can state (US values)."""


J2K_START = b"\xff\x4f\xff\x51"
"""A JPEG 2000 codestream's SOC marker and the SIZ marker that must follow it."""


def _stated_size(kind: str, codestream: bytes) -> Optional[tuple[int, int, int, int]]:
    """(rows, columns, components, bits of a sample) a JPEG's or JPEG-LS's SOF or a JPEG 2000's SIZ marker states (of
    its first component); None if not found."""
    from pydicom.pixels.utils import _get_jpg_parameters

    if kind != "JPEG 2000":
        stated = _get_jpg_parameters(codestream)
        return ((stated["height"], stated["width"], stated["components"], stated["precision"])
                if "components" in stated else None)
    siz = codestream.find(J2K_START) + 4
    if siz < 4 or len(codestream) < siz + 39:
        return None
    x, y, x_origin, y_origin = struct.unpack(">4L", codestream[siz + 4:siz + 20])
    components, sample = int.from_bytes(codestream[siz + 36:siz + 38], "big"), codestream[siz + 38]
    return y - y_origin, x - x_origin, components, sample % 128 + 1  # Ssiz: the sign bit, then bits less 1


def _compressed_problem(path: Path, dataset: "Dataset", count: int, indices: list[int], *,
                        from_file: bool) -> Optional[str]:
    """Why the compressed pixel data of ``dataset`` cannot be the ``count`` frames its header describes, or its frames
    ``indices`` cannot be shown whole, a sentence; None when what it states of itself fits the header and the frames
    end whole (or that cannot be told: the decoder then words any damage).

    A decoder takes the header's Rows, Columns, SamplesPerPixel and NumberOfFrames as given: a header with too few
    rows showed the top of an RLE image as the whole, one with too few frames left the others out without a word, one
    with 1 sample per pixel drew a colour JPEG grey. Compared: the frames the offset tables list (or the fragments
    that begin a codestream); the rows, columns and components a JPEG, JPEG-LS or JPEG 2000 frame states; an RLE
    frame's segments (one per sample and byte of a sample) and the bytes its first decodes to (rows × columns). Each
    frame decoded is compared, and the first: a later frame of another size failed in the decoder's words.

    A JPEG or JPEG-LS frame whose codestream does not end with its EOI marker is cut short: GDCM read on past the end
    of such a frame into whatever memory followed and, where an earlier frame's EOI lay there, showed it as whole, so
    whether it was refused depended on what had been decoded before."""
    from pydicom.encaps import parse_basic_offsets, parse_fragments

    syntax = dataset.file_meta.get("TransferSyntaxUID")
    if syntax is None or not syntax.is_encapsulated or not all(
            keyword in dataset for keyword in ("PixelData", "Rows", "Columns", "BitsAllocated")):
        return None  # what the header lacks, the decoder names
    try:
        with _encapsulated_pixel_data(path, dataset, from_file=from_file) as buffer:
            offsets = parse_basic_offsets(buffer)
            _, positions = parse_fragments(buffer)
            starts = [_codestream_kind(_fragment(buffer, position, 64)) for position in positions]
            kind = starts[0] if starts else None
            begins = [number for number, start in enumerate(starts) if start is not None]
            # each frame shown is checked, and the first: where codestreams and frames cannot be paired, it alone
            checked = sorted({0, *indices}) if len(begins) == count else [0]
            heads = {index: _fragment(buffer, positions[begins[index]], None if kind == "RLE" else CODESTREAM_PEEK)
                     for index in checked} if kind else {}
            ends = [_fragment_tail(buffer, positions[end - 1]) for end in begins[1:] + [len(positions)]]
    except (ValueError, OSError, EOFError, struct.error):
        return None  # damaged encapsulation: the decoder words it
    if kind is None:
        return None
    header = "This DICOM file's header does not fit its pixel data: "
    if "ExtendedOffsetTable" in dataset or offsets:
        table = "Extended" if "ExtendedOffsetTable" in dataset else "Basic"
        held = len(dataset.ExtendedOffsetTable) // 8 if table == "Extended" else len(offsets)
        holding = f"its {table} Offset Table lists {counted(held, 'frame')}"
    else:
        held = sum(start is not None for start in starts)
        holding = f"its fragments begin {counted(held, 'frame')}"
    if held != count:
        consequence = ("frames would be left out without a word" if held > count
                       else "frames it is said to have are missing")
        return f"{header}NumberOfFrames is {count}, but {holding}, so {consequence}; it is not shown."
    for index, head in heads.items():
        stated = _stated_unlike_header(kind, head, dataset, f"frame {index}'s" if count > 1 else "its")
        if stated is not None:
            return (f"{header}Rows {dataset.Rows}, Columns {dataset.Columns}, SamplesPerPixel "
                    f"{dataset.get('SamplesPerPixel', 1)} and BitsAllocated {dataset.BitsAllocated}, but {stated}, so "
                    "the image would be drawn wrong and is not shown.")
    unended = [index for index in indices if not ends[index].endswith(JPEG_END)]
    if kind not in ("JPEG", "JPEG-LS") or len(ends) != count or not unended:
        return None
    which = f"frame {unended[0]}'s" if count > 1 else "its"
    return (f"The compressed pixel data cannot be decoded: {which} {kind} codestream ends without its end-of-image "
            "marker, so it is cut short; the image would be incomplete and is not shown.")


def _stated_unlike_header(kind: str, head: bytes, dataset: "Dataset", whose: str) -> Optional[str]:
    """What a frame whose codestream begins ``head`` (a ``kind`` codestream's first bytes, all of an RLE frame) states
    of itself that the header of ``dataset`` does not give, a clause naming the frame as ``whose`` (``frame 3's``);
    None when they agree or it cannot be told."""
    from pydicom.pixels.decoders.rle import _rle_parse_header

    rows, columns = dataset.Rows, dataset.Columns
    samples, bits = int(dataset.get("SamplesPerPixel", 1) or 1), int(dataset.BitsAllocated)
    if kind != "RLE":
        size = _stated_size(kind, head)
        # a JPEG's height may be 0 in its SOF, stated later; more bits than BitsAllocated would be cut to it; a size
        # no DICOM frame has is a damaged codestream, which the decoder words
        fits = size is not None and size[:3] in ((rows, columns, samples), (0, columns, samples)) and size[3] <= bits
        if size is None or fits or max(size[:2]) > MOST_ROWS:
            return None
        return (f"{whose} {kind} codestream is {size[0]} rows by {size[1]} columns with "
                f"{counted(size[2], 'component')} of {size[3]} bits")
    segment_offsets = _rle_parse_header(head[:64]) + [len(head)]
    if max(segment_offsets) > len(head):  # a frame cut short: the decoder words it
        return None
    decoded = rle_segment_length(head[segment_offsets[0]:segment_offsets[1]])
    segments = len(segment_offsets) - 1
    if segments == samples * -(-bits // 8) and decoded in (rows * columns, rows * columns + 1):
        return None
    return (f"{whose} RLE data has {counted(segments, 'segment')} (one per sample and byte of a sample), the first "
            f"decoding to {decoded} bytes (Rows × Columns)")

def rle_segment_length(segment: bytes) -> int:
    """The number of bytes the RLE ``segment`` decodes to, counted from its run headers without building them: the
    length pydicom's decoder (``_rle_decode_segment``) gives, in half its time (``scripts/bench_rle_check.py``).

    A header byte n < 128 copies the n + 1 bytes after it, n > 128 repeats the next byte 257 − n times, 128 is a
    no-op (PS3.5 G.3.1). A last run cut short by the segment's end gives what pydicom's gives: the bytes there are
    of a copy, nothing of a repeat without its byte."""
    length = position = last = 0
    end = len(segment)
    while position < end:
        last, header = position, segment[position]
        if header < 128:
            length += header + 1
            position += header + 2
        elif header > 128:
            length += 257 - header
            position += 2
        else:
            position += 1
    if position > end:
        header = segment[last]
        length -= header + 1 - (end - last - 1) if header < 128 else 257 - header
    return length


UNDEFINED_LENGTH = 0xFFFFFFFF
"""The length of an element whose end is marked by a delimiter (encapsulated pixel data, sequences)."""


def _zeros_from(path: Path, dataset: "Dataset", tag: int, start: int, *, from_file: bool) -> bool:
    """Whether the value of element ``tag`` holds only zero bytes from byte ``start`` on: its raw bytes where they were
    read, else read from ``path`` a part at a time when ``from_file`` (:data:`PIXEL_DATA_DEFERRED`), else (deflated)
    the converted value."""
    from pydicom.dataelem import RawDataElement

    element = dataset.get_item(tag, keep_deferred=True)
    if not (from_file and isinstance(element, RawDataElement) and element.value is None):
        tail = (element.value if isinstance(element, RawDataElement) and element.value is not None
                else dataset[tag].value)[start:]
        return tail.count(0) == len(tail)
    left = element.length - start
    with open(path, "rb") as file:
        file.seek(element.value_tell + start)
        while left > 0:
            part = file.read(min(left, 2**20))
            if not part or part.count(0) != len(part):  # a file cut short is not judged zero
                return False
            left -= len(part)
    return True


def _empty(dataset: "Dataset", keyword: str) -> bool:
    """Whether element ``keyword`` of ``dataset`` has no value (read or still in the file, :data:`PIXEL_DATA_DEFERRED`),
    as a de-identifier that blanks pixel data leaves it."""
    from pydicom.dataelem import RawDataElement
    from pydicom.datadict import tag_for_keyword

    element = dataset.get_item(tag_for_keyword(keyword), keep_deferred=True)
    return element.length == 0 if isinstance(element, RawDataElement) else not element.value


EARLY_END = "End of file reached before delimiter"
"""How pydicom's warning begins when a file ends inside an element of undefined length (a sequence, encapsulated pixel
data): it then drops the elements read."""


FILE_META_START = 128 + 4 + 12
"""Where the file meta elements after (0002,0000) FileMetaInformationGroupLength begin: preamble, ``DICM``, itself."""


def _cut_short(path: Path, dataset: "Dataset") -> bool:
    """Whether the file ends inside an element of defined length: pydicom stops reading a truncated file without a
    word (:data:`EARLY_END` is its word for the others). Told by its last element, read but not yet converted, whose
    value should end where the file ends (a deflated data set, or a last element of undefined length, is not
    judged)."""
    from pydicom.dataelem import RawDataElement

    if not len(dataset):  # it ends inside its file meta information (or right after it, which no writer does)
        try:
            meta_length = int(dataset.file_meta.FileMetaInformationGroupLength)
        except (AttributeError, TypeError, ValueError):  # absent, or cut inside its own value (b'' reads as '')
            return True
        return path.stat().st_size < FILE_META_START + meta_length
    syntax = dataset.file_meta.get("TransferSyntaxUID")
    if syntax is not None and syntax.is_deflated:
        return False
    last = dataset.get_item(max(dataset.keys()), keep_deferred=True)
    if not isinstance(last, RawDataElement) or last.length == UNDEFINED_LENGTH:
        return False
    return last.value_tell + last.length != path.stat().st_size


def _ends_in_a_header(path: Path, error: BaseException) -> bool:
    """Whether pydicom's ``error`` reading the DICOM file ``path`` (``DICM`` at byte 128) came from its end: inside
    an element's tag, VR or length, which pydicom unpacks from fewer bytes than it needs (a :class:`struct.error`;
    in a sequence, an :class:`OSError` without errno, "No tag to read"), or inside (0002,0000)
    FileMetaInformationGroupLength, whose value it then cannot convert."""
    if not is_dicom(path):
        return False
    return isinstance(error, (struct.error, OSError)) or path.stat().st_size < FILE_META_START


MEDIA_STORAGE_DIRECTORY = "1.2.840.10008.1.3.10"
"""The SOP class of a DICOMDIR."""

DICOMDIR_HAS_NO_IMAGE = ("This file is the directory of a DICOM medium (Media Storage Directory Storage), which holds "
                         "no image itself; give the folder that holds it to audit the image files it lists.")
"""A DICOMDIR's reason; it does not say DICOMDIR, which is also the file's name, and reasons quote no file names."""


def _sop_class(dataset: "Dataset") -> object:
    return dataset.get("SOPClassUID") or getattr(dataset, "file_meta", {}).get("MediaStorageSOPClassUID")


def _sop_class_name(dataset: "Dataset") -> str:
    """The SOP class's name; a value that names none (cut short, a private class, anything typed there) is not quoted:
    reasons quote no header value."""
    from pydicom.uid import UID_dictionary

    uid = _sop_class(dataset)
    if not uid:
        return "SOP class not stated"
    return UID_dictionary[uid][0] if uid in UID_dictionary else "a SOP class that pydicom does not know"


UNBUNDLED_DECODERS = {"pylibjpeg-libjpeg": "GPL-3.0"}
"""Decoder packages the ``dicom`` extra leaves out, with the licence that keeps them out."""

INSTALL_HINT = 'pip install "vitroll[dicom]"'
"""The command that installs what reading DICOM needs: pydicom, its decoder plugins and the text detector."""

BUNDLED_DECODERS = frozenset({"pylibjpeg", "pylibjpeg-openjpeg", "pylibjpeg-rle", "python-gdcm", "numpy"})
"""The packages of pydicom's decoder plugins that :data:`INSTALL_HINT` installs (numpy is vitroll's own)."""

PYPI_NAMES = {"gdcm": "python-gdcm"}
"""Packages that pydicom names by their import name, by their name on PyPI: ``pip install gdcm`` installs nothing
that pydicom uses."""


def _package(requirement: str) -> str:
    """``python-gdcm>=3.0.10`` → ``python-gdcm``."""
    return re.split(r"[<>=!~ ]", requirement, maxsplit=1)[0]


def _requirements(text: str) -> list[str]:
    """pydicom's ``"gdcm>=3.0.10 and numpy"`` as requirements pip understands: ``["python-gdcm>=3.0.10", "numpy"]``."""
    needs = [need.strip() for need in text.split(" and ") if need.strip()]
    return [PYPI_NAMES.get(_package(need), _package(need)) + need[len(_package(need)):] for need in needs]


def _decoder(uid: object) -> Optional[object]:
    """pydicom's decoder for transfer syntax ``uid``, None where it has none."""
    from pydicom.pixels import get_decoder

    try:
        return get_decoder(uid)
    except NotImplementedError:
        return None


Plugins = list[tuple[str, list[str]]]
"""pydicom decoder plugins by name, each with the requirements (pip's spelling) it lacks."""


def _missing_plugins(decoder: object) -> tuple[Plugins, Plugins]:
    """The plugins of a pydicom ``decoder`` whose packages are missing: those :data:`INSTALL_HINT` installs, then the
    others."""
    wanted = [(plugin, _requirements(need)) for plugin, _, need in
              (entry.partition(" - requires ") for entry in decoder.missing_dependencies)]
    bundled = [(plugin, needs) for plugin, needs in wanted
               if needs and all(_package(need) in BUNDLED_DECODERS for need in needs)]
    return bundled, [(plugin, needs) for plugin, needs in wanted if (plugin, needs) not in bundled]


def _install_advice(decoder: object) -> str:
    """Which command installs a decoder that pydicom's ``decoder`` lacks every plugin of (a clause):
    :data:`INSTALL_HINT` where it installs one, else the packages of another plugin and the licence that keeps them out
    of vitroll."""
    bundled, others = _missing_plugins(decoder)
    if bundled:
        packages = sorted({_package(need) for _, needs in bundled for need in needs} - {"numpy"})
        return f"{INSTALL_HINT} installs one ({', '.join(packages)})"
    packages = [_package(need) for need in (others[0][1] if others else [])]
    if not packages:
        return "no package is known that adds one"
    return f"pip install {' '.join(packages)} installs one" + _licence_notes(packages)


def _licence_notes(packages: Sequence[str]) -> str:
    """`` (P is LICENCE, so vitroll does not install it)`` for each of ``packages`` in :data:`UNBUNDLED_DECODERS`."""
    return "".join(f" ({package} is {licence}, so vitroll does not install it)"
                   for package, licence in UNBUNDLED_DECODERS.items() if package in packages)


def decoder_advice(uid: object) -> str:
    """Which packages would add a pydicom decoder for transfer syntax ``uid`` (a sentence fragment): the plugins that
    :data:`INSTALL_HINT` would add first, then those it leaves out."""
    return _decoder_advice(_decoder(uid))


def _decoder_advice(decoder: Optional[object]) -> str:
    """:func:`decoder_advice` for pydicom's ``decoder`` of a transfer syntax (None: it has none)."""
    if decoder is None:
        return "pydicom has no decoder for this transfer syntax"
    bundled, others = _missing_plugins(decoder)
    if not bundled and not others:
        return "every pydicom decoder for it is installed, so the pixel data itself is damaged or unusual"
    advice = []
    if bundled:
        advice.append(f"{INSTALL_HINT} adds pydicom's " + " and ".join(
            f"{plugin} plugin ({', '.join(need for need in needs if _package(need) != 'numpy')})"
            for plugin, needs in bundled) + ", which would try it")
    if others:
        advice.append("pydicom's " + "; ".join(
            f"{plugin} plugin would also try it" + (", with " + " and ".join(needs) if needs else "")
            + _licence_notes([_package(need) for need in needs])
            for plugin, needs in others))
    return "; ".join(advice)


EXPORT_AGAIN = ("exporting it again from its source (the PACS or the scanner), uncompressed if offered, may give a "
                "readable file")
"""What to try when every decoder pydicom has for a transfer syntax is installed and none reads the pixel data, or
the file does not say which transfer syntax it has."""


NATIVE_ADVICE = ("uncompressed pixel data needs no decoder, so it is the header that does not describe it: its image "
                 "pixel elements (group 0028) or its transfer syntax")
"""Why native (or deflated) pixel data fails: pydicom names a missing or invalid element, or a length the header's
elements and transfer syntax do not give; no package would help."""


PLUGIN_FAILURES_WORDED = {"gdcm: 'NoneType' object has no attribute 'encode'":
                          "gdcm: GDCM decoded no pixels from the frame and gave no reason"}
"""Plugin failures pydicom quotes in Python's words, in a user's: GDCM returns no buffer where it cannot decode a frame
(its size, components or codestream unlike the header's, or data cut short), and pydicom's gdcm plugin then calls
``.encode`` on None."""


PILLOW_BOMB = re.compile(r"Image size \((\d+) pixels\) exceeds limit of (\d+) pixels, could be decompression bomb DOS "
                         r"attack\.?")
"""Pillow's refusal of a frame whose compressed data states a size over its limit (``Image.MAX_IMAGE_PIXELS``,
which vitroll lifts for the images it opens, not for pydicom's Pillow decoder): a damaged JPEG 2000 codestream
claims millions of megapixels."""


def _worded_failures(failures: str, dataset: "Dataset") -> str:
    """The decoder plugins' failures pydicom lists, those quoted in Python's or Pillow's words in a user's
    (:data:`PLUGIN_FAILURES_WORDED`, :data:`PILLOW_BOMB`: the size the frame states, the limit and the header's
    size)."""
    for said, meant in PLUGIN_FAILURES_WORDED.items():
        failures = failures.replace(said, meant)
    rows, columns = dataset.get("Rows"), dataset.get("Columns")
    header = f", where the DICOM header states {columns} × {rows} pixels" if rows and columns else ""
    return PILLOW_BOMB.sub(lambda stated: f"the frame's compressed data states an image of "
                                          f"{megapixels(int(stated[1]))}, over Pillow's limit of "
                                          f"{megapixels(int(stated[2]))}{header}, so Pillow did not decode it",
                           failures)


def decode_failure(dataset: "Dataset", error: BaseException) -> str:
    """A full sentence: the pixel data of ``dataset`` could not be decoded, its transfer syntax, what might.

    When every installed decoder plugin failed (:data:`DECODERS_FAILED`), each plugin's reason is given in brackets,
    apart from the advice that follows them."""
    uid = getattr(getattr(dataset, "file_meta", None), "TransferSyntaxUID", None)
    if uid is None:
        return ("The pixel data cannot be decoded: the file's meta information states no transfer syntax (0002,0010), "
                f"which says how the pixels are encoded; {EXPORT_AGAIN}.")
    kind = "compressed " if uid.is_compressed else ""
    syntax = f"{uid.name} (UID {uid})"
    decoder = _decoder(uid)
    if decoder is not None and not decoder.is_available:
        return (f"The {kind}pixel data cannot be decoded: no decoder for its transfer syntax, {syntax}, is installed; "
                f"{_install_advice(decoder)}.")
    if decoder is not None and _decoders_failed(error):
        failures = _worded_failures(_error_text(error).removeprefix(DECODERS_FAILED).lstrip(": ").rstrip("."),
                                    dataset)
        if not any(_missing_plugins(decoder)):
            return (f"The {kind}pixel data cannot be decoded: every pydicom decoder for its transfer syntax, {syntax}, "
                    f"is installed and each failed ({failures}), so the pixel data itself is damaged or unusual; "
                    f"{EXPORT_AGAIN}.")
        return (f"The {kind}pixel data cannot be decoded: each decoder installed for its transfer syntax, {syntax}, "
                f"failed ({failures}); {_decoder_advice(decoder)}.")
    advice = _decoder_advice(decoder) if uid.is_encapsulated else NATIVE_ADVICE
    return (f"The {kind}pixel data cannot be decoded: transfer syntax {syntax}; "
            f"pydicom said: {_error_text(error).rstrip('.')}; {advice}.")


@contextlib.contextmanager
def _native_stderr_discarded() -> Iterator[None]:
    """Send file descriptor 2 to the null device for the duration: C decoders (OpenJPEG inside GDCM) print their
    complaints there directly ("Invalid number of tiles …"), beside the one line per file that the reason gives."""
    if sys.stderr is not None:  # None when Python started with descriptor 2 closed
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2: nothing to keep quiet
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def frame_count(path: "str | os.PathLike[str]") -> int:
    """The NumberOfFrames of a Part 10 file, read from its header alone; 1 for any other file, or one whose count
    cannot be told (:func:`read_dicom` then says why it cannot be read)."""
    return header_frames(path)[0]


def header_frames(path: "str | os.PathLike[str]") -> tuple[int, Optional[str]]:
    """:func:`frame_count` and, for a Part 10 file whose native pixel data (not encapsulated; a deflated data set's
    too, once inflated) does not hold the frames its header counts (Rows × Columns × SamplesPerPixel ×
    BitsAllocated/8 × NumberOfFrames bytes), why not: :func:`read_dicom`'s reason, told from the header and the pixel
    data's length alone, without reading it from the file (None where it fits, or cannot be told: :func:`read_dicom`
    then says why the file cannot be read)."""
    if not is_dicom(path):
        return 1, None
    import pydicom

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # they may quote element values
            header = pydicom.dcmread(path, defer_size=PIXEL_DATA_DEFERRED, specific_tags=[
                "NumberOfFrames", "Rows", "Columns", "SamplesPerPixel", "BitsAllocated", "PhotometricInterpretation",
                *PIXEL_DATA_KEYWORDS])
            count = max(1, int(header.get("NumberOfFrames", 1) or 1))  # the value is converted (and warned about) here
            syntax = header.file_meta.get("TransferSyntaxUID")
            native = syntax is not None and not syntax.is_compressed and any(
                keyword in header for keyword in PIXEL_DATA_KEYWORDS)
            return count, _pixel_data_length_problem(Path(path), header, count, from_file=True) if native else None
    except Exception:  # noqa: BLE001 — a damaged header is read_dicom's to report, with its reason
        return 1, None


def read_dicom(
    path: "str | os.PathLike[str]", *, window: Optional[tuple[float, float]] = None, frame: Optional[int] = None,
    frames: Optional[range] = None, allow_recognizable: bool = False, max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
) -> DicomImage:
    """Decode a DICOM file into display-ready RGB frames (all, or only ``frame``, counted from 0; or only those of
    ``frames`` that the file has, so that a long cine can be read a part at a time). A Part 10 file's frames are read
    from the file one at a time: only the frames asked for are ever in memory. A compressed frame of more than
    ``max_pixels`` pixels (Rows × Columns, from the header: a few bytes may state 65535 × 65535) is refused before any
    decoding (:func:`~vitroll.io.images.check_size`; None: no limit); native pixel data, which holds every pixel it
    states, is not limited.

    A file whose header says RecognizableVisualFeatures YES is refused (a
    :class:`~vitroll.errors.RecognizableFeaturesError`, :func:`recognizable_withheld`) unless ``allow_recognizable``:
    its pixels identify the patient however the text is cleaned.

    Raises
    ------
    ImageReadError
        Not a DICOM file, no pixel data, recognizable features not allowed (a RecognizableFeaturesError), pixel
        data no installed decoder reads
        (the reason names the transfer syntax and what would decode it), corrupt pixel data, compressed frames larger
        than ``max_pixels`` or ``frame`` out of range — one sentence.
    """
    # pydicom's warnings quote element values, which may be identifiers; problems are reported in our own words
    with warnings.catch_warnings(), _file_system_errors_worded(path):  # the file may go after its header was read
        warnings.simplefilter("ignore")
        return _decode_dicom(Path(path), window=window, frame=frame, frames=frames,
                             allow_recognizable=allow_recognizable, max_pixels=max_pixels)


def _file_system_error(error: BaseException, path: "str | os.PathLike[str]") -> bool:
    """Whether ``error`` is the file system's refusal of the file at ``path`` (no permission, a folder where the file
    was, no file), which carries an errno and names that file or none, not a decoder's (Pillow's OSErrors about a
    frame's bytes carry no errno; a decoder that misses a file of its own names that file)."""
    named = getattr(error, "filename", None)
    return (isinstance(error, OSError) and error.errno is not None
            and (named is None or isinstance(named, (str, bytes, os.PathLike))
                 and Path(os.fsdecode(named)) == Path(path)))


@contextlib.contextmanager
def _file_system_errors_worded(path: "str | os.PathLike[str]") -> Iterator[None]:
    """A file-system error raised inside (:func:`_file_system_error`: the file, or its folder, made unreadable,
    replaced or removed while it is read) as an :class:`ImageReadError` of ``path`` saying it cannot be opened."""
    try:
        yield
    except OSError as error:
        if not _file_system_error(error, path):
            raise
        raise ImageReadError(path, cannot_open(error)) from None


def _decode_dicom(path: Path, *, window: Optional[tuple[float, float]], frame: Optional[int],
                  frames: Optional[range], allow_recognizable: bool, max_pixels: Optional[int]) -> DicomImage:
    try:
        from pydicom.pixels import iter_pixels  # noqa: F401 (pydicom 3)
    except ImportError:
        raise ImageReadError(path, f"Reading DICOM needs pydicom 3: {INSTALL_HINT}.") from None
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")  # recorded, never shown: they quote the path and element values
            dataset, part10 = _read_dataset(path)
    except ImageReadError:
        raise
    except Exception as error:  # EOFError, struct/ValueError/OSError from corrupt elements
        if _file_system_error(error, path):
            raise ImageReadError(path, cannot_open(error)) from None
        if _ends_in_a_header(path, error):
            raise ImageReadError(path, "This DICOM file is cut short: it ends in the middle of an element and no "
                                       "PixelData was read from it, so there is no image to explain.") from None
        raise ImageReadError(path, f"This file is not a readable DICOM file ({_error_text(error)}).") from None
    pixel_elements = [tag for tag in PIXEL_DATA_KEYWORDS if tag in dataset]
    if pixel_elements and all(_empty(dataset, tag) for tag in pixel_elements):
        raise ImageReadError(path, f"This DICOM file ({_sop_class_name(dataset)}) has an empty PixelData element, so "
                                   "there is no image to explain.")
    if not pixel_elements:
        # judged first: _cut_short needs the last element not yet converted, and reading the SOP class converts it
        cut_short = any(str(warning.message).startswith(EARLY_END) for warning in warned) or _cut_short(path, dataset)
        if _sop_class(dataset) == MEDIA_STORAGE_DIRECTORY:
            raise ImageReadError(path, DICOMDIR_HAS_NO_IMAGE)
        if cut_short:
            raise ImageReadError(path, f"This DICOM file ({_sop_class_name(dataset)}) is cut short: it ends in the "
                                       "middle of an element and no PixelData was read from it, so there is no image "
                                       "to explain.")
        raise ImageReadError(path, f"This DICOM file ({_sop_class_name(dataset)}) has no PixelData, so there is no "
                                   "image to explain.")
    if not allow_recognizable and str(dataset.get("RecognizableVisualFeatures", "")).strip().upper() == "YES":
        raise RecognizableFeaturesError(path, recognizable_withheld(), "allow_recognizable")
    metadata = safe_metadata(dataset)
    try:
        count = int(dataset.get("NumberOfFrames", 1) or 1)
    except (TypeError, ValueError):  # the value is not quoted: a damaged element may hold any text
        raise ImageReadError(path, "This DICOM file's NumberOfFrames is not a whole number, so its frames cannot be "
                                   "counted.") from None
    if count < 0:  # it gave no frame, so no row
        raise ImageReadError(path, f"This DICOM file's NumberOfFrames is {count}, so its frames cannot be counted.")
    _check_frame(path, frame, count)
    indices = [frame] if frame is not None else [index for index in frames or range(count) if index < count]
    samples = int(dataset.get("SamplesPerPixel", 1) or 1)
    photometric = str(dataset.get("PhotometricInterpretation", "MONOCHROME2")).strip()
    grey = samples == 1 and photometric != "PALETTE COLOR"
    problem = _samples_problem(samples, photometric) if grey else _colour_header_problem(samples, photometric)
    if problem is not None:
        raise ImageReadError(path, problem)
    syntax = dataset.file_meta.get("TransferSyntaxUID")
    rows, columns = dataset.get("Rows"), dataset.get("Columns")
    # native pixel data holds every pixel it states (its length is checked below); what the header lacks, the decoder
    # names
    if syntax is not None and syntax.is_encapsulated and isinstance(rows, int) and isinstance(columns, int):
        check_size(path, (columns, rows), max_pixels)
    # native and compressed pixel data is read from the file a frame at a time (a compressed one through its
    # fragments, without loading the others); pydicom reads deflated pixel data only from the data set, whose pixel
    # data is then loaded whole, and reads a data set whose encoding differs from its transfer syntax and words
    # other failures (a truncation…) from there
    from_file = part10 and syntax is not None and not syntax.is_deflated
    cut_short = part10 and _cut_short(path, dataset)  # told before decoding converts the element it judges
    problem = _pixel_data_length_problem(path, dataset, count, from_file=from_file)
    if problem is None and not cut_short:  # a frame cut short is worded as such below
        problem = _compressed_problem(path, dataset, count, indices, from_file=from_file)
    if problem is not None:
        raise ImageReadError(path, problem)
    try:
        with _native_stderr_discarded():
            try:
                decoded = _rgb_frames(path if from_file else dataset, dataset, indices, grey=grey, window=window)
            except Exception as error:
                if not from_file or _decoders_failed(error):
                    raise
                decoded = _rgb_frames(dataset, dataset, indices, grey=grey, window=window)
    except BaseException as error:  # missing decoder plugin, truncated or garbage pixel data, odd attributes
        if not _decoder_error(error) or _file_system_error(error, path):  # the latter worded by read_dicom
            raise
        if cut_short:  # a file cut short only after its pixel data (in trailing padding) still shows a whole image
            raise ImageReadError(path, f"This DICOM file ({_sop_class_name(dataset)}) is cut short: it ends in the "
                                       "middle of its pixel data, so the image is incomplete and is not "
                                       "shown.") from None
        raise ImageReadError(path, decode_failure(dataset, error)) from None
    identifiers = {name: str(dataset.get(name, "")) for name in ("PatientID", "StudyInstanceUID", "SOPInstanceUID")}
    study = str(dataset.get("StudyInstanceUID", "")) or None
    return DicomImage(frames=decoded, metadata=metadata, study_uid=study, identifiers=identifiers, colour=not grey,
                      secondary_capture=is_secondary_capture(dataset), frame_count=count,
                      icc_profile=None if grey else _icc_profile(dataset))


def _icc_profile(dataset: "Dataset") -> Optional[bytes]:
    paths = dataset.get("OpticalPathSequence") or []
    profile = dataset.get("ICCProfile") or (paths[0].get("ICCProfile") if len(paths) else None)
    return bytes(profile) if profile else None


DECODERS_FAILED = "Unable to decode as exceptions were raised by all available plugins"
"""How pydicom's error begins when every decoder plugin failed on a frame's bytes: the same bytes read through the
data set fail alike, so its pixel data (all frames of a long cine, for each of its parts) is not loaded to retry."""


def _decoder_error(error: BaseException) -> bool:
    """Whether ``error`` is a decoder's failure on this file: any Exception, or the panic of a decoder written in Rust
    (pylibjpeg-rle on RLE data whose header has fewer Columns than its segments), ``pyo3_runtime.PanicException``,
    which derives from BaseException alone so that it passed ``except Exception`` and stopped a whole audit."""
    return isinstance(error, Exception) or type(error).__name__ == "PanicException"


def _decoders_failed(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and str(error).startswith(DECODERS_FAILED)


def _rgb_frames(source: "Path | Dataset", dataset: "Dataset", indices: list[int], *, grey: bool,
                window: Optional[tuple[float, float]]) -> list[tuple[int, np.ndarray]]:
    """The frames ``indices`` of ``source`` (the file, or its data set) as (index, RGB uint8 (H, W, 3)), each decoded
    and converted before the next is read."""
    from pydicom.pixels import iter_pixels

    frames = []
    for index, raw in zip(indices, iter_pixels(source, indices=indices, raw=True)):
        rgb = _grey_to_rgb(raw, _frame_view(dataset, index), window) if grey else _colour_to_rgb(raw, dataset)
        frames.append((index, np.ascontiguousarray(rgb)))
    return frames


def _check_frame(path: Path, frame: Optional[int], count: int) -> None:
    """Refuse a ``frame`` beyond the ``count`` frames of the file at ``path``."""
    if frame is not None and not 0 <= frame < count:
        raise ImageReadError(path, f"{argument('frame', frame)} is out of range: the file has "
                                   f"{counted(count, 'frame')}, numbered from 0.")


def read_any(
    path: "str | os.PathLike[str]", *, window: Optional[tuple[float, float]] = None, frame: Optional[int] = None,
    frames: Optional[range] = None, allow_recognizable: bool = False, max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
) -> DicomImage:
    """A file told by its first bytes (:func:`~vitroll.io.formats.sniff`), whatever its name: DICOM through
    :func:`read_dicom`; an image (PNG, JPEG, TIFF…; 16-bit scaled by its range) through
    ``load_image_with_profile`` (its ICC profile kept, to be drawn in sRGB; refused over ``max_pixels``) with
    ``unknown`` metadata; a PDF, ZIP or gzip file refused by name. A file of no known kind is read as an image when
    its suffix says so, else as DICOM (:func:`read_dicom` refuses what is not DICOM; ``frames``,
    ``allow_recognizable`` and ``max_pixels`` go to it). A file or folder the file system refuses (its folder made
    unreadable: even its size cannot be read) cannot be opened, an :class:`ImageReadError` too."""
    with _file_system_errors_worded(path):
        return _read_any(Path(path), window=window, frame=frame, frames=frames, allow_recognizable=allow_recognizable,
                         max_pixels=max_pixels)


def _read_any(path: Path, *, window: Optional[tuple[float, float]], frame: Optional[int], frames: Optional[range],
              allow_recognizable: bool, max_pixels: Optional[int]) -> DicomImage:
    if is_dicom(path):
        return read_dicom(path, window=window, frame=frame, frames=frames, allow_recognizable=allow_recognizable,
                          max_pixels=max_pixels)
    if path.stat().st_size == 0:  # a copy that wrote nothing, not a file without a DICM marker
        raise ImageReadError(path, "This file is empty (0 bytes), neither DICOM nor an image.")
    signature = sniff(path)
    if signature is not None and not signature.image:
        raise ImageReadError(path, f"This file is a {signature.kind} (so its first bytes say), neither DICOM nor an "
                                   "image.")
    named_image = path.suffix.lower() in IMAGE_SUFFIXES
    if signature is None and not named_image:
        return read_dicom(path, window=window, frame=frame, frames=frames, allow_recognizable=allow_recognizable,
                          max_pixels=max_pixels)
    _check_frame(path, frame, 1)  # as for a single-frame DICOM file: not its one image under another frame's name
    try:
        loaded, profiled, icc_profile = load_image_with_profile(path, max_pixels=max_pixels)
    except ImageReadError as error:
        if named_image:
            raise
        raise ImageReadError(path, f"Its first bytes are those of a {signature.kind}, but it cannot be read as one: "
                                   f"{error.reason}.") from None
    image = np.asarray(loaded)
    colour = bool(image.ndim == 3 and (np.ptp(image.astype(np.int16), axis=-1) > 0).any())
    return DicomImage(frames=[(0, image)], metadata=safe_metadata(None), dicom=False, colour=colour,
                      icc_profile=icc_profile, profiled=None if profiled is loaded else profiled)
