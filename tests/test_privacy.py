"""No command writes a DICOM file's patient identifiers: not in text, file names, PNG chunks or pixels.

The commands other than ``audit`` read images only; a DICOM file given to them is refused, with a pointer to the
audit, and leaves no trace in their outputs. Every file written is searched for the identifiers' bytes in several
encodings and case forms, inside PNG chunks (inflated), base64 data URIs and zip members too.
"""

from __future__ import annotations

import base64
import contextlib
import io
import re
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

pytest.importorskip("pydicom", minversion="3.0")

from dicom_factory import FAKE_IDS, body_phantom, write_dicom, write_dual_personality_tiff
from vitroll.cli import main

PATIENT = "DOE_JOHN_1945"
"""The patient's name as users put it into folder and file names; the headers carry :data:`FAKE_IDS`."""
NEEDLES = [PATIENT, "DOE_JOHN", "Zyxwuvt", "Qwerpoiu", FAKE_IDS["PatientID"], FAKE_IDS["InstitutionName"],
           FAKE_IDS["PatientBirthDate"], FAKE_IDS["AccessionNumber"]]
ENCODINGS = ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le")


def _readable_parts(data: bytes) -> Iterator[bytes]:
    """``data`` and what it hides: PNG chunks (compressed ones inflated), base64 data URIs, zip members."""
    yield data
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        offset = 8
        while offset + 8 <= len(data):
            length, kind = struct.unpack(">I4s", data[offset:offset + 8])
            body = data[offset + 8:offset + 8 + length]
            if kind in (b"zTXt", b"iTXt", b"iCCP"):
                with contextlib.suppress(zlib.error):
                    yield zlib.decompressobj().decompress(body[body.index(b"\0") + 2:])
            offset += 12 + length
    for encoded in re.findall(rb"base64,([A-Za-z0-9+/=]+)", data):
        yield from _readable_parts(base64.b64decode(encoded))
    if data.startswith(b"PK\x03\x04"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                yield member.encode()
                yield from _readable_parts(archive.read(member))


def identifiers_written(out: Path) -> list[str]:
    """Where a :data:`NEEDLES` identifier appears under ``out``: in a path below it or in a file's bytes."""
    found = []
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out).as_posix()
        found += [f"{relative}: in its name" for needle in NEEDLES if needle.lower() in relative.lower()]
        if path.is_file():
            parts = list(_readable_parts(path.read_bytes()))
            found += [f"{relative}: {needle!r} ({encoding})" for needle in NEEDLES
                      for form in {needle, needle.lower(), needle.upper(), needle.replace("^", " ")}
                      for encoding in ENCODINGS if any(form.encode(encoding) in part for part in parts)]
    return found


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_search_finds_an_identifier_hidden_in_a_png_text_chunk_or_a_data_uri(tmp_path):
    text = b"Comment\0\0" + zlib.compress("Zyxwuvt".encode("utf-16-le"))
    chunk = struct.pack(">I", len(text)) + b"zTXt" + text + bytes(4)
    png = b"\x89PNG\r\n\x1a\n" + chunk
    (tmp_path / "a.png").write_bytes(png)
    (tmp_path / "b.html").write_bytes(b"<img src='data:image/png;base64," + base64.b64encode(png) + b"'>")
    assert identifiers_written(tmp_path) == ["a.png: 'Zyxwuvt' (utf-16-le)", "b.html: 'Zyxwuvt' (utf-16-le)"]


@pytest.fixture
def dual_personality(tmp_path) -> Path:
    """A DICOM file whose preamble is a TIFF header (PS3.10 7.5), in a folder and under a name that hold the
    patient's name: Pillow alone would decode its pixels as a TIFF image."""
    (tmp_path / PATIENT).mkdir()
    return write_dual_personality_tiff(tmp_path / PATIENT / f"CT_{PATIENT}.tif",
                                       body_phantom(dtype=np.uint8, high=255))


def test_a_dicom_file_with_a_tiff_preamble_is_refused_as_dicom_and_nothing_of_it_is_written(tmp_path, dual_personality):
    out = tmp_path / "out"
    code, _, stderr = run_cli("overlay", str(dual_personality), "--out", str(out), "--device", "cpu")
    assert code == 3
    assert stderr.splitlines() == [f"vitroll: failed: {dual_personality}: a DICOM file: this command reads images; "
                                   "`vitroll audit` explains DICOM and keeps patient data out of its outputs"]
    assert not out.exists() or not any(out.iterdir())


def test_annotate_refuses_dicom_inputs_before_writing_their_names(tmp_path, dual_personality):
    """A listed ``.dcm``, a DICOM named ``.png`` and a TIFF-preamble DICOM: one usage error, no row, no name."""
    folder = dual_personality.parent
    write_dicom(folder / f"CT_{PATIENT}.dcm", body_phantom())
    write_dicom(folder / f"{PATIENT}.png", body_phantom())
    (tmp_path / "photo.png").write_bytes((Path(__file__).parents[1] / "sample_images" / "shapes_disk.png").read_bytes())
    listed = ["photo.png", f"{PATIENT}/CT_{PATIENT}.dcm", f"{PATIENT}/{PATIENT}.png", f"{PATIENT}/CT_{PATIENT}.tif"]
    (tmp_path / "inputs.txt").write_text("\n".join(listed) + "\n")
    out = tmp_path / "out"
    code, _, stderr = run_cli("annotate", str(tmp_path / "inputs.txt"), "--out", str(out), "--device", "cpu",
                              "--no-progress")
    assert code == 2
    assert stderr.splitlines() == [
        f"vitroll: error: {folder / f'CT_{PATIENT}.dcm'}: a DICOM file: this command reads images; `vitroll audit` "
        "explains DICOM and keeps patient data out of its outputs; leave it and the 2 other DICOM files out of "
        "annotate's inputs"]
    assert identifiers_written(out) == []
    assert not (out / "overlays").exists()
