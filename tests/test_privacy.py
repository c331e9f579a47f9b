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


def test_annotate_names_one_other_dicom_file_in_the_singular(tmp_path):
    from types import SimpleNamespace

    from vitroll.errors import ImageReadError
    from vitroll.pipelines.folder import _refuse_dicom

    for name in ("a.dcm", "b.dcm"):
        write_dicom(tmp_path / name, body_phantom())
    with pytest.raises(ImageReadError, match="leave it and the other DICOM file out of annotate's inputs$"):
        _refuse_dicom([SimpleNamespace(path=tmp_path / name) for name in ("a.dcm", "b.dcm")])


def test_audit_draws_the_pixel_data_alone_not_a_dicom_overlay_plane(tmp_path):
    """An overlay plane (60xx OverlayData: annotations, at times typed names) is not drawn: the report's images
    equal those of the same file without it."""
    import pydicom
    from pydicom.pixels import pack_bits

    plane = np.zeros((64, 64), dtype=np.uint8)
    plane[4:20, 36:60] = 1  # over the dark background, where a drawn plane would show
    for folder, with_plane in (("plain", False), ("with_plane", True)):
        (tmp_path / folder).mkdir()
        path = write_dicom(tmp_path / folder / "ct.dcm", body_phantom())
        if with_plane:
            dataset = pydicom.dcmread(path)
            dataset.add_new(0x60000010, "US", 64)
            dataset.add_new(0x60000011, "US", 64)
            dataset.add_new(0x60000040, "CS", "G")
            dataset.add_new(0x60000050, "SS", [1, 1])
            dataset.add_new(0x60000100, "US", 1)
            dataset.add_new(0x60000102, "US", 0)
            dataset.add_new(0x60003000, "OW", pack_bits(plane))
            dataset.save_as(path)
            assert dataset.overlay_array(0x6000).sum() == plane.sum()
        code, _, stderr = run_cli("audit", str(tmp_path / folder), "--out", str(tmp_path / f"out_{folder}"),
                                  "--salt", "same", "--device", "cpu")
        assert code == 0, stderr
    images = {folder: sorted((tmp_path / f"out_{folder}" / "images").iterdir()) for folder in ("plain", "with_plane")}
    assert [p.name for p in images["plain"]] == [p.name for p in images["with_plane"]] and len(images["plain"]) == 1
    assert images["plain"][0].read_bytes() == images["with_plane"][0].read_bytes()


def test_audit_writes_no_identifier_from_folder_and_file_names_descriptions_or_private_tags(tmp_path):
    """The audit of a patient-named folder (and a file named on its own) whose headers repeat the name in
    SeriesDescription, a private tag and the pixels' file names: no identifier in any file, name or printed line."""
    import pydicom
    from pydicom.data import get_testdata_file

    folder = tmp_path / PATIENT
    folder.mkdir()
    tags = {"SeriesDescription": "CT chest Zyxwuvt Qwerpoiu", "StudyDescription": f"for {PATIENT}"}
    write_dicom(folder / f"CT_{PATIENT}.dcm", body_phantom(), **tags)
    bundled = pydicom.dcmread(get_testdata_file("MR_small.dcm"))
    for name, value in {**FAKE_IDS, **tags}.items():
        setattr(bundled, name, value)
    bundled.add_new(0x00990010, "LO", "Zyxwuvt private creator")
    bundled.add_new(0x00991010, "LO", FAKE_IDS["PatientName"])
    bundled.save_as(folder / f"MR {PATIENT} {FAKE_IDS['PatientBirthDate']}")
    single = write_dicom(tmp_path / f"{FAKE_IDS['PatientID']}.dcm", body_phantom(), number=2)
    out = tmp_path / "out"
    code, stdout, stderr = run_cli("audit", str(folder), str(single), "--out", str(out), "--device", "cpu",
                                   "--group-by", "Manufacturer,BodyPartExamined,PatientSex,age-band")
    assert code == 0, stderr
    assert len(list((out / "images").iterdir())) == 3
    assert identifiers_written(out) == []
    printed = stdout + stderr
    assert [needle for needle in NEEDLES if needle.lower() in printed.lower()] == []


def test_annotate_on_a_folder_of_dicom_files_points_to_the_audit(tmp_path):
    """It said only "no image files found" (``.dcm`` is no image suffix), leaving a new user at a loss."""
    folder = tmp_path / PATIENT
    folder.mkdir()
    write_dicom(folder / f"CT_{PATIENT}.dcm", body_phantom())
    write_dicom(folder / "IM0001", body_phantom(), number=2)  # as PACS exports name them: no suffix
    code, _, stderr = run_cli("annotate", str(folder), "--out", str(tmp_path / "out"), "--device", "cpu")
    assert code == 2
    assert stderr.splitlines() == [f"vitroll: error: {folder}: no image files found, but 2 DICOM files: "
                                   "`vitroll audit` reads DICOM and keeps patient data out of its outputs"]
    assert not (tmp_path / "out").exists()


def test_annotate_counts_the_dicom_files_of_its_own_folders_only(tmp_path, monkeypatch):
    """The "nothing found" reason opened every file of every sub-folder to count DICOM files, though the run
    (without --recursive) looks at the folder's own files: a slow answer on a large tree, and a count of files the
    run would never have read."""
    import vitroll.io.formats

    folder = tmp_path / "export"
    (folder / "series").mkdir(parents=True)
    write_dicom(folder / "IM0001", body_phantom())
    write_dicom(folder / "series" / "IM0002", body_phantom(), number=2)
    write_dicom(folder / "series" / "IM0003", body_phantom(), number=3)
    opened = []
    real = vitroll.io.formats._head
    monkeypatch.setattr(vitroll.io.formats, "_head",
                        lambda path, size: opened.append(Path(path).name) or real(path, size))
    code, _, stderr = run_cli("annotate", str(folder), "--out", str(tmp_path / "out"), "--device", "cpu")
    assert (code, opened) == (2, ["IM0001"])
    assert stderr.splitlines() == [f"vitroll: error: {folder}: no image files found, but 1 DICOM file: "
                                   "`vitroll audit` reads DICOM and keeps patient data out of its outputs"]
    opened.clear()
    code, _, stderr = run_cli("annotate", str(folder), "--out", str(tmp_path / "out"), "--device", "cpu",
                              "--recursive")
    assert (code, sorted(opened)) == (2, ["IM0001", "IM0002", "IM0003"])
    assert stderr.splitlines() == [f"vitroll: error: {folder}: no image files found, but 3 DICOM files: "
                                   "`vitroll audit` reads DICOM and keeps patient data out of its outputs"]
