"""Burned-in text: found, filled, and absent from every image the audit writes (OCR of pydicom's own files)."""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import re
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

pytest.importorskip("rapidocr")
pytest.importorskip("onnxruntime")
pydicom = pytest.importorskip("pydicom", minversion="3.0")

from pydicom.data import get_testdata_file

from vitroll.cli import main
from vitroll.errors import VitrollError
from vitroll.io.dicom import read_dicom
from vitroll.io.redact import (CHECKED_DESPITE_HEADER_NO, MIN_MARGIN_PX, TextCheck, fill_regions,
                               find_text_regions, region_mask, require_text_detector, skipped_on_request,
                               text_check)
from vitroll.wording import worded_for_the_command_line

PALETTE_ID = "11-05-25-142825"
"""PatientID of pydicom's examples_palette.dcm, burned into its pixels (BurnedInAnnotation absent)."""

AUDITED_FILES = ("examples_palette.dcm", "examples_ybr_color.dcm", "examples_rgb_color.dcm", "examples_jpeg2k.dcm",
                 "GDCMJ2K_TextGBR.dcm")
"""Every file pydicom bundles for its tests and decodes in which OCR reads text on the first frame (MR_small's
anatomy, read as a "9", aside): four ultrasound frames (IDs, names, dates, times, institution) and one secondary
capture (the words red, green, blue)."""

MODEL = ["--model", "vitroll-shapes", "--device", "cpu", "--batch-size", "4", "--salt", "redact-test"]


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


# --- finding and filling ----------------------------------------------------------------------------------------------

def scan_with_text(colour: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A 240 × 320 ultrasound-like frame (noise, a grey sector) with three small lines of text touching its borders,
    and the (H, W) mask of the pixels the text changed."""
    rng = np.random.default_rng(0)
    plain = (rng.random((240, 320, 1)) * 40).astype(np.uint8).repeat(3, axis=-1)
    cv2.ellipse(plain, (160, 20), (150, 150), 0, 50, 130, (120, 120, 120), -1)
    image = plain.copy()
    for text, origin in (("ID 11-05-25-142825", (0, 10)), ("5/25/2011", (250, 238)), ("2:56:22 PM", (2, 238))):
        cv2.putText(image, text, origin, cv2.FONT_HERSHEY_SIMPLEX, 0.35, colour, 1, cv2.LINE_AA)
    return image, np.any(image != plain, axis=-1)


@pytest.mark.parametrize("colour", [(255, 255, 255), (255, 255, 0), (150, 150, 150)], ids=["white", "yellow", "grey"])
def test_small_text_at_the_border_is_found_and_filled(colour):
    image, text_pixels = scan_with_text(colour)
    polygons = find_text_regions(image)
    assert polygons.dtype == np.float32 and polygons.shape[1:] == (4, 2)
    assert 3 <= len(polygons) <= 6  # three lines, a line may split at a wide space
    mask = region_mask(polygons, image.shape[:2])
    assert mask[text_pixels].all()
    filled = fill_regions(image, mask)
    assert (filled[text_pixels] == 0).all()
    near_text = cv2.dilate(text_pixels.astype(np.uint8), np.ones((31, 31), np.uint8)).astype(bool)
    assert np.array_equal(filled[~near_text], image[~near_text])  # nothing changes 15 px away from the text
    assert mask.mean() < 0.1


def header_on_large_frame(shape_hw: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A large grey frame (a flat bright disc, or a band for a wide one) with a three-line header of 22 px text in its
    top-left corner, and the (H, W) mask of the text's pixels."""
    height, width = shape_hw
    image = np.zeros((height, width, 3), np.uint8)
    cv2.ellipse(image, (width // 2, height // 2), (int(0.4 * width), int(0.3 * height)), 0, 0, 360, (170,) * 3, -1)
    for row, line in enumerate(("DOE^JOHN", "MRN 55512345", "DOB 1945-07-08")):
        cv2.putText(image, line, (10, 30 + 30 * row), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (255,) * 3, 2, cv2.LINE_AA)
    return image, image[..., 0] > 200


@pytest.mark.parametrize("shape_hw", [(2048, 2048), (300, 3000)], ids=["mammogram", "panoramic"])
def test_a_header_on_a_large_or_wide_frame_is_found(shape_hw):
    """Given whole (2000 px a side after scaling), the detector found none of these lines; tiles find all three, and
    the flat disc the small tiles see as a blob is not taken for text."""
    image, text_pixels = header_on_large_frame(shape_hw)
    mask = region_mask(find_text_regions(image), shape_hw)
    assert mask[text_pixels].all()
    assert mask.mean() < 0.05


@pytest.mark.parametrize("shape_hw", [(40, 800), (20, 400)])
def test_a_line_of_text_filling_a_thin_frame_is_found(shape_hw):
    """Thicker than a third of the frame, the line was dropped as a blob of anatomy; its length says it is text."""
    image = np.zeros((*shape_hw, 3), np.uint8)
    cv2.putText(image, "DOE^JOHN MRN 55512345", (4, shape_hw[0] * 3 // 4), cv2.FONT_HERSHEY_SIMPLEX,
                shape_hw[0] / 55, (255,) * 3, 1, cv2.LINE_AA)
    assert region_mask(find_text_regions(image), shape_hw)[image[..., 0] > 100].all()


def test_frames_without_text_have_no_regions():
    """Blank frames and small anatomy (which the detector, enlarged too far, reads as one huge glyph)."""
    assert find_text_regions(np.full((200, 300, 3), 90, np.uint8)).shape == (0, 4, 2)
    for name in ("CT_small.dcm", "MR_small.dcm"):
        assert len(find_text_regions(read_dicom(get_testdata_file(name)).frames[0][1])) == 0, name


def test_region_margin_covers_anti_aliased_edges_and_no_more():
    polygon = np.array([[[20, 40], [120, 40], [120, 60], [20, 60]]], dtype=np.float32)  # 100 × 20: margin 5 px
    mask = region_mask(polygon, (100, 200))
    assert mask[40:61, 20:121].all()
    assert mask[35, 70] and mask[65, 70] and mask[50, 15] and mask[50, 125]
    assert not mask[33, 70] and not mask[67, 70] and not mask[50, 13] and not mask[50, 127]
    thin = region_mask(np.array([[[10, 10], [50, 10], [50, 12], [10, 12]]], dtype=np.float32), (30, 60))
    assert thin[10 - MIN_MARGIN_PX, 30] and not thin[10 - MIN_MARGIN_PX - 2, 30]
    assert region_mask(np.zeros((0, 4, 2), np.float32), (5, 5)).sum() == 0


@pytest.mark.parametrize("metadata, header, secondary, expected, trusted", [
    ({"Modality": "CT", "BurnedInAnnotation": "NO"}, True, False,
     TextCheck(True, "BurnedInAnnotation NO: checked anyway"),
     TextCheck(False, "not checked: BurnedInAnnotation NO (trust_burned_in_header=True)")),
    ({"Modality": "CT", "BurnedInAnnotation": "no"}, True, False,
     TextCheck(True, CHECKED_DESPITE_HEADER_NO),
     TextCheck(False, "not checked: BurnedInAnnotation NO (trust_burned_in_header=True)")),
    ({"Modality": "CT", "BurnedInAnnotation": "YES"}, True, False, TextCheck(True, "BurnedInAnnotation YES"), None),
    ({"Modality": "CR", "BurnedInAnnotation": "unknown"}, True, False, TextCheck(True, "BurnedInAnnotation absent"),
     None),
    ({"Modality": "US", "BurnedInAnnotation": "NO"}, True, False, TextCheck(True, "ultrasound: always checked"), None),
    ({"Modality": "OT", "BurnedInAnnotation": "NO"}, True, True,
     TextCheck(True, "secondary capture: always checked"), None),
    ({"Modality": "unknown", "BurnedInAnnotation": "unknown"}, False, False, TextCheck(True, "no DICOM header"), None),
])
def test_which_pixels_are_searched(metadata, header, secondary, expected, trusted):
    """Every image by default, whatever its header says; trusting the header skips only a DICOM header's NO on a
    modality other than ultrasound (``trusted``: the answer then, None when the same)."""
    assert text_check(metadata, has_header=header, secondary_capture=secondary) == expected
    assert text_check(metadata, has_header=header, secondary_capture=secondary,
                      trust_header=True) == (trusted or expected)


def test_the_reasons_that_name_an_option_name_it_as_the_caller_sets_it():
    """From Python the reasons name the audit's arguments; on the command line, its flags."""
    trusted = {"Modality": "CT", "BurnedInAnnotation": "NO"}
    assert skipped_on_request() == TextCheck(False, "not checked: keep_burned_in_text=True")
    with worded_for_the_command_line():
        assert skipped_on_request() == TextCheck(False, "not checked: --keep-burned-in-text")
        assert text_check(trusted, has_header=True, secondary_capture=False, trust_header=True) == TextCheck(
            False, "not checked: BurnedInAnnotation NO (--trust-burned-in-header)")


def test_a_missing_detector_is_one_line_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "rapidocr", None)  # import rapidocr → ImportError
    with pytest.raises(VitrollError, match=r'rapidocr is missing\): pip install "vitroll\[dicom\]"; or pass '
                                           r"keep_burned_in_text=True if the pixels are known to carry no "
                                           r"identifiers$"):
        require_text_detector()
    palette = get_testdata_file("examples_palette.dcm")
    code, stdout, stderr = run_cli("audit", palette, "--out", str(tmp_path / "refused"), *MODEL)
    assert code == 2 and stdout == ""
    assert stderr.startswith("vitroll: error: removing burned-in text from audit images needs rapidocr and onnxruntime")
    assert stderr.count("\n") == 1 and 'pip install "vitroll[dicom]"' in stderr
    assert stderr.endswith("; or pass --keep-burned-in-text if the pixels are known to carry no identifiers\n")
    assert not (tmp_path / "refused").exists()


# --- the audit on pydicom's files: OCR finds no identifier in any image written --------------------------------------

@pytest.fixture(scope="module")
def ocr():
    """rapidocr's full pipeline (detection, orientation, recognition): image (H, W, 3) RGB → the lines it reads."""
    from rapidocr import RapidOCR

    engine = RapidOCR(params={"Global.log_level": "critical"})

    def read(rgb: np.ndarray) -> list[str]:
        result = engine(np.ascontiguousarray(rgb[..., ::-1]))
        return list(result.txts or ()) if getattr(result, "txts", None) is not None else []

    return read


def date_forms(value: str) -> set[str]:
    """A DICOM date YYYYMMDD as people write it on screens."""
    if not re.fullmatch(r"\d{8}", value):
        return set()
    y, m, d = value[:4], value[4:6], value[6:]
    return {value, f"{y}-{m}-{d}", f"{y}/{m}/{d}", f"{int(m)}/{int(d)}/{y}", f"{m}/{d}/{y}", f"{d}.{m}.{y}",
            f"{d}/{m}/{y}"}


def time_forms(value: str) -> set[str]:
    """A DICOM time HHMMSS(.ffffff) as 24-hour and 12-hour clock readings."""
    match = re.match(r"(\d{2})(\d{2})(\d{2})", value)
    if not match:
        return set()
    h, m, s = (int(part) for part in match.groups())
    twelve = f"{(h - 1) % 12 + 1}:{m:02d}:{s:02d}"
    return {f"{h:02d}:{m:02d}:{s:02d}", f"{h}:{m:02d}:{s:02d}", twelve, f"{h:02d}{m:02d}{s:02d}"}


def identifiers(path: str) -> set[str]:
    """PatientID, PatientName components, InstitutionName, dates and times of a file, upper case, no spaces."""
    ds = pydicom.dcmread(path, stop_before_pixels=True)
    found = {str(ds.get("PatientID", "")), str(ds.get("InstitutionName", ""))}
    found |= set(re.split(r"[\^ ]+", str(ds.get("PatientName", ""))))
    for name in ("StudyDate", "SeriesDate", "AcquisitionDate", "ContentDate", "PatientBirthDate"):
        found |= date_forms(str(ds.get(name, "")))
    for name in ("StudyTime", "SeriesTime", "AcquisitionTime", "ContentTime"):
        found |= time_forms(str(ds.get(name, "")))
    return {re.sub(r"\s+", "", text).upper() for text in found if len(text.strip()) >= 2}


DATE_OR_TIME = re.compile(r"\d{1,4}[/.-]\d{1,2}[/.-]\d{2,4}|\d{1,2}:\d{2}")
"""Any date or clock reading on screen, whether or not it matches a header field."""


def leaks(lines: list[str], needles: set[str]) -> set[str]:
    """The needles OCR read (in one line or across lines) and every line that looks like a date or a time."""
    squeezed = [re.sub(r"\s+", "", line).upper() for line in lines]
    joined = "".join(squeezed)
    return {n for n in needles if n in joined} | {line for line in squeezed if DATE_OR_TIME.search(line)}


def test_ocr_reads_the_identifiers_burned_into_the_original_frame(ocr):
    """Without this, the test below could pass with an OCR that reads nothing."""
    path = get_testdata_file("examples_palette.dcm")
    lines = ocr(read_dicom(path).frames[0][1])
    assert PALETTE_ID in lines
    assert {PALETTE_ID, "5/25/2011", "OB"} <= leaks(lines, identifiers(path))
    assert "2:56:22PM" in leaks(lines, set())  # a clock reading that is no header field


def audit_rows(out: Path) -> list[dict[str, str]]:
    with (out / "report.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def audited(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("redact") / "audit"
    code, _, stderr = run_cli("audit", *(get_testdata_file(name) for name in AUDITED_FILES), "--frame", "0",
                              "--out", str(out), *MODEL)
    assert code == 0, stderr
    return out


def test_no_identifier_in_any_image_the_audit_writes(audited, ocr):
    out, paths = audited, [get_testdata_file(name) for name in AUDITED_FILES]
    rows = audit_rows(out)
    assert [row["status"] for row in rows if row["status"] == "error"] == []
    assert sorted(row["text_check"] for row in rows) == [
        "secondary capture: always checked", *["ultrasound: always checked"] * 4]
    assert all(int(row["text_regions_filled"]) >= 3 for row in rows)

    html = (out / "report.html").read_text()
    embedded = [base64.b64decode(data) for data in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)]
    written = [path.read_bytes() for path in sorted((out / "images").glob("*.png"))]
    assert len(written) == len(AUDITED_FILES) and len(embedded) == len(AUDITED_FILES) + 1  # thumbnails + histograms
    needles = set().union(*(identifiers(path) for path in paths))
    for number, data in enumerate(written + embedded):
        image = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        lines = ocr(image)
        assert not leaks(lines, needles), (number, lines)


def test_no_outline_in_a_thumbnail_follows_the_letters_of_text_touching_the_body(tmp_path):
    """The body outline, found on the original pixels, took in the letters that touch the body and traced them
    across the filled region of the thumbnail."""
    from pydicom.uid import CTImageStorage

    from dicom_factory import body_phantom, write_dicom

    pixels = body_phantom(256, marker=False, high=2000)  # a disc of radius 77 around the centre
    letters = np.zeros((256, 256), np.uint8)
    for row, line in enumerate(("DOE^JOHN", "MRN 55512345", "DOB 1945-07-08")):  # from the air into the disc
        cv2.putText(letters, line, (20, 110 + 25 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.7, 255, 2, cv2.LINE_AA)
    pixels = np.where(letters > 127, 3000, pixels).astype(np.uint16)
    path = write_dicom(tmp_path / "in.dcm", pixels, SOPClassUID=CTImageStorage)
    out = tmp_path / "out"
    code, _, stderr = run_cli("audit", str(path), "--out", str(out), *MODEL)
    assert code == 0, stderr
    [row] = audit_rows(out)
    assert int(row["text_regions_filled"]) >= 3
    html = (out / "report.html").read_text()
    thumb = cv2.imdecode(np.frombuffer(base64.b64decode(re.search(
        rf'id="{row["case"]}".*?data:image/png;base64,([A-Za-z0-9+/=]+)', html, re.S).group(1)), np.uint8),
        cv2.IMREAD_COLOR)
    text = region_mask(find_text_regions(read_dicom(path).frames[0][1]), (256, 256)).astype(np.uint8)
    inside = cv2.erode(cv2.resize(text, thumb.shape[1::-1], interpolation=cv2.INTER_NEAREST), np.ones((3, 3), np.uint8))
    assert inside.sum() > 1000
    shown = {tuple(pixel) for pixel in thumb[inside.astype(bool)]}
    assert shown <= {(0, 0, 0), (255, 255, 255)}  # filled black; the peak's white cross


def lying_header(path: Path) -> tuple[Path, np.ndarray]:
    """A 256 × 256 CT whose header says BurnedInAnnotation NO, with a patient's name and birth year burned into its
    top-left corner; and the (H, W) mask of the text's pixels."""
    from pydicom.uid import CTImageStorage

    from dicom_factory import write_dicom

    image = np.zeros((256, 256), np.uint8)
    cv2.circle(image, (128, 140), 90, 80, -1)
    cv2.putText(image, "DOE JOHN 1945", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.6, 255, 1)
    write_dicom(path, image.astype(np.uint16) * 10, BurnedInAnnotation="NO", SOPClassUID=CTImageStorage)
    return path, image > 200


def written_overlay(out: Path, row: dict[str, str]) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(out / row["overlay"])), cv2.COLOR_BGR2RGB)


def test_text_behind_a_header_saying_none_is_filled_unless_the_header_is_trusted(tmp_path):
    """The header said BurnedInAnnotation NO, so the pixels were not searched and the name was written as it was."""
    path, text_pixels = lying_header(tmp_path / "lie.dcm")
    out = tmp_path / "out"
    code, stdout, stderr = run_cli("audit", str(path), "--out", str(out), *MODEL)
    assert code == 0, stderr
    [row] = audit_rows(out)
    assert (row["text_check"], row["text_regions_filled"]) == ("BurnedInAnnotation NO: checked anyway", "1")
    assert (written_overlay(out, row)[text_pixels] == 0).all()
    wrong = ("1 of 1 images (100 %) say BurnedInAnnotation = NO in their header, yet the text detector found text in "
             "their pixels (filled black in this report): the header may be wrong for them.")
    assert wrong in stdout.splitlines() and wrong in (out / "report.html").read_text()

    trusted = tmp_path / "trusted"
    code, stdout, stderr = run_cli("audit", str(path), "--out", str(trusted), "--trust-burned-in-header", *MODEL)
    assert code == 0
    assert stderr.startswith("vitroll: warning: --trust-burned-in-header: images whose header says "
                             "BurnedInAnnotation NO are not searched")
    [row] = audit_rows(trusted)
    assert (row["text_check"], row["text_regions_filled"]) == (
        "not checked: BurnedInAnnotation NO (--trust-burned-in-header)", "")
    shown = written_overlay(trusted, row)[text_pixels]
    assert (shown == 0).all(axis=-1).mean() < 0.01 and shown.mean() > 150  # the name is there, brighter than the map
    assert "header may be wrong" not in stdout


def test_the_report_says_per_image_why_pixels_were_or_were_not_searched(tmp_path):
    """With the header trusted (the default searches all: the test above), a header's NO is the one reason to skip."""
    from pydicom.uid import CTImageStorage

    from dicom_factory import body_phantom, write_dicom

    folder = tmp_path / "in"
    folder.mkdir()
    write_dicom(folder / "clean.dcm", body_phantom(), number=1, SOPClassUID=CTImageStorage, BurnedInAnnotation="NO")
    write_dicom(folder / "marked.dcm", body_phantom(), number=2, SOPClassUID=CTImageStorage, BurnedInAnnotation="YES")
    write_dicom(folder / "silent.dcm", body_phantom(), number=3, SOPClassUID=CTImageStorage)
    image, _ = scan_with_text((255, 255, 255))
    cv2.imwrite(str(folder / "photo.png"), image[..., ::-1])
    code, _, stderr = run_cli("audit", str(folder), "--out", str(tmp_path / "out"), "--trust-burned-in-header", *MODEL)
    assert code == 0, stderr
    checks = sorted((row["text_check"], row["text_regions_filled"]) for row in audit_rows(tmp_path / "out"))
    assert checks[:2] == [("BurnedInAnnotation YES", "0"), ("BurnedInAnnotation absent", "0")]  # phantoms: no text
    assert checks[2][0] == "no DICOM header" and int(checks[2][1]) >= 3  # the PNG with three lines of text
    assert checks[3] == ("not checked: BurnedInAnnotation NO (--trust-burned-in-header)", "")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Burned-in text: 3 of 4 images searched with a text detector" in html
    assert ("1 not searched because the header says BurnedInAnnotation NO and --trust-burned-in-header took its word "
            "(if it is wrong, their burned-in text shows)") in html
    assert json.loads((tmp_path / "out" / "report.json").read_text())["settings"]["trust_burned_in_header"] is True


def test_keep_burned_in_text_warns_and_says_so_in_the_report(tmp_path, audited, ocr):
    out = tmp_path / "kept"
    code, _, stderr = run_cli("audit", get_testdata_file("examples_palette.dcm"), "--frame", "0", "--out", str(out),
                              "--keep-burned-in-text", *MODEL)
    assert code == 0
    assert stderr.startswith("vitroll: WARNING: --keep-burned-in-text: the pixels are NOT searched for burned-in text")
    html = (out / "report.html").read_text()
    assert '<p class="banner" id="burned-in-text-kept">Burned-in text was NOT searched' in html
    [row] = audit_rows(out)
    assert (row["text_check"], row["text_regions_filled"]) == ("not checked: --keep-burned-in-text", "")
    [overlay] = (out / "images").glob("*.png")
    assert PALETTE_ID in ocr(cv2.cvtColor(cv2.imread(str(overlay)), cv2.COLOR_BGR2RGB))
    # the model saw the same pixels with and without redaction: same prediction, same map
    [redacted] = [other for other in audit_rows(audited) if other["case"] == row["case"]]
    for name in ("prediction", "probability", "border"):
        assert row[name] == redacted[name], name
