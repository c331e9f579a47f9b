"""The medical audit end to end: no PHI in any output, unreadable files as rows, shortcut cases flagged, a valid
report."""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import re
import struct
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

pytest.importorskip("pydicom", minversion="3.0")

from claimed_size import png_claiming_size
from interrupts import pressing_ctrl_c
from test_progress import Terminal
from dicom_factory import (
    FAKE_IDS, PHI_STRINGS, body_phantom, rle_segments, patched_testdata, write_dicom,
)
from vitroll.audit.metrics import (
    ROI_METRICS, MaskSource, MetricSettings, annotation_mask, body_mask, border_band, image_metrics, read_boxes,
    roi_metrics, top_region,
)
from vitroll.audit.pipeline import run_audit
from vitroll.audit.records import AuditOptions, AuditRow, parse_group_by
from vitroll.audit.report import AuditReport, render_html
from vitroll.audit.summary import not_reached
from vitroll.cli import main
from vitroll.errors import InputValueError, VitrollError
from vitroll.methods import METHODS, Method, Saliency
from vitroll.models import ModelProvenance
from vitroll.pipelines.explain import ExplainSettings
from vitroll.wording import worded_for_the_command_line

MODEL = ["--model", "test_vit", "--img-size", "64", "--device", "cpu", "--crop-mode", "squash", "--crop-pct", "1"]


# --- inputs ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, Path]:
    """A random-init timm test ViT (4×4 patch grid at 64 px) saved as safetensors, with three class names."""
    import timm
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    model = timm.create_model("test_vit", img_size=64, num_classes=3)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
    (folder / "classes.txt").write_text("normal\neffusion\nnodule\n")
    return folder / "model.safetensors", folder / "classes.txt"


def write_inputs(folder: Path) -> Path:
    """Good DICOMs (file names carrying identifiers too) and three files that cannot be read."""
    from pydicom.uid import JPEGBaseline8Bit

    folder.mkdir(parents=True, exist_ok=True)
    write_dicom(folder / f"{FAKE_IDS['PatientID']}_{FAKE_IDS['StudyDate']}.dcm", body_phantom(), number=1)
    write_dicom(folder / "Zyxwuvt_Qwerpoiu", body_phantom(), number=2, photometric="MONOCHROME1")  # no extension
    write_dicom(folder / "cine.dcm", np.stack([body_phantom(), body_phantom(marker=False)]), number=3,
                ManufacturerModelName="Other CT", PatientSex="M", PatientAge="071Y", BurnedInAnnotation="YES")
    write_dicom(folder / "hu.dcm", body_phantom(low=24, high=1224) , number=4, slope=1.0, intercept=-1024.0,
                window=(400, 40))
    good = (folder / "cine.dcm").read_bytes()
    (folder / "Grandvale_corrupt.dcm").write_bytes(good[:-3000])
    write_dicom(folder / "nopixels.dcm", body_phantom(), number=5, with_pixels=False)
    write_dicom(folder / "jpeg.dcm", body_phantom(dtype=np.uint8, high=255), number=6, transfer_syntax=JPEGBaseline8Bit,
                pixel_bytes=b"\xff\xd8garbage" * 20)
    return folder


def run_cli(*argv: str, terminal: bool = False) -> tuple[int, str, str]:
    out, err = io.StringIO(), Terminal() if terminal else io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def audited(tmp_path_factory, checkpoint) -> dict:
    """One de-identified audit through the CLI entry point."""
    root = tmp_path_factory.mktemp("audit")
    inputs = write_inputs(root / "in")
    out = root / "out"
    code, stdout, stderr = run_cli("audit", str(inputs), "--out", str(out), "--checkpoint", str(checkpoint[0]),
                                   "--class-names", str(checkpoint[1]), "--group-by",
                                   "Manufacturer,model,PatientSex,age",
                                   *MODEL)
    return {"code": code, "stdout": stdout, "stderr": stderr, "out": out, "inputs": inputs,
            "json": json.loads((out / "report.json").read_text())}


def png_chunks(data: bytes) -> list[str]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = [], 8
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        chunks.append(kind.decode("ascii"))
        offset += 12 + length
    return chunks


# --- (a) no identifier anywhere ---------------------------------------------------------------------------------------

def test_no_identifier_in_any_output_file(audited):
    assert audited["code"] == 3, audited["stderr"]  # three files gave no image
    files = [p for p in audited["out"].rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"report.html", "report.csv", "report.json"}
    assert len([p for p in files if p.suffix == ".png"]) == 5  # 3 single-frame files + 2 frames
    inputs = audited["inputs"]
    needles = {*PHI_STRINGS, str(inputs), *(p.name for p in inputs.iterdir()), *(p.stem for p in inputs.iterdir())}
    needles -= {"cine", "hu", "jpeg", "nopixels"}  # neutral file names that are also common words
    embedded = []
    for path in files:
        data = path.read_bytes()
        if path.suffix == ".html":
            embedded += [base64.b64decode(b) for b in re.findall(rb"data:image/png;base64,([A-Za-z0-9+/=]+)", data)]
        for needle in needles:
            for form in {needle, needle.lower(), needle.upper(), needle.replace("^", " ")}:
                assert form.encode() not in data, f"{form!r} found in {path.name}"
        assert not any(needle in path.name for needle in needles)
    for text in (audited["stdout"], audited["stderr"]):
        assert not any(needle in text for needle in needles)
    pngs = [p.read_bytes() for p in files if p.suffix == ".png"] + embedded
    assert len(embedded) == 6  # 5 thumbnails + the histograms
    for data in pngs:  # no tEXt/zTXt/iTXt/eXIf/tIME: pixels only, and the one byte saying they are sRGB
        assert set(png_chunks(data)) <= {"IHDR", "PLTE", "sRGB", "IDAT", "IEND"}


def test_keep_ids_is_opt_in_and_warns(tmp_path, checkpoint):
    inputs = write_inputs(tmp_path / "in")
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--checkpoint", str(checkpoint[0]),
                              "--keep-ids", "--salt", "s3cret", *MODEL)
    assert code == 3
    assert "warning: --keep-ids" in stderr and "NOT de-identified" in stderr
    csv_text = (tmp_path / "out" / "report.csv").read_text()
    assert FAKE_IDS["PatientID"] in csv_text  # the check above would catch identifiers if they were written
    assert "s3cret" not in csv_text + (tmp_path / "out" / "report.html").read_text()


def test_a_file_with_recognizable_features_is_withheld_unless_allowed(tmp_path, checkpoint):
    """RecognizableVisualFeatures YES (a face, a surface rendering): a row with the reason and no image anywhere;
    --allow-recognizable-features draws it, warns, and says so in the report."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "IMG0007.dcm", body_phantom(), number=1, RecognizableVisualFeatures="YES")
    write_dicom(inputs / "chest.dcm", body_phantom(), number=2, RecognizableVisualFeatures="NO")
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), *MODEL)
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["cases"]
    withheld = [row for row in rows if row["status"] == "error"]
    drawn = [row for row in rows if row["status"] != "error"]
    assert code == 3 and len(rows) == 2 and [row["input"] for row in withheld] == [1]
    assert withheld[0]["reason"] == (
        "Withheld: its header says RecognizableVisualFeatures YES (a face photograph or a 3D surface rendering, whose "
        "pixels can identify the patient), so it is neither explained nor drawn; --allow-recognizable-features audits "
        "it.")
    assert f"vitroll: not audited: file 1 ({withheld[0]['case']}): Withheld: " in stderr
    summary = json.loads((tmp_path / "out" / "report.json").read_text())["summary"][0]["text"]
    assert summary.endswith("; 1 file was not audited (listed by number in the input list, with the reason).")
    assert [p.name for p in (tmp_path / "out" / "images").iterdir()] == [f"{drawn[0]['case']}.png"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2  # the chest thumbnail and the histograms

    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "allowed"), "--allow-recognizable-features",
                              *MODEL)
    report = json.loads((tmp_path / "allowed" / "report.json").read_text())
    assert code == 0 and [row["status"] for row in report["cases"]] != ["error"] * 2
    assert len(list((tmp_path / "allowed" / "images").iterdir())) == 2
    assert report["settings"]["allow_recognizable_features"] is True
    assert "warning: --allow-recognizable-features" in stderr
    assert "their pixels can identify patients" in (tmp_path / "allowed" / "report.html").read_text()


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_png_over_max_pixels_is_a_row_naming_the_flag_audit_takes_and_dicom_is_not_limited(tmp_path, workers):
    """The limit's reason named --max-pixels, which audit did not take; it limits image files and compressed DICOM
    frames, not native DICOM pixel data (which holds every pixel it states). Read by a forkserver worker
    (--workers 1), the reason was worded for Python (max_pixels=1_000_000): a worker now words as its command."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "chest.dcm", body_phantom(), number=1)  # 64×64: 4096 pixels
    Image.fromarray(body_phantom(dtype=np.uint8, high=255)).save(inputs / "photo.png")
    arguments = [str(inputs), "--keep-burned-in-text", *MODEL]
    code, _, stderr = run_cli("audit", *arguments, "--out", str(tmp_path / "out"), "--max-pixels", "4000",
                              "--workers", workers)
    rows = json.loads((tmp_path / "out" / "report.json").read_text())["cases"]
    assert code == 3 and [row["status"] == "error" for row in rows] == [False, True]
    assert rows[1]["reason"] == ("Image too large: 0.0041 MP (64×64), over the limit of 0.004 MP; --max-pixels 1M "
                                 "reads it if the memory allows (an overlay takes about 20 bytes a pixel).")
    code, _, _ = run_cli("audit", *arguments, "--out", str(tmp_path / "more"), "--max-pixels", "4096")
    assert code == 0

def test_a_manufacturer_holding_the_patient_name_is_withheld_in_every_report_file(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", body_phantom(), Manufacturer=FAKE_IDS["PatientName"])
    code, stdout, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--group-by", "Manufacturer",
                                   *MODEL)
    assert code == 0, stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["cases"][0]["Manufacturer"] == "(withheld)"
    texts = [stdout, stderr] + [(tmp_path / "out" / name).read_text() for name in ("report.html", "report.csv",
                                                                                   "report.json")]
    for form in ("Zyxwuvt", "ZYXWUVT", "zyxwuvt", "Qwerpoiu"):
        assert not any(form in text for text in texts)
    assert "(withheld)" in (tmp_path / "out" / "report.csv").read_text()


def test_a_report_written_from_python_names_the_audits_arguments_not_flags(tmp_path):
    """run_audit's rows, sentences and banners name what its caller sets (AuditOptions' fields, load_model's
    arguments), never a flag the caller has not got."""
    import timm

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "chest.dcm", body_phantom(), number=1)
    write_dicom(inputs / "face.dcm", body_phantom(), number=2, RecognizableVisualFeatures="YES")
    model = timm.create_model("test_vit", img_size=64, num_classes=3).eval()
    provenance = ModelProvenance.of("test_vit", pretrained=False, checkpoint=None)
    report = run_audit([inputs], model, out_dir=tmp_path / "out", settings=ExplainSettings(method="center"),
                       options=AuditOptions(keep_burned_in_text=True, salt="s"), provenance=provenance)
    chest, face = sorted(report.rows, key=lambda row: row.input_number)
    assert chest.text_check == "not checked: keep_burned_in_text=True"
    assert face.error == (
        "Withheld: its header says RecognizableVisualFeatures YES (a face photograph or a 3D surface rendering, whose "
        "pixels can identify the patient), so it is neither explained nor drawn; allow_recognizable_features=True "
        "audits it.")
    html = (tmp_path / "out" / "report.html").read_text()
    assert "RANDOM WEIGHTS: this model was not trained (pretrained=False, checkpoint=None)." in html
    assert "Burned-in text was NOT searched for or removed (keep_burned_in_text=True)" in html
    report = run_audit([inputs], model, out_dir=tmp_path / "kept", settings=ExplainSettings(method="center"),
                       options=AuditOptions(keep_burned_in_text=True, keep_ids=True, allow_recognizable_features=True))
    html = (tmp_path / "kept" / "report.html").read_text()
    assert "Identifiers are included (keep_ids=True): this report is NOT de-identified." in html
    assert "are included (allow_recognizable_features=True): their pixels can identify patients." in html
    for out in ("out", "kept"):
        texts = [(tmp_path / out / name).read_text() for name in ("report.html", "report.csv", "report.json")]
        assert not any(re.search(r"--(keep|allow|trust|pretrained|checkpoint)", text) for text in texts)


def test_a_file_named_like_a_word_of_its_reason_leaves_the_reason_readable(tmp_path):
    """Files named face.dcm, PixelData and image: their reasons read "a face photograph", "no PixelData", "an image
    format" (they read "a <file> photograph", "no <file>", "an <file> format")."""
    from vitroll.io.dicom import NOT_DICOM_OR_IMAGE, recognizable_withheld

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "face.dcm", body_phantom(), RecognizableVisualFeatures="YES")
    write_dicom(inputs / "PixelData", body_phantom(), with_pixels=False)
    (inputs / "image").write_text("not an image")
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), *MODEL)
    reasons = [row["reason"] for row in json.loads((tmp_path / "out" / "report.json").read_text())["cases"]]
    with worded_for_the_command_line():
        withheld = recognizable_withheld()
    assert code == 3 and "<file>" not in stderr
    assert reasons == [
        "This DICOM file (Secondary Capture Image Storage) has no PixelData, so there is no image to explain.",
        withheld, NOT_DICOM_OR_IMAGE]


@pytest.mark.parametrize("message, path, scrubbed", [
    ("cannot identify image file '/data/in/face'", "/data/in/face", "cannot identify image file '<file>'"),
    ("[Errno 13] Permission denied: 'face'", "face", "[Errno 13] Permission denied: '<file>'"),
    ("face: is a directory", "face", "<file>: is a directory"),
    ("a face photograph", "face", "a face photograph"),
    ("DOE_JOHN_0001.dcm holds DOE_JOHN_0001 frames", "in/DOE_JOHN_0001.dcm", "<file> holds <file> frames"),
    ("pylibjpeg plugin", "in/jpeg.dcm", "pylibjpeg plugin"),
])
def test_scrub_replaces_a_file_named_in_a_message_and_not_a_word_of_the_sentence(message, path, scrubbed):
    from vitroll.audit.pipeline import _scrub

    assert _scrub(message, Path(path)) == scrubbed


def test_salt_makes_keys_reproducible_and_the_default_salt_random(tmp_path, audited, checkpoint):
    inputs = audited["inputs"]
    cases = []
    for run, salt in enumerate(("pepper", "pepper", None)):
        out = tmp_path / str(run)
        code, _, _ = run_cli("audit", str(inputs / "cine.dcm"), "--out", str(out), "--checkpoint", str(checkpoint[0]),
                             *(["--salt", salt] if salt else []), *MODEL)
        assert code == 0
        cases.append([row["case"] for row in json.loads((out / "report.json").read_text())["cases"]])
    assert cases[0] == cases[1] != cases[2]
    assert cases[0][0] not in {row["case"] for row in audited["json"]["cases"]}


def test_keys_survive_a_move_of_the_folder_and_two_folders_alike_keep_distinct_cases(tmp_path, checkpoint):
    """Keys hash the path relative to the folder given: a copy elsewhere keeps them; the same layout given twice in
    one run gives each file its own case and overlay."""
    import shutil

    first = tmp_path / "in"
    (first / "sub").mkdir(parents=True)
    write_dicom(first / "sub" / "cine.dcm", np.stack([body_phantom(), body_phantom(marker=False)]), number=1)
    Image.fromarray(body_phantom(dtype=np.uint8, high=255)).save(first / "plain.png")
    moved = shutil.copytree(first, tmp_path / "elsewhere" / "copy")
    keys = {}
    for run, inputs in (("first", [first]), ("moved", [moved]), ("both", [first, moved])):
        code, _, stderr = run_cli("audit", *map(str, inputs), "--out", str(tmp_path / run), "--salt", "s",
                                  "--keep-burned-in-text", *MODEL)
        assert code == 0, stderr
        keys[run] = [(row["case"], row["study"]) for row in
                     sorted(json.loads((tmp_path / run / "report.json").read_text())["cases"],
                            key=lambda row: (row["input"], row["frame"] or 0))]
    assert len(keys["first"]) == 3 and len({case for case, _ in keys["first"]}) == 3  # two frames and the PNG
    assert keys["moved"] == keys["first"]
    assert keys["both"][:3] == keys["first"]
    cases = [case for case, _ in keys["both"]]
    assert len(set(cases)) == 6 and len(list((tmp_path / "both" / "images").glob("*.png"))) == 6
    assert keys["both"][3][1] != keys["first"][0][1]  # the second PNG (plain.png sorts first): no StudyInstanceUID


def test_decoding_workers_give_the_same_report(tmp_path, audited, checkpoint):
    """Decoding in two DataLoader worker processes audits the same cases with the same numbers and errors."""
    reports = []
    for workers in ("0", "2"):
        out = tmp_path / workers
        code, _, _ = run_cli("audit", str(audited["inputs"]), "--out", str(out), "--checkpoint", str(checkpoint[0]),
                             "--salt", "pepper", "--workers", workers, "--batch-size", "3", *MODEL)
        assert code == 3
        cases = json.loads((out / "report.json").read_text())["cases"]
        reports.append({row["case"]: (row["status"], row["reason"], row["outside_body"], row["probability"])
                        for row in cases})
    assert reports[0] == reports[1]
    assert len(reports[0]) == 8 and sum(reason is not None for _, reason, *_ in reports[0].values()) == 3


def test_a_cine_longer_than_a_batch_is_streamed_in_parts_with_the_same_rows(tmp_path):
    """Parts of --batch-size frames give each frame its row, as the whole file does; a cine whose last part is cut
    off gives its first frames' rows and one row for the failure."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    cine = write_dicom(inputs / "cine.dcm", np.stack([body_phantom(marker=bool(i % 2)) for i in range(7)]), number=1)
    (inputs / "cut.dcm").write_bytes(cine.read_bytes()[:-64 * 64 * 2 * 3])  # frames 4, 5, 6 lost
    reports = {}
    for batch in ("2", "16"):
        code, _, _ = run_cli("audit", str(inputs), "--out", str(tmp_path / batch), "--salt", "s", "--batch-size",
                             batch, *MODEL)
        assert code == 3
        reports[batch] = json.loads((tmp_path / batch / "report.json").read_text())["cases"]
    whole = {row["case"]: row for row in reports["16"]}
    parts = {row["case"]: row for row in reports["2"]}
    images = sorted(case for case, row in parts.items() if row["status"] != "error")
    assert len(images) == 7 + 4 and len(parts) == 12 and len(whole) == 8  # cut.dcm whole: one error row
    assert [(row["input"], row["frame"]) for row in sorted(reports["2"], key=lambda row: (row["input"],
                                                                                          row["frame"] or 0))
            if row["status"] != "error"] == [(1, f) for f in range(7)] + [(2, f) for f in range(4)]
    for case in (case for case in images if case in whole):  # float32 sums differ with the batch's make-up
        assert parts[case]["outside_body"] == pytest.approx(whole[case]["outside_body"], abs=5e-3)
    failures = [row for row in reports["2"] if row["status"] == "error"]
    assert [row["input"] for row in failures] == [2]
    assert failures[0]["reason"] == (
        "Frames 4 to 6 of 7 are not audited: this DICOM file (Secondary Capture Image Storage) is cut short: it ends "
        "in the middle of its pixel data, so the image is incomplete and is not shown.")
    assert failures[0]["case"].endswith("-f4-6")


def test_under_frame_k_a_file_that_fails_names_frame_k_not_all(tmp_path):
    """Under --frame 1 a broken file's row said frames "all", though only frame 1 was asked for."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    cine = write_dicom(inputs / "cine.dcm", np.stack([body_phantom(), body_phantom(marker=False)]), number=1)
    (inputs / "cut.dcm").write_bytes(cine.read_bytes()[:-3000])
    code, _, _ = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--frame", "1", "--salt", "s",
                         "--keep-burned-in-text", *MODEL)
    assert code == 3
    with open(tmp_path / "out" / "report.csv", newline="") as table:
        assert [(row["input"], row["status"] == "error", row["frame"], row["frames"])
                for row in csv.DictReader(table)] == [("1", False, "1", ""), ("2", True, "1", "1")]
    html = (tmp_path / "out" / "report.html").read_text()
    assert re.search(r'<td class="key">case-\w+-f1</td><td>1</td><td>This DICOM file', html)


def test_under_frame_k_a_file_that_fails_has_the_case_suffix_of_frame_k_as_an_audited_one(tmp_path):
    """Under --frame 1 the audited file's case ended in -f1, the failing file's in its bare key."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    cine = write_dicom(inputs / "cine.dcm", np.stack([body_phantom(), body_phantom(marker=False)]), number=1)
    (inputs / "cut.dcm").write_bytes(cine.read_bytes()[:-3000])
    run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--frame", "1", "--salt", "s",
            "--keep-burned-in-text", *MODEL)
    cases = [row["case"] for row in json.loads((tmp_path / "out" / "report.json").read_text())["cases"]]
    assert len(cases) == 2 and all(re.fullmatch(r"case-[0-9a-f]{10}-f1", case) for case in cases), cases


def test_a_file_that_vanishes_mid_run_is_a_row_of_the_frames_it_left(tmp_path, monkeypatch):
    """A cine removed after its first part was read: its other frames were one row of the whole file ("all"), counted
    as 1 frame not audited (its frame count read again from the file, gone), its reason quoting FileNotFoundError."""
    import vitroll.audit.pipeline as pipeline

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", np.stack([body_phantom()] * 6), number=1)
    write_dicom(inputs / "b.dcm", body_phantom(), number=2)
    audit_frames = pipeline.audit_frames

    def removed_once_read(item, options):
        frames = audit_frames(item, options)
        item.path.unlink()
        return frames

    monkeypatch.setattr(pipeline, "audit_frames", removed_once_read)
    code, stdout, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--batch-size", "2",
                                   "--salt", "s", "--keep-burned-in-text", *MODEL)
    assert code == 3 and "Traceback" not in stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    failed = [(row["input"], row["frames"], row["reason"]) for row in report["cases"] if row["status"] == "error"]
    assert failed == [(1, "2-5", "Frames 2 to 5 of 6 are not audited: the file is gone: removed or moved while the "
                                 "audit ran.")]
    assert sorted((row["input"], row["frame"]) for row in report["cases"] if row["status"] != "error") == [
        (1, 0), (1, 1), (2, 0)]
    assert "3 images from 2 files, 4 frames of 1 file not audited" in stdout


def test_a_file_not_found_by_its_decoder_while_the_file_is_there_is_not_told_as_gone(tmp_path, monkeypatch):
    """Any FileNotFoundError of reading was told "the file is gone: removed or moved while the audit ran", of a file
    still there (a decoder's own missing file, say)."""
    import vitroll.audit.pipeline as pipeline

    def missing_part(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "/opt/codec/tables.bin")

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", body_phantom(), number=1)
    monkeypatch.setattr(pipeline, "read_any", missing_part)
    with pytest.raises(VitrollError, match=r"^Reading failed \(FileNotFoundError: \[Errno 2\] No such file or "
                                           r"directory: '/opt/codec/tables.bin'\)$"):
        pipeline.audit_frames(pipeline.AuditInput(inputs / "a.dcm", 1, "a.dcm"), AuditOptions(salt="s"))
    (inputs / "a.dcm").unlink()
    with pytest.raises(VitrollError, match=r"^the file is gone: removed or moved while the audit ran$"):
        pipeline.audit_frames(pipeline.AuditInput(inputs / "a.dcm", 1, "a.dcm"), AuditOptions(salt="s"))


def test_a_decoders_own_missing_file_is_no_file_system_refusal_of_the_input(tmp_path, monkeypatch):
    """Read through read_any itself (the test above replaces it): a FileNotFoundError of another file, raised while
    the pixel data is decoded, was worded "This file cannot be opened (No such file or directory)." of an input that
    is there and readable, the missing file left unnamed; only an error naming the input (or no file) is its own."""
    import errno

    import vitroll.audit.pipeline as pipeline
    import vitroll.io.dicom.reading as reading

    def missing_part(*args, **kwargs):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/opt/codec/tables.bin")

    path = tmp_path / "a.dcm"
    write_dicom(path, body_phantom(), number=1)
    monkeypatch.setattr(reading, "_rgb_frames", missing_part)
    with pytest.raises(VitrollError) as failed:
        pipeline.audit_frames(pipeline.AuditInput(path, 1, "a.dcm"), AuditOptions(salt="s"))
    assert str(failed.value).startswith("The pixel data cannot be decoded: transfer syntax Explicit VR Little Endian "
                                        "(UID 1.2.840.10008.1.2.1); pydicom said: [Errno 2] No such file or "
                                        "directory: '/opt/codec/tables.bin'; ")


def test_a_file_with_recognizable_features_is_refused_by_type_and_reworded_for_the_audit_by_type(tmp_path,
                                                                                                 monkeypatch):
    """read_dicom's refusal is a RecognizableFeaturesError naming its argument; the audit words it with its own option
    by that type. It compared the message's text with read_dicom's, so a refusal worded otherwise (for the command
    line, here) was passed on naming read_dicom's argument, or a flag, to a Python caller."""
    import vitroll.audit.pipeline as pipeline
    from vitroll.errors import ImageReadError, RecognizableFeaturesError
    from vitroll.io.dicom import read_dicom, recognizable_withheld

    write_dicom(tmp_path / "face.dcm", body_phantom(), RecognizableVisualFeatures="YES")
    with pytest.raises(RecognizableFeaturesError) as refused:
        read_dicom(tmp_path / "face.dcm")
    assert isinstance(refused.value, ImageReadError) and refused.value.allowed_by == "allow_recognizable"
    assert refused.value.reason.endswith("so it is neither explained nor drawn; allow_recognizable=True audits it.")

    def refused_for_the_command_line(path, **kwargs):
        with worded_for_the_command_line():
            raise RecognizableFeaturesError(path, recognizable_withheld(), "allow_recognizable")

    monkeypatch.setattr(pipeline, "read_any", refused_for_the_command_line)
    with pytest.raises(VitrollError) as reworded:
        pipeline.audit_frames(pipeline.AuditInput(tmp_path / "face.dcm", 1, "face.dcm"), AuditOptions(salt="s"))
    assert str(reworded.value) == recognizable_withheld("allow_recognizable_features")
    assert str(reworded.value).endswith("neither explained nor drawn; allow_recognizable_features=True audits it.")


def test_a_link_to_a_missing_file_is_a_row_saying_so(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", body_phantom(), number=1)
    (inputs / "b.dcm").symlink_to(tmp_path / "moved.dcm")
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--salt", "s",
                              "--keep-burned-in-text", *MODEL)
    assert code == 3 and "Traceback" not in stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(row["input"], row["reason"]) for row in report["cases"] if row["status"] == "error"] == [
        (2, "The file is a link to a file that is not there.")]


def test_a_file_that_vanishes_then_a_second_ctrl_c_leaves_a_row_of_its_frames_not_read(tmp_path, monkeypatch):
    """A cine removed after its first part was read, then Ctrl-C twice while its frames were measured: the rows of
    what was left read its frame count again from the file, gone (1), so its frames not read had no row at all."""
    import vitroll.audit.pipeline as pipeline

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", np.stack([body_phantom()] * 6), number=1)
    audit_frames = pipeline.audit_frames

    def removed_once_read(item, options):
        frames = audit_frames(item, options)
        item.path.unlink(missing_ok=True)
        return frames

    monkeypatch.setattr(pipeline, "audit_frames", removed_once_read)
    monkeypatch.setattr(pipeline, "_measure", pressing_ctrl_c(pipeline._measure, on_calls=(1, 2)))
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--batch-size", "2",
                              "--salt", "s", "--keep-burned-in-text", *MODEL)
    assert code == 130 and "Traceback" not in stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [(row["frame"], AUDITED.get(row["status"], row["status"]), row["frames"], row["reason"])
            for row in report["cases"]] == [
        (0, "ok", None, None),
        (None, "interrupted", "1-5", "Frames 1 to 5 of 6 are not audited: interrupted (Ctrl-C).")]


@pytest.mark.parametrize("deflated", [False, True])
def test_a_header_claiming_more_frames_than_its_pixel_data_holds_is_one_row_at_once(tmp_path, deflated):
    """CT_small.dcm saying NumberOfFrames 20000 over one frame's pixel data: 1250 parts of 16 frames, each reading
    the header again to be refused (about 50 s), for one row. Its length is now checked when the input list is made:
    one input, one row, whose reason counts the frames the data holds; so too deflated (Deflated Explicit VR Little
    Endian), whose pixel data's length is that of the inflated data set."""
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.uid import DeflatedExplicitVRLittleEndian

    from vitroll.audit.pipeline import audit_inputs
    from vitroll.io.discovery import given_found_files

    inputs = tmp_path / "in"
    inputs.mkdir()
    dataset = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    dataset.NumberOfFrames = 20000
    if deflated:
        dataset.file_meta.TransferSyntaxUID = DeflatedExplicitVRLittleEndian
    dataset.save_as(inputs / "claims.dcm", enforce_file_format=deflated)
    assert pydicom.dcmread(inputs / "claims.dcm").file_meta.TransferSyntaxUID.is_deflated == deflated
    assert not deflated or (inputs / "claims.dcm").stat().st_size < 32768  # its 32768 bytes of pixels deflated
    (item,) = audit_inputs(given_found_files([inputs], exclude=tmp_path / "out"), AuditOptions(batch_size=16))
    assert (item.frames, item.count) == (None, 20000)
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--batch-size", "16",
                              "--keep-burned-in-text", *MODEL)
    (row,) = json.loads((tmp_path / "out" / "report.json").read_text())["cases"]
    assert code == 3 and (row["status"], row["frames"]) == ("error", "all") and "Traceback" not in stderr
    assert row["reason"] == (
        "This DICOM file's header does not fit its pixel data: Rows 128, Columns 128, SamplesPerPixel 1 and "
        "BitsAllocated 16 over 20000 frames make 655360000 bytes, but its pixel data holds 32768 (1 frame of the "
        "20000 its header counts), so the image would be drawn wrong and is not shown.")


def test_parts_of_a_cine_that_fail_otherwise_each_have_a_row_naming_their_frames(tmp_path):
    """rtdose_rle.dcm (15 frames) with frame 3 and frame 11 of fewer RLE segments than its header's 32 bits need
    (each refused, naming it), in parts of 4 frames: the part of frame 3 failed with a row that named neither the
    frames it left out nor that frames 4 to 7 were audited, the summary said the file was not audited, and the part
    of frame 11, which failed otherwise, was left out without a word."""
    (tmp_path / "in").mkdir()
    patched_testdata(tmp_path / "in" / "dose.dcm", "rtdose_rle.dcm", 15,
                                 {3: lambda frame: rle_segments(frame, 3), 11: lambda frame: rle_segments(frame, 2)})
    code, stdout, stderr = run_cli("audit", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--salt", "s",
                                   "--batch-size", "4", *MODEL)
    assert code == 3
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    rows = report["cases"]
    assert sorted(row["frame"] for row in rows if row["status"] != "error") == [4, 5, 6, 7, 12, 13, 14]
    assert len({row["study"] for row in rows}) == 1  # its frames not audited too (they had a key of the file's name)
    failures = {row["case"].rsplit("-", 2)[-2:][0]: row["reason"] for row in rows if row["status"] == "error"}
    header = ("this DICOM file's header does not fit its pixel data: Rows 10, Columns 10, SamplesPerPixel 1 and "
              "BitsAllocated 32, but frame {}'s RLE data has {} segments (one per sample and byte of a sample), the "
              "first decoding to 100 bytes (Rows × Columns), so the image would be drawn wrong and is not shown.")
    assert failures == {"f0": "Frames 0 to 3 of 15 are not audited: " + header.format(3, 3),
                        "f8": "Frames 8 to 11 of 15 are not audited: " + header.format(11, 2)}
    assert stderr.count("vitroll: not audited:") == 2
    # every count says what it counts: 1 file partly audited, 8 of its frames in 2 rows (it said "2 not audited" in
    # the terminal and "Files not audited (2)" in the HTML, counting rows as files)
    assert report["summary"][0]["text"] == (
        "The audit covers 7 images from 1 file in 1 study; 8 frames of 1 file were not audited (listed by number in "
        "the input list, with the reasons).")
    assert "7 images from 1 file, 8 frames of 1 file not audited -> " in stdout
    assert "<h2>Not audited (8 frames of 1 file)</h2>" in (tmp_path / "out" / "report.html").read_text()
    assert report["counts"] == {"files": 1, "files_audited": 0, "files_partly_audited": 1, "files_not_audited": 0,
                                "images": 7, "frames_not_audited_in_partly_audited_files": 8, "rows_not_audited": 2,
                                "files_interrupted": 0}
    with open(tmp_path / "out" / "report.csv", newline="") as table:
        assert sorted(row["frames"] for row in csv.DictReader(table) if row["status"] == "error") == ["0-3", "8-11"]


def test_counts_of_files_and_frames_not_audited_are_kept_apart():
    """File 1 gave no image; file 2 gave 2 images, and 3 frames in 2 rows none (a run of parts, a frame whose overlay
    could not be written); file 3 was audited whole."""
    images = [AuditRow(case=f"c2-f{frame}", study="s", input_number=2, frame=frame) for frame in (0, 3)]
    images.append(AuditRow(case="c3", study="s", input_number=3))
    errors = [AuditRow(case="c1", study="t", input_number=1, error="Unreadable."),
              AuditRow(case="c2-f1", study="s", input_number=2, frame=1, error="Its overlay cannot be written."),
              AuditRow(case="c2-f4-5", study="s", input_number=2, frames=range(4, 6), error="Frames 4 to 5 of 6.")]
    report = AuditReport(rows=images + errors, options=AuditOptions(), settings=ExplainSettings(), files=3)
    assert report.coverage.not_audited() == "1 file and 3 frames of 1 other file"
    assert report.sentences()[0].text.startswith(
        "The audit covers 3 images from 3 files in 1 study; 1 file and 3 frames of 1 other file were not audited")
    assert json.loads(report.to_json())["counts"] == {
        "files": 3, "files_audited": 1, "files_partly_audited": 1, "files_not_audited": 1, "images": 3,
        "frames_not_audited_in_partly_audited_files": 3, "rows_not_audited": 3, "files_interrupted": 0}
    assert [record["frames"] for record in report.records()] == [None] * 3 + ["all", "1", "4-5"]
    one = AuditReport(rows=[images[0], errors[1]], options=AuditOptions(), settings=ExplainSettings(), files=1)
    assert "; 1 frame of 1 file was not audited (" in one.sentences()[0].text


# --- (c) unreadable files are rows ------------------------------------------------------------------------------------

def test_unreadable_files_become_rows_with_reasons(audited):
    """Each unreadable file is labelled by its number in the input list sorted as the report says (code points)."""
    rows = audited["json"]["cases"]
    names = sorted(path.name for path in audited["inputs"].iterdir())
    reasons = {names[row["input"] - 1]: row["reason"] for row in rows if row["status"] == "error"}
    assert sorted(reasons) == ["Grandvale_corrupt.dcm", "jpeg.dcm", "nopixels.dcm"]
    assert reasons["Grandvale_corrupt.dcm"] == (
        "This DICOM file (Secondary Capture Image Storage) is cut short: it ends in the middle of its pixel data, "
        "so the image is incomplete and is not shown.")
    assert reasons["nopixels.dcm"] == ("This DICOM file (Secondary Capture Image Storage) has no PixelData, so there "
                                       "is no image to explain.")
    assert reasons["jpeg.dcm"].startswith("The compressed pixel data cannot be decoded: each decoder installed for its "
                                          "transfer syntax, JPEG Baseline (Process 1) (UID 1.2.840.10008.1.2.4.50), "
                                          "failed (gdcm: ")
    assert all(reason.endswith(".") and "\n" not in reason for reason in reasons.values())
    images = [row for row in rows if row["status"] != "error"]
    assert len(images) == 5 and {names[row["input"] - 1] for row in images} == set(names) - set(reasons)
    for number, reason in ((names.index(name) + 1, reason) for name, reason in reasons.items()):
        assert f"vitroll: not audited: file {number} (case-" in audited["stderr"]
    assert audited["stderr"].count("vitroll: not audited:") == 3
    assert "3 files were not audited" in audited["json"]["summary"][0]["text"]
    assert audited["json"]["settings"]["input_order"].startswith("Files are numbered from 1 in this order")


def test_measured_rows_carry_groups_metrics_and_predictions(audited):
    data = audited["json"]
    images = [row for row in data["cases"] if row["status"] != "error"]
    cine = [row for row in images if row["ManufacturerModelName"] == "Other CT"]
    assert sorted(row["frame"] for row in cine) == [0, 1]
    assert {row["age-band"] for row in cine} == {"70-79"} and {row["BurnedInAnnotation"] for row in cine} == {"YES"}
    assert all(row["prediction"] in {"normal", "effusion", "nodule"} for row in images)
    assert all(0.0 <= row["outside_body"] <= 1.0 and 0.0 <= row["border"] <= 1.0 for row in images)
    # the factory writes Secondary Capture files; the phantoms carry no text
    assert {(row["text_check"], row["text_regions_filled"]) for row in images} == {("secondary capture: always checked",
                                                                                    0)}
    assert data["settings"]["keep_burned_in_text"] is False
    assert data["settings"]["group_by"] == ["Manufacturer", "ManufacturerModelName", "PatientSex", "age-band"]
    assert sum(group["count"] for group in data["groups"]) == 5
    assert {tuple(g["group"].values()) for g in data["groups"]} == {
        ("Acme Imaging", "Scanner 3000", "F", "40-49"), ("Acme Imaging", "Other CT", "M", "70-79")}


# --- (e) the HTML ---------------------------------------------------------------------------------------------------

class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if "id" in attrs:
            self.ids.add(attrs["id"])

    def handle_data(self, data):
        self.text.append(data)


def test_html_report_parses_with_table_summary_and_images(audited):
    parser = Collector()
    parser.feed((audited["out"] / "report.html").read_text(encoding="utf-8"))
    parser.close()
    text = " ".join(" ".join(parser.text).split())
    assert {"summary", "cases", "groups", "errors", "case-table", "group-table", "error-table"} <= parser.ids
    images = [attrs for tag, attrs in parser.tags if tag == "img"]
    assert len(images) == 6 and all(a["src"].startswith("data:image/png;base64,") for a in images)
    assert any(tag == "script" for tag, _ in parser.tags) and any(tag == "table" for tag, _ in parser.tags)
    for sentence in audited["json"]["summary"]:
        assert sentence["text"] in text
    assert ("The audit covers 5 images from 7 files in 1 study; 3 files were not audited (listed by number in the "
            "input list, with the reasons).") in text
    assert "Not audited (3 files)" in text and "could not be read" not in text
    links = [attrs["href"][1:] for tag, attrs in parser.tags if tag == "a" and attrs.get("href", "").startswith("#")]
    assert links and set(links) <= parser.ids  # every summary link lands on a case or a section
    rows = [attrs for tag, attrs in parser.tags if tag == "tr" and attrs.get("id", "").startswith("case-")]
    assert len(rows) == 8


def test_each_image_of_the_html_report_gives_its_file_number(audited):
    """The case key is a hash with a salt kept nowhere: the file number is what leads from a flagged image back to its
    file (the images table had no such column; only the CSV and JSON carried it)."""
    html = (audited["out"] / "report.html").read_text(encoding="utf-8")
    table = html[html.index('id="case-table"'):html.index("</table>", html.index('id="case-table"'))]
    assert "<th>file number</th><th>case</th>" in table
    shown = re.findall(r'<td class="num" data-v="[0-9.]+">(\d+)</td><td class="key">(case-[0-9a-f-]+)</td>', table)
    expected = [(str(row["input"]), row["case"]) for row in audited["json"]["cases"] if row["status"] != "error"]
    assert sorted(shown) == sorted(expected) and sorted(int(number) for number, _ in shown) == [2, 3, 4, 4, 5]


def test_every_value_in_the_html_report_is_escaped():
    from vitroll.audit.report import AuditReport, render_html

    hostile = '<script>alert("x")</script> & \'q\''
    rows = [AuditRow(case="case-0", study="s", input_number=1, metadata={"ManufacturerModelName": hostile},
                     metrics={"outside_body": 0.2, "border": 0.0, "annotation": 0.0}, not_measured={"border": hostile},
                     prediction=hostile, text_check=hostile, text_regions=0),
            AuditRow(case="case-bad", study="s", input_number=2, error=hostile)]
    report = AuditReport(rows=rows, options=AuditOptions(salt="x"), settings=ExplainSettings(), files=2,
                         provenance=ModelProvenance(hostile, "checkpoint", hostile))
    parser = Collector()
    parser.feed(render_html(report))
    parser.close()
    assert [tag for tag, _ in parser.tags].count("script") == 1  # the table sorter, nothing injected
    # group cell, scanner cell, prediction, text check, error reason, model, weights; the hover title of "not measured"
    assert "".join(parser.text).count(hostile) == 7
    assert [attrs["title"] for tag, attrs in parser.tags if attrs.get("class") == "not-measured"] == [hostile]
    assert "None" not in "".join(parser.text)  # an absent value is an empty cell


def test_long_unbroken_values_wrap_and_the_wide_table_scrolls_in_its_box_in_a_real_browser(tmp_path):
    from browser import browser_page
    from vitroll.audit.report import AuditReport, render_html

    scanner, model = "SCANNER_" * 40, "hf-hub:" + "organisation/model-name-" * 12
    rows = [AuditRow(case=f"case-{index:010x}", study="s", input_number=index + 1,
                     metadata={"ManufacturerModelName": scanner if index == 0 else "CT"},
                     metrics={"outside_body": 0.2, "border": 0.0, "annotation": 0.0}, prediction="class_" * 40,
                     text_check="searched_" * 30 if index == 0 else "searched", text_regions=0) for index in range(40)]
    rows.append(AuditRow(case="case-bad", study="s", input_number=41, error="cannot_decode_" * 30))
    report = AuditReport(rows=rows, options=AuditOptions(salt="x", group_by=("ManufacturerModelName",)),
                         settings=ExplainSettings(), files=41, provenance=ModelProvenance(model, "checkpoint", model))
    (tmp_path / "report.html").write_text(render_html(report), encoding="utf-8")
    with browser_page((tmp_path / "report.html").as_uri(), {"width": 1200, "height": 900}) as (page, errors):
        # the page scrolled sideways by 1,100 pixels: the long values and the 22 columns of the case table
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        wide = page.eval_on_selector_all("td, th, p",
                                         """cells => cells.filter(cell => cell.scrollWidth > cell.clientWidth)
                                                          .map(cell => cell.textContent.slice(0, 30))""")
        assert wide == []
        reason = page.eval_on_selector("#error-table td:last-child", "cell => cell.getClientRects()[0].height")
        assert reason > 40  # "cannot_decode_" × 30 wrapped onto several lines
        lines = page.eval_on_selector_all("#case-table td.key, #error-table td.key", """cells => cells.map(cell => {
            const text = document.createRange(); text.selectNodeContents(cell);
            return text.getClientRects().length; })""")
        assert len(lines) == 2 * 40 + 1 and set(lines) <= {0, 1}  # case keys and FLAGGED were broken over 3-4 lines
        box = page.query_selector("#case-box")
        assert box.evaluate("box => box.scrollWidth > box.clientWidth")  # the case table scrolls inside its box
        box.evaluate("box => { box.scrollTop = 400; }")
        assert box.evaluate("""box => Math.abs(box.querySelector("th").getBoundingClientRect().top
                                               - box.getBoundingClientRect().top) < 2""")  # its header stays on top
        assert not errors

# --- (d) an off-anatomy shortcut is flagged ---------------------------------------------------------------------------

def _fixed_map(cells: tuple[slice, slice]):
    def compute(model, images, **options):
        maps = torch.zeros(images.shape[0], 4, 4)
        maps[:, cells[0], cells[1]] = 1.0
        return Saliency(maps=maps, logits=None)
    return compute


@pytest.fixture
def shortcut_methods(monkeypatch):
    monkeypatch.setitem(METHODS, "corner", Method("corner", _fixed_map((slice(0, 1), slice(0, 1)))))  # on the marker
    monkeypatch.setitem(METHODS, "centre", Method("centre", _fixed_map((slice(1, 3), slice(1, 3)))))  # on the body


def test_off_anatomy_shortcut_is_flagged_and_named(tmp_path, shortcut_methods):
    import timm

    inputs = tmp_path / "in"
    inputs.mkdir()
    for number, scanner in enumerate(["Scanner 3000"] * 3 + ["Other CT"], start=1):
        write_dicom(inputs / f"{number}.dcm", body_phantom(), number=number, ManufacturerModelName=scanner)
    model = timm.create_model("test_vit", img_size=64, num_classes=3).eval()
    from vitroll.preprocess import Preprocessing

    pre = Preprocessing.from_model(model, crop_pct=1.0, crop_mode="squash")
    rows = {}
    for method in ("corner", "centre"):
        report = run_audit([inputs], model, out_dir=tmp_path / method, settings=ExplainSettings(method=method),
                           options=AuditOptions(salt="x"), preprocessing=pre)
        rows[method] = report
    corner, centre = rows["corner"], rows["centre"]
    assert all(row.flagged and row.metrics["outside_body"] > 0.7 for row in corner.images)
    assert all(row.metrics["annotation"] > 0 and row.metrics["border"] > 0.2 for row in corner.images)
    assert not any(row.flagged for row in centre.images)
    assert all(row.metrics["outside_body"] < 0.3 and row.metrics["annotation"] == 0 for row in centre.images)
    said = [s.text for s in corner.sentences()]
    assert ("In 4 of 4 images (100 %) more than half of the saliency lies outside the body; 3 of them come from one "
            "scanner model (Scanner 3000), which supplied 3 of all 4 images.") in said
    assert any("burned-in annotations" in s for s in said)
    assert any("In none of the 4 images does more than half" in s for s in (x.text for x in centre.sentences()))
    assert corner.provenance == ModelProvenance("test_vit", "not stated", "not stated by the caller")
    assert 'id="unstated-weights"' in (tmp_path / "corner" / "report.html").read_text()
    flagged_sentence = next(s for s in corner.sentences() if "outside the body" in s.text)
    assert sorted(flagged_sentence.cases) == sorted(row.case for row in corner.images)


def test_roi_from_boxes_and_masks(tmp_path, shortcut_methods):
    import timm

    from vitroll.preprocess import Preprocessing

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("boxed", "masked"):
        write_dicom(inputs / f"{name}.dcm", body_phantom())
    (tmp_path / "boxes.csv").write_text("file,x0,y0,x1,y1\nboxed.dcm,0,0,16,16\n")
    (tmp_path / "masks").mkdir()
    centre = np.zeros((32, 32), np.uint8)  # resized onto the 64 px image
    centre[12:20, 12:20] = 255
    Image.fromarray(centre).save(tmp_path / "masks" / "masked.png")
    model = timm.create_model("test_vit", img_size=64, num_classes=3).eval()
    options = AuditOptions(masks=MaskSource(tmp_path / "masks", tmp_path / "boxes.csv"), salt="x")
    report = run_audit([inputs], model, out_dir=tmp_path / "out", settings=ExplainSettings(method="corner"),
                       options=options, preprocessing=Preprocessing.from_model(model, crop_pct=1.0, crop_mode="squash"))
    by_hit = sorted(report.images, key=lambda row: row.metrics["pointing_hit"])
    assert [row.metrics["pointing_hit"] for row in by_hit] == [0.0, 1.0]
    assert by_hit[1].metrics["roi_energy"] > 0.4 > by_hit[0].metrics["roi_energy"]
    assert by_hit[1].metrics["topk_iou"] > by_hit[0].metrics["topk_iou"]
    assert any("region of interest" in s.text for s in report.sentences())
    assert "topk_iou" in (tmp_path / "out" / "report.csv").read_text().splitlines()[0]


def test_a_rerun_into_the_same_folder_leaves_only_the_overlays_its_report_shows(tmp_path):
    """A first audit with its burned-in text kept, a second (another salt: other case keys) into the same folder: the
    first run's overlays stayed in OUT/images beside a report that says the folder is de-identified."""
    (tmp_path / "in").mkdir()
    write_dicom(tmp_path / "in" / "a.dcm", body_phantom(), number=1)
    out = tmp_path / "out"
    assert run_cli("audit", str(tmp_path / "in"), "--out", str(out), "--salt", "a", "--keep-burned-in-text",
                   *MODEL)[0] == 0
    (out / "images" / "mine.txt").write_text("not the audit's")
    assert run_cli("audit", str(tmp_path / "in"), "--out", str(out), "--salt", "b", *MODEL)[0] == 0
    shown = [row["overlay"] for row in json.loads((out / "report.json").read_text())["cases"]]
    assert sorted(f"images/{path.name}" for path in (out / "images").iterdir()) == sorted([*shown, "images/mine.txt"])


def test_a_second_audit_into_a_folder_being_written_is_refused(tmp_path):
    """Two audits into one --out wrote over each other, and the first to end removed the other's overlays."""
    import os
    import socket

    (tmp_path / "in").mkdir()
    write_dicom(tmp_path / "in" / "a.dcm", body_phantom(), number=1)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".vitroll.lock").write_text(f"{os.getpid()} {socket.gethostname()}\n")  # a live run's
    code, stdout, stderr = run_cli("audit", str(tmp_path / "in"), "--out", str(tmp_path / "out"),
                                   "--keep-burned-in-text", *MODEL)
    assert code != 0 and stdout == ""
    assert [line for line in stderr.splitlines() if line.startswith("vitroll: error:")] == [
        f"vitroll: error: {tmp_path / 'out'}: another vitroll run (pid {os.getpid()}) is writing here; wait for it, "
        f"or remove {tmp_path / 'out' / '.vitroll.lock'} if it is gone"]
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [".vitroll.lock"]


def test_the_output_folder_is_made_once_before_the_work(tmp_path, monkeypatch):
    """run_audit made OUT, then its output lock made it again."""
    import vitroll.audit.pipeline as pipeline

    (tmp_path / "in").mkdir()
    write_dicom(tmp_path / "in" / "a.dcm", body_phantom(), number=1)
    out, made, make_folder = tmp_path / "out", [], Path.mkdir

    def counted(path: Path, *args, **kwargs) -> None:
        made.append(path)
        make_folder(path, *args, **kwargs)

    def work(*args, **kwargs):
        assert out.is_dir() and made.count(out) == 1, made  # made, once, before the work
        yield from ()

    monkeypatch.setattr(Path, "mkdir", counted)
    monkeypatch.setattr(pipeline, "audit_items", work)
    assert run_cli("audit", str(tmp_path / "in"), "--out", str(out), "--keep-burned-in-text", *MODEL)[0] == 0


def test_an_output_folder_that_cannot_be_made_is_one_error_naming_it_as_other_commands_do(tmp_path):
    """run_audit made OUT itself, so that a file system's refusal (here: a file where a folder of its path should be;
    a read-only parent alike, which --out's own check lets through) reached a Python caller as a NotADirectoryError,
    and the command line as "vitroll: error: OUT: Permission denied"; the output lock of every command words it."""
    (tmp_path / "in").mkdir()
    write_dicom(tmp_path / "in" / "a.dcm", body_phantom(), number=1)
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"
    with pytest.raises(VitrollError, match=r"^cannot make the output folder .* \(Not a directory\)$"):
        run_audit([tmp_path / "in"], None, out_dir=out, settings=ExplainSettings(),
                  options=AuditOptions(keep_burned_in_text=True))


def test_an_input_folder_that_is_the_output_folder_is_told_so_not_as_empty(tmp_path):
    """`vitroll audit dicoms --out dicoms` said "no DICOM or image files found" of a folder full of them."""
    write_dicom(tmp_path / "a.dcm", body_phantom(), number=1)
    code, _, stderr = run_cli("audit", str(tmp_path), "--out", str(tmp_path), "--keep-burned-in-text", *MODEL)
    assert code == 2 and stderr.splitlines()[-1] == (
        f"vitroll: error: {tmp_path}: is the output folder, whose files are never inputs (they would be outputs); "
        "choose another --out")
    (tmp_path / "empty").mkdir()
    (tmp_path / "out").mkdir()
    code, _, stderr = run_cli("audit", str(tmp_path / "empty"), str(tmp_path / "out"), "--out", str(tmp_path / "out"),
                              "--keep-burned-in-text", *MODEL)
    assert code == 2 and stderr.splitlines()[-1] == (  # was said of "{tmp_path}/empty, {tmp_path}/out" together
        f"vitroll: error: {tmp_path / 'out'}: is the output folder, whose files are never inputs (they would be "
        "outputs); choose another --out")


def test_an_images_file_in_the_output_folder_stops_the_audit_before_its_work(tmp_path):
    """OUT/images a file: every image was a row "Its overlay cannot be written into the report folder (File exists)"."""
    (tmp_path / "in").mkdir()
    write_dicom(tmp_path / "in" / "a.dcm", body_phantom(), number=1)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "images").write_text("mine")
    code, _, stderr = run_cli("audit", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--keep-burned-in-text",
                              *MODEL)
    assert code == 2 and stderr.splitlines()[-1] == (
        f"vitroll: error: {tmp_path / 'out' / 'images'} is a file, not a folder: the audit writes its overlays there; "
        "move it, or write the audit into another folder")
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["images"]


def test_a_rerun_into_an_output_folder_inside_the_input_folder_audits_the_inputs_alone(tmp_path, checkpoint):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", body_phantom(), number=1)
    out = inputs / "audit"
    for _ in range(2):
        code, stdout, _ = run_cli("audit", str(inputs), str(inputs / "a.dcm"), "--out", str(out), "--checkpoint",
                                  str(checkpoint[0]), "--class-names", str(checkpoint[1]), *MODEL)
        assert code == 0
        assert "1 image from 1 file, 0 files not audited" in stdout  # neither its own overlays nor a.dcm twice
    assert len(json.loads((out / "report.json").read_text())["cases"]) == 1


AUDITED = {"flagged": "ok"}
"""A measured image's status, flagged or not (the test model's weights are random)."""


def write_five_patients(inputs: Path) -> list[str]:
    """Five single-frame DICOMs whose names carry identifiers, and a cut one: their names in input order."""
    inputs.mkdir()
    names = [f"{number}_{FAKE_IDS['PatientID']}_{FAKE_IDS['StudyDate']}.dcm" for number in range(1, 6)]
    for number, name in enumerate(names, 1):
        write_dicom(inputs / name, body_phantom(), number=number)
    (inputs / "6_Zyxwuvt_cut.dcm").write_bytes((inputs / names[0]).read_bytes()[:-3000])
    return [*names, "6_Zyxwuvt_cut.dcm"]


def test_ctrl_c_finishes_the_file_in_flight_and_reports_every_file_not_reached(tmp_path, monkeypatch):
    """Ctrl-C printed "vitroll: interrupted" and left some overlays and no report: the work done was lost."""
    import signal

    import vitroll.audit.pipeline as pipeline

    names = write_five_patients(tmp_path / "in")
    monkeypatch.setattr(pipeline, "_measure", pressing_ctrl_c(pipeline._measure, on_calls=(2,)))
    out = tmp_path / "out"
    code, stdout, stderr = run_cli("audit", str(tmp_path / "in"), "--out", str(out), "--batch-size", "4",
                                   "--salt", "s", "--keep-burned-in-text", *MODEL)
    assert code == 130 and "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if line.startswith("vitroll: interrupted")] == [
        "vitroll: interrupted: finishing the file in flight, then writing the report of what was audited "
        "(Ctrl-C again to stop at once)",
        'vitroll: interrupted: not audited: files 3 to 6 (the report lists them as "interrupted"); rerun the audit '
        "to cover them"]
    assert stdout.splitlines()[-1] == f"2 images from 6 files, 4 files not audited -> {out}/report.html (.csv, .json)"
    report = json.loads((out / "report.json").read_text())
    assert [(row["input"], AUDITED.get(row["status"], row["status"]), row["frames"], row["reason"])
            for row in report["cases"]] == [
        (1, "ok", None, None), (2, "ok", None, None),
        *[(number, "interrupted", "all", "Not audited: interrupted (Ctrl-C).") for number in range(3, 7)]]
    assert report["counts"] == {"files": 6, "files_audited": 2, "files_partly_audited": 0, "files_not_audited": 4,
                                "images": 2, "frames_not_audited_in_partly_audited_files": 0, "rows_not_audited": 4,
                                "files_interrupted": 4}
    assert report["summary"][1]["text"] == ("The audit was interrupted (Ctrl-C) before it reached files 3 to 6: "
                                            'listed as not audited, with the reason "interrupted".')
    with open(out / "report.csv", newline="") as table:
        assert [AUDITED.get(row["status"], row["status"]) for row in csv.DictReader(table)] == [
            "ok"] * 2 + ["interrupted"] * 4
    # the third file's overlay, measured before the stop was seen, is not left beside the report
    assert sorted(path.name for path in (out / "images").iterdir()) == sorted(
        Path(row["overlay"]).name for row in report["cases"][:2])
    assert not (out / ".vitroll.lock").exists() and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    needles = [*PHI_STRINGS, str(tmp_path / "in"), *names, *(Path(name).stem for name in names)]
    for path in [*out.rglob("*"), None]:
        text = stdout + stderr if path is None else path.read_bytes().decode("latin-1") if path.is_file() else ""
        assert not [needle for needle in needles if needle in text], path


@pytest.mark.parametrize("command", ["audit", "annotate", "text"])
def test_no_progress_is_one_option_shared_by_the_commands_with_a_bar(command):
    from vitroll.cli import build_parser

    words = {"audit": ["in", "--out", "o"], "annotate": ["in", "--out", "o"], "text": ["t", "--model", "m"]}[command]
    parse = build_parser().parse_args
    assert (parse([command, *words]).no_progress, parse([command, *words, "--no-progress"]).no_progress) == (
        False, True)


def test_audit_shows_a_bar_of_files_done_that_names_no_file_and_none_with_no_progress(tmp_path):
    """`vitroll audit BIG_FOLDER` printed nothing until the end: nobody could tell it was working or how long was
    left."""
    inputs = write_inputs(tmp_path / "in")  # 7 files: a cine of 2 frames streamed one frame a batch, 3 unreadable
    names = [path.name for path in inputs.iterdir()]
    argv = ["audit", str(inputs), "--batch-size", "1", "--salt", "s", "--keep-burned-in-text", *MODEL]
    code, _, stderr = run_cli(*argv, "--out", str(tmp_path / "bar"), terminal=True)
    assert code == 3
    counts = re.findall(r"(\d+)/(\d+) \[[^]]*file", stderr)
    assert counts[-1] == ("7", "7") and [int(done) for done, _ in counts] == sorted(int(done) for done, _ in counts)
    needles = {*PHI_STRINGS, str(inputs), *names, *(Path(name).stem for name in names)}
    needles -= {"cine", "hu", "jpeg", "nopixels"}  # neutral file names that are also common words
    assert not [needle for needle in needles if needle in stderr]
    code, _, stderr = run_cli(*argv, "--out", str(tmp_path / "quiet"), "--no-progress")
    assert code == 3 and stderr and all(line.startswith("vitroll: ") for line in stderr.splitlines()), stderr


def test_the_bar_counts_the_frames_done_of_a_multi_frame_file_in_flight(tmp_path):
    """The bar counted files only: on a long cine it stood still for minutes, as if the audit had hung."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", body_phantom(), number=1)
    write_dicom(inputs / "b.dcm", np.stack([body_phantom()] * 5), number=2)
    write_dicom(inputs / "c.dcm", body_phantom(), number=3)
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--batch-size", "2",
                              "--keep-burned-in-text", *MODEL, terminal=True)
    assert code == 0
    shown = re.findall(r"(\d+)/3 \[[^]]*?(?:, file (\d+): (\d+)/(\d+) frames)?\]", stderr)
    assert list(dict.fromkeys(done for _, _, done, _ in shown if done)) == ["1", "2", "3", "4"]  # each shown
    assert {(files, file, total) for files, file, _, total in shown if file} == {("1", "2", "5")}  # file 1 done
    assert shown[-1] == ("3", "", "", "")  # the postfix gone once the cine is done
    assert "b.dcm" not in stderr and "case-" not in stderr


@pytest.mark.parametrize("terminal", [False, True], ids=["no-bar", "bar"])
def test_each_file_header_is_read_once_for_its_frame_count(tmp_path, monkeypatch, terminal):
    """The bar's frame count read every file's header again (about 2 ms a DICOM file), even with no bar shown: the
    run now takes each file's count from the one read that splits it into parts."""
    import vitroll.audit.pipeline as pipeline

    inputs = tmp_path / "in"
    inputs.mkdir()
    for number in (1, 2, 3):
        write_dicom(inputs / f"{number}.dcm", np.stack([body_phantom()] * number), number=number)
    read, header_frames = [], pipeline.header_frames
    monkeypatch.setattr(pipeline, "header_frames", lambda path: read.append(Path(path).name) or header_frames(path))
    argv = ["audit", str(inputs), "--out", str(tmp_path / "out"), "--batch-size", "2", "--keep-burned-in-text", *MODEL]
    code, _, stderr = run_cli(*argv, *([] if terminal else ["--no-progress"]), terminal=terminal)
    assert code == 0 and sorted(read) == ["1.dcm", "2.dcm", "3.dcm"]
    assert ("file 3: 2/3 frames" in stderr) is terminal  # the count told to the bar is the file's


CTRL_C_IN_A_TERMINAL = """import os, signal, sys
import vitroll.audit.pipeline as pipeline
from vitroll.cli import main

measure, calls = pipeline._measure, []


def pressed(*args, **kwargs):  # Ctrl-C as a terminal sends it: to the process group, the decoding workers too
    calls.append(None)
    if len(calls) == 2:
        os.killpg(os.getpgid(0), signal.SIGINT)
    return measure(*args, **kwargs)


pipeline._measure = pressed
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_to_the_process_group_with_decoding_workers_writes_the_report_without_a_traceback(tmp_path):
    import os
    import subprocess
    import sys

    import vitroll

    write_five_patients(tmp_path / "in")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_A_TERMINAL, "audit", str(tmp_path / "in"), "--out", str(out), "--workers",
         "1", "--batch-size", "2", "--salt", "s", "--keep-burned-in-text", *MODEL], capture_output=True, text=True,
        start_new_session=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(vitroll.__file__).parents[1])})
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
    assert 'vitroll: interrupted: not audited: files 3 to 6 (the report lists them as "interrupted")' in done.stderr
    assert [row["status"] for row in json.loads((out / "report.json").read_text())["cases"]][2:] == [
        "interrupted"] * 4
    assert not (out / ".vitroll.lock").exists()


def test_ctrl_c_on_the_last_row_of_a_batch_does_not_wait_for_the_next_batch(tmp_path, monkeypatch):
    """Ctrl-C while the last file of a batch was measured: the next batch was explained (one more batch to wait for,
    minutes with a large model on a CPU) only to learn that that file was done, and its rows were thrown away."""
    import vitroll.audit.pipeline as pipeline
    from vitroll.pipelines import stream

    write_five_patients(tmp_path / "in")
    explained = []
    explain_batch = stream.explain_batch
    monkeypatch.setattr(stream, "explain_batch", lambda *args, **kwargs: explained.append(1) or explain_batch(
        *args, **kwargs))
    monkeypatch.setattr(pipeline, "_measure", pressing_ctrl_c(pipeline._measure, on_calls=(2,)))
    code, _, _ = run_cli("audit", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--batch-size", "2",
                         "--keep-burned-in-text", *MODEL)
    assert code == 130 and len(explained) == 1
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["counts"]["images"] == 2 and report["counts"]["files_interrupted"] == 4


def test_a_second_ctrl_c_leaves_the_file_in_flight_and_a_third_while_the_report_is_written_is_ignored(
        tmp_path, monkeypatch):
    import vitroll.audit.pipeline as pipeline
    from vitroll.audit.report import AuditReport

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "a.dcm", body_phantom(), number=1)
    write_dicom(inputs / "cine.dcm", np.stack([body_phantom()] * 4), number=2)
    write_dicom(inputs / "z.dcm", body_phantom(), number=3)
    monkeypatch.setattr(pipeline, "_measure", pressing_ctrl_c(pipeline._measure, on_calls=(2, 3)))
    monkeypatch.setattr(AuditReport, "write", pressing_ctrl_c(AuditReport.write))
    out = tmp_path / "out"
    code, stdout, stderr = run_cli("audit", str(inputs), "--out", str(out), "--salt", "s", "--keep-burned-in-text",
                                   *MODEL)
    assert code == 130 and "Traceback" not in stderr
    assert stderr.splitlines()[-1] == ('vitroll: interrupted: not audited: frames 1 to 3 of file 2 and file 3 (the '
                                       'report lists them as "interrupted"); rerun the audit to cover them')
    report = json.loads((out / "report.json").read_text())
    assert [(row["input"], row["frame"], AUDITED.get(row["status"], row["status"]), row["frames"], row["reason"])
            for row in report["cases"]] == [(1, 0, "ok", None, None), (2, 0, "ok", None, None),
                  (2, None, "interrupted", "1-3", "Frames 1 to 3 of 4 are not audited: interrupted (Ctrl-C)."),
                  (3, None, "interrupted", "all", "Not audited: interrupted (Ctrl-C).")]
    assert stdout.splitlines()[-1].startswith("2 images from 3 files, 1 file and 3 frames of 1 other file not audited")
    assert len(list((out / "images").iterdir())) == 2


def test_interrupted_rows_are_worded_in_every_report_file():
    images = [AuditRow(case="c1", study="s", input_number=1)]
    left = [AuditRow(case="c2-f2-4", study="s", input_number=2, frames=range(2, 5), interrupted=True,
                     error="Frames 2 to 4 of 5 are not audited: interrupted (Ctrl-C)."),
            *[AuditRow(case=f"c{number}", study="t", input_number=number, interrupted=True,
                       error="Not audited: interrupted (Ctrl-C).") for number in (3, 4, 5, 7)],
            AuditRow(case="c6", study="t", input_number=6, error="Unreadable.")]
    report = AuditReport(rows=images + left, options=AuditOptions(), settings=ExplainSettings(), files=7)
    assert not_reached(report.interrupted) == "frames 2 to 4 of file 2 and files 3 to 5, 7"
    assert not_reached(report.interrupted[-1:]) == "file 7"
    assert report.sentences()[1].text == ("The audit was interrupted (Ctrl-C) before it reached frames 2 to 4 of "
                                          "file 2 and files 3 to 5, 7: listed as not audited, with the reason "
                                          '"interrupted".')
    assert [(record["status"], record["frames"]) for record in report.records()] == [
        ("ok", None), ("interrupted", "2-4"), *[("interrupted", "all")] * 3, ("error", "all"), ("interrupted", "all")]
    assert json.loads(report.to_json())["counts"]["files_interrupted"] == 5
    assert [row["status"] for row in csv.DictReader(io.StringIO(report.to_csv()))][1:3] == ["interrupted"] * 2
    html = render_html(report)
    assert '<td class="key">c2-f2-4</td><td>2-4</td><td>Frames 2 to 4 of 5 are not audited: interrupted' in html
    assert html.count("<td>Not audited: interrupted (Ctrl-C).</td>") == 4


def test_an_overlay_that_cannot_be_written_fails_that_image_alone(tmp_path, checkpoint, monkeypatch):
    import vitroll.audit.pipeline as pipeline

    inputs = tmp_path / "in"
    inputs.mkdir()
    for number in (1, 2):
        write_dicom(inputs / f"{number}.dcm", body_phantom(), number=number)
    written = pipeline.write_atomic

    def refuse_the_first(path, data):
        if not hasattr(refuse_the_first, "refused"):
            refuse_the_first.refused = True
            raise OSError(13, "Permission denied", str(path))
        written(path, data)

    monkeypatch.setattr(pipeline, "write_atomic", refuse_the_first)
    code, stdout, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), "--checkpoint",
                                   str(checkpoint[0]), "--class-names", str(checkpoint[1]), *MODEL)
    assert code == 3 and "Traceback" not in stderr
    assert ("vitroll: not audited: file 1 (case-" in stderr
            and "Its overlay cannot be written into the report folder (Permission denied)." in stderr)
    assert "1 image from 2 files, 1 file not audited" in stdout
    assert len(list((tmp_path / "out" / "images").iterdir())) == 1


def test_a_full_disk_keeps_the_tables_and_leaves_no_earlier_report_beside_them(tmp_path, checkpoint, monkeypatch):
    """The HTML was written first: a disk full at it lost the CSV and JSON too, the audit's results, and left the
    earlier audit's three report files standing as if they were this one's."""
    import errno

    import pydicom.data

    import vitroll.audit.report as report_module

    source = pydicom.data.get_testdata_file("CT_small.dcm")
    out = tmp_path / "out"
    args = ("audit", source, "--out", str(out), "--checkpoint", str(checkpoint[0]), "--class-names",
            str(checkpoint[1]), *MODEL)
    assert run_cli(*args, "--salt", "first")[0] == 0
    earlier = (out / "report.csv").read_text()
    written = report_module.write_atomic

    def full_at_the_html(path, data):
        if Path(path).name == "report.html":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        written(path, data)

    monkeypatch.setattr(report_module, "write_atomic", full_at_the_html)
    code, stdout, stderr = run_cli(*args, "--salt", "second")
    assert code == 2 and stderr.strip().splitlines() == [
        f"vitroll: error: {out / 'report.html'}: No space left on device (report.csv and report.json written)"]
    tables = (out / "report.csv").read_text()
    cases = json.loads((out / "report.json").read_text())["cases"]
    assert len(cases) == 1 and cases[0]["case"] in tables and cases[0]["case"] not in earlier  # this audit's
    assert not (out / "report.html").exists()
    # the earlier audit's overlay (its burned-in text may have been kept) is not left beside this audit's tables
    assert [p.name for p in (out / "images").iterdir()] == [f"{cases[0]['case']}.png"]


@pytest.mark.parametrize("line,fault", [
    ("a.dcm,0,0,inf,4", "box coordinates must be finite numbers; got 0,0,inf,4"),
    ("a.dcm,0,0,four,4", "box coordinates must be numbers; got 0,0,four,4"),
    ("a.dcm,8,0,4,4", "the box 8,0,4,4 is empty: x1 must be greater than x0 and y1 than y0 (x1, y1 exclusive)"),
    ("a.dcm,0,4,4,4", "the box 0,4,4,4 is empty"),
    (",0,0,4,4", "the file column is empty"),
    ("a.dcm,0,0,4", "expected file,x0,y0,x1,y1; got 4 fields"),
])
def test_malformed_boxes_are_one_error_naming_the_line(tmp_path, line, fault):
    (tmp_path / "boxes.csv").write_text(f"image,x0,y0,x1,y1\nb.dcm,1,1,3,3\n{line}\n")
    with pytest.raises(InputValueError) as error:
        read_boxes(tmp_path / "boxes.csv")
    assert str(error.value).startswith(f"{tmp_path / 'boxes.csv'}: line 3: {fault}")
    code, _, stderr = run_cli("audit", str(tmp_path), "--boxes", str(tmp_path / "boxes.csv"), "--out",
                              str(tmp_path / "out"), "--keep-burned-in-text", *MODEL)
    assert code == 2 and stderr.splitlines()[-1].startswith(f"vitroll: error: {tmp_path / 'boxes.csv'}: line 3: ")
    assert "Traceback" not in stderr


def test_an_roi_outside_the_image_or_an_unreadable_mask_is_not_measured(tmp_path, shortcut_methods):
    import timm

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("outside", "badmask", "boxed"):
        write_dicom(inputs / f"{name}.dcm", body_phantom())
    (tmp_path / "boxes.csv").write_text("outside.dcm,100,100,120,120\nboxed.dcm,0,0,16,16\n")  # the image is 64 px
    (tmp_path / "masks").mkdir()
    (tmp_path / "masks" / "badmask.png").write_text("not a png")
    model = timm.create_model("test_vit", img_size=64, num_classes=3).eval()
    options = AuditOptions(masks=MaskSource(tmp_path / "masks", tmp_path / "boxes.csv"), salt="x")
    report = run_audit([inputs], model, out_dir=tmp_path / "out", settings=ExplainSettings(method="corner"),
                       options=options)
    rows = {row.input_number: row for row in report.images}  # badmask 1, boxed 2, outside 3
    assert rows[1].not_measured == dict.fromkeys(
        ROI_METRICS, "not measured: its masks file cannot be read as an image")
    assert rows[3].not_measured == dict.fromkeys(
        ROI_METRICS, "not measured: its region of interest covers no pixel of the image")
    for row in (rows[1], rows[3]):
        assert all(np.isnan(row.metrics[name]) for name in ROI_METRICS)
    assert rows[2].not_measured == {} and rows[2].metrics["pointing_hit"] == 1.0
    assert any(s.text.startswith("1 images have a region of interest") for s in report.sentences())


def test_a_mask_over_max_pixels_is_refused_from_its_header_and_a_16_bit_label_mask_is_read(tmp_path, shortcut_methods):
    """OpenCV read --masks and --body-masks files with no max_pixels (only its own 1 GP limit), and read a 16-bit
    label mask (0 and 1, as segmentation tools save them) as 8-bit by its high byte: empty, so its ROI "covered no
    pixel". Masks are read as evaluate's are: refused over --max-pixels in its words, which name no file."""
    import timm

    inputs, masks = tmp_path / "in", tmp_path / "masks"
    inputs.mkdir()
    masks.mkdir()
    for name in ("huge", "labels"):
        write_dicom(inputs / f"{name}.dcm", body_phantom())
    png_claiming_size(masks / "huge.png", 30_000, 20_000)  # 8×8 pixels: decoding it would fail as truncated
    labels = np.zeros((64, 64), np.uint16)
    labels[:16, :16] = 1
    Image.fromarray(labels).save(masks / "labels.png")
    model = timm.create_model("test_vit", img_size=64, num_classes=3).eval()
    report = run_audit([inputs], model, out_dir=tmp_path / "out", settings=ExplainSettings(method="corner"),
                       options=AuditOptions(masks=MaskSource(masks), body_masks=MaskSource(masks), salt="x"))
    rows = {row.input_number: row for row in report.images}  # huge 1, labels 2
    too_large = ("cannot be read as an image: image too large: 600 MP (30000×20000), over the limit of 500 MP; "
                 "max_pixels=600_000_000 reads it if the memory allows (an overlay takes about 20 bytes a pixel)")
    assert rows[1].not_measured == {"outside_body": f"not measured: its body_masks file {too_large}",
                                    **dict.fromkeys(ROI_METRICS, f"not measured: its masks file {too_large}")}
    assert rows[2].not_measured == {} and rows[2].metrics["pointing_hit"] == 1.0
    assert rows[2].metrics["outside_body"] < 1.0  # the mask read empty put all of the map's mass outside the body


def test_a_mask_of_another_width_to_height_than_its_image_is_not_measured_and_a_scaled_one_is(tmp_path,
                                                                                               shortcut_methods):
    """A 13 × 10 --masks / --body-masks PNG of a 64 × 64 image was stretched onto it without a word: its region no
    longer where it was drawn. A mask of the image's shape at another scale (32 × 32, 21 × 21 of a 64 × 64 image:
    sides rounded to whole pixels) is still scaled to it."""
    import timm

    inputs, masks = tmp_path / "in", tmp_path / "masks"
    inputs.mkdir()
    masks.mkdir()
    for number, (name, mask_hw) in enumerate({"wide": (10, 13), "half": (32, 32), "third": (21, 21),
                                              "tall": (64, 63)}.items(), 1):
        write_dicom(inputs / f"{name}.dcm", body_phantom(), number=number)
        mask = np.zeros(mask_hw, np.uint8)
        mask[: mask_hw[0] // 2, : mask_hw[1] // 2] = 255
        Image.fromarray(mask).save(masks / f"{name}.png")
    model = timm.create_model("test_vit", img_size=64, num_classes=3).eval()
    report = run_audit([inputs], model, out_dir=tmp_path / "out", settings=ExplainSettings(method="corner"),
                       options=AuditOptions(masks=MaskSource(masks), body_masks=MaskSource(masks), salt="x"))
    rows = {row.input_number: row for row in report.images}  # by name: half 1, tall 2, third 3, wide 4
    other = "has another width to height than the image, so it is not this image's mask"
    assert rows[4].not_measured == {"outside_body": f"not measured: its body_masks file {other}",
                                    **dict.fromkeys(ROI_METRICS, f"not measured: its masks file {other}")}
    assert [rows[number].not_measured for number in (1, 2, 3)] == [{}, {}, {}]
    assert [rows[number].metrics["pointing_hit"] for number in (1, 2, 3)] == [1.0, 1.0, 1.0]  # the corner's map
    said = [sentence.text for sentence in report.sentences()]
    assert said[-2:] == [  # the summary said nothing of the images whose ROI metrics were not measured
        "3 images have a region of interest: on average 100 % of the saliency lies inside it, the peak falls inside it "
        "(the pointing game) in 3 of 3 (100 %), and the top 5 % of the map overlaps it with a mean IoU of 0.20.",
        f"For 1 of 4 images (25 %) the saliency inside the region of interest is not measured: its masks file {other}."]
    assert not [text for text in said if ") (" in text]  # was "in 3 of 3 (100 %) (pointing game)"
    with pytest.raises(InputValueError, match=r"^mask image wide.png is 13 × 10 pixels, not the image's 64 × 64 at "
                                              r"any scale$"):
        MaskSource(masks).get(inputs / "wide.dcm", (64, 64))


def test_the_masks_of_a_multi_frame_file_are_decoded_once_for_the_file(tmp_path, monkeypatch, shortcut_methods):
    """A --masks and a --body-masks PNG were decoded again for each frame of a cine (each part of it too)."""
    import timm

    import vitroll.audit.metrics as metrics

    inputs, masks = tmp_path / "in", tmp_path / "masks"
    inputs.mkdir()
    masks.mkdir()
    write_dicom(inputs / "cine.dcm", np.stack([body_phantom()] * 3), number=1)
    write_dicom(inputs / "other.dcm", body_phantom(), number=2)
    write_dicom(inputs / "broken.dcm", np.stack([body_phantom()] * 2), number=3)
    (masks / "broken.png").write_text("not a png")
    corner = np.zeros((64, 64), np.uint8)
    corner[:16, :16] = 255
    for name in ("cine", "other"):
        Image.fromarray(corner).save(masks / f"{name}.png")
    decoded, load_mask = [], metrics.load_mask
    monkeypatch.setattr(metrics, "load_mask",
                        lambda path, **kwargs: decoded.append(path.name) or load_mask(path, **kwargs))
    model = timm.create_model("test_vit", img_size=64, num_classes=3).eval()
    report = run_audit([inputs], model, out_dir=tmp_path / "out", settings=ExplainSettings(method="corner"),
                       options=AuditOptions(masks=MaskSource(masks), body_masks=MaskSource(masks), salt="x",
                                            batch_size=2))
    assert sorted(decoded) == ["broken.png"] * 2 + ["cine.png"] * 2 + ["other.png"] * 2  # an ROI, a body mask each
    rows = sorted(report.images, key=lambda row: (row.input_number, row.frame))  # broken 1, cine 2, other 3
    assert [row.input_number for row in rows] == [1, 1, 2, 2, 2, 3]
    assert all(set(row.not_measured) == {"outside_body", *ROI_METRICS} for row in rows[:2])
    assert all(row.metrics["pointing_hit"] == 1.0 and row.not_measured == {} for row in rows[2:])
    assert len({row.metrics["outside_body"] for row in rows[2:5]}) == 1


def test_an_unreadable_mask_kept_for_the_next_frame_keeps_no_earlier_frame_alive(tmp_path):
    """The error of an unreadable mask PNG, kept for the next frame of its file, was raised again as it was: each
    raise added to its traceback, which held every earlier frame's caller (and the image it measured) alive."""
    import weakref

    class Measured:
        """Stands for the image a frame's measuring holds."""

    (tmp_path / "masks").mkdir()
    (tmp_path / "masks" / "cine.png").write_text("not a png")
    masks, alive = MaskSource(tmp_path / "masks"), []

    def measure() -> None:
        image = Measured()
        alive.append(weakref.ref(image))
        with pytest.raises(ValueError):
            masks.get(tmp_path / "cine.dcm", (64, 64), max_pixels=None)

    for _ in range(5):
        measure()
    assert [ref() is not None for ref in alive] == [False] * 4 + [True]  # the last frame's, until the next one's


def test_an_unreadable_body_mask_leaves_that_image_not_measured_and_the_audit_goes_on(tmp_path):
    """It stopped the whole audit with one error line naming the mask (the image's stem), writing no report."""
    from vitroll.models import load_model

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("badmask", "nomask"):
        write_dicom(inputs / f"{name}.dcm", body_phantom())
    (tmp_path / "masks").mkdir()
    (tmp_path / "masks" / "badmask.png").write_text("not a png")
    report = run_audit([inputs], load_model("vitroll-shapes"), out_dir=tmp_path / "out", settings=ExplainSettings(),
                       options=AuditOptions(body_masks=MaskSource(tmp_path / "masks"), salt="x"))
    rows = {row.input_number: row for row in report.images}  # badmask 1, nomask 2
    assert rows[1].not_measured == {"outside_body": "not measured: its body_masks file cannot be read as an image"}
    assert np.isnan(rows[1].metrics["outside_body"]) and not rows[1].flagged
    assert rows[2].not_measured == {} and 0.0 <= rows[2].metrics["outside_body"] <= 1.0
    assert (tmp_path / "out" / "report.html").is_file()


# --- metrics on their own ---------------------------------------------------------------------------------------------

def test_body_mask_fills_holes_and_ignores_markers():
    image = body_phantom(dtype=np.uint8, high=255)
    image[30:34, 30:34] = 0  # a hole (air in the lungs)
    body = body_mask(image)
    assert body[32, 32] and not body[0, 0] and not body[3, 4]
    assert abs(body.sum() - np.pi * (0.3 * 64) ** 2) < 60
    markers = annotation_mask(image, body)
    assert markers[3, 4] and not markers[32, 32] and not markers[32, 12]
    assert body_mask(np.full((8, 8), 7, np.uint8)).all()


def test_the_body_outline_rule_by_modality_and_colour():
    from vitroll.audit.metrics import body_outline_exemption

    for modality, colour in (("CT", False), ("CT", True), ("PT", True), ("OT", False), ("unknown", False), ("", False)):
        assert body_outline_exemption(modality, colour) is None, (modality, colour)
    assert body_outline_exemption("us", False) == ("not measured: the body outline does not apply to ultrasound "
                                                   "(Modality US); pass body_masks to measure it")
    with worded_for_the_command_line():
        assert body_outline_exemption("us", False).endswith("(Modality US); pass --body-masks to measure it")
    assert "endoscopy (Modality ES)" in body_outline_exemption("ES", True)
    assert body_outline_exemption("unknown", True) == (
        "not measured: a colour image with no Modality (a photograph, screen capture or rendering) has no body "
        "outline to threshold; pass body_masks to measure it")
    assert "a colour image with Modality OT" in body_outline_exemption("OT", True)


def test_fractions_and_roi_metrics_by_hand():
    saliency = np.zeros((20, 20), np.float32)
    saliency[0, 0], saliency[10, 10] = 3.0, 1.0
    saliency[5, 5] = np.nan
    body = np.zeros((20, 20), bool)
    body[5:15, 5:15] = True
    metrics = image_metrics(saliency, body, np.zeros_like(body), body, MetricSettings(border_fraction=0.05))
    assert metrics["outside_body"] == pytest.approx(0.75) and metrics["border"] == pytest.approx(0.75)
    assert metrics["annotation"] == 0 and metrics["roi_energy"] == pytest.approx(0.25)
    assert metrics["pointing_hit"] == 0.0
    assert border_band((20, 20), 0.05).sum() == 20 * 20 - 18 * 18
    p = saliency.copy()
    p[5, 5] = 0
    p /= p.sum()
    assert top_region(p, 0.5).sum() == 2  # 0.5 % of 400 pixels
    assert roi_metrics(p, p > 0.5, top_percent=0.25) == {"roi_energy": 0.75, "pointing_hit": 1.0, "topk_iou": 1.0}
    assert np.isnan(image_metrics(np.zeros((4, 4)), body[:4, :4], body[:4, :4])["outside_body"])


def test_flagged_cases_come_first_in_the_table():
    from vitroll.audit.report import AuditReport, render_html

    rows = [AuditRow(case=f"case-{i}", study="s", metrics={"outside_body": v, "border": 0.0, "annotation": 0.0},
                     flagged=v > 0.5) for i, v in enumerate([0.1, 0.9, 0.4, 0.7])]
    rows.append(AuditRow(case="case-bad", study="s", error="no PixelData"))
    report = AuditReport(rows=rows, options=AuditOptions(), settings=ExplainSettings(), files=5)
    assert [row.case for row in report.images] == ["case-1", "case-3", "case-2", "case-0"]
    html = render_html(report)
    table = html[html.index('id="case-table"'):]
    assert [m for m in re.findall(r'<tr id="(case-[^"]+)"', table)] == ["case-1", "case-3", "case-2", "case-0",
                                                                        "case-bad"]
    assert table.count('class="flagged"') == 2


def test_group_by_parsing():
    assert parse_group_by("Manufacturer, bodypart ,sex,age-band") == (
        "Manufacturer", "BodyPartExamined", "PatientSex", "age-band")
    assert parse_group_by("") == ()
    with pytest.raises(ValueError, match="unknown field 'PatientName'"):
        parse_group_by("PatientName")


def test_thin_script_delegates_to_the_audit_command():
    script = Path(__file__).resolve().parents[1] / "scripts" / "medical_audit.py"
    assert 'main(["audit", *sys.argv[1:]])' in script.read_text()


# --- every one of pydicom's bundled test files ------------------------------------------------------------------------

def _pydicom_decodes(path: Path) -> bool:
    """Whether pydicom itself, with the installed decoder plugins, gives the pixel array of ``path``."""
    import warnings

    import pydicom

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pydicom.dcmread(path).pixel_array
    except Exception:
        return False
    return True


@pytest.fixture(scope="module")
def bundled(tmp_path_factory) -> dict:
    """One audit (shipped testbed model, first frame only) of a folder linking every file pydicom ships for its
    tests."""
    import pydicom.data

    root = Path(pydicom.data.__file__).parent / "test_files"
    folder = tmp_path_factory.mktemp("bundled") / "in"
    for source in (Path(name) for name in pydicom.data.get_testdata_files()):
        if source.is_file():
            link = folder / (source.relative_to(root) if source.is_relative_to(root) else source.name)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(source)
    files = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
    out = folder.parent / "out"
    code, stdout, stderr = run_cli("audit", str(folder), "--out", str(out), "--frame", "0", "--batch-size", "16",
                                   "--device", "cpu", "--group-by", "Modality")
    return {"code": code, "stdout": stdout, "stderr": stderr, "files": files, "folder": folder, "out": out,
            "json": json.loads((out / "report.json").read_text()), "csv": (out / "report.csv").read_text()}


def test_every_bundled_file_is_a_row_and_every_file_pydicom_decodes_is_an_image(bundled):
    """Files are numbered by their relative paths sorted in code-point order, as the report says."""
    files, rows = bundled["files"], bundled["json"]["cases"]
    by_file: dict[str, list[dict]] = {}
    for row in rows:
        by_file.setdefault(files[row["input"] - 1] if 1 <= row["input"] <= len(files) else "?", []).append(row)
    assert sorted(by_file) == files and len(files) >= 100
    decodable = {name for name in files if _pydicom_decodes(bundled["folder"] / name)}
    images = {name for name, found in by_file.items() if all(row["status"] != "error" for row in found)}
    assert decodable <= images, sorted(decodable - images)
    assert all(len(found) == 1 for found in by_file.values())  # --frame 0: one row per file
    unreadable = {name: found[0]["reason"] for name, found in by_file.items() if found[0]["status"] == "error"}
    assert len(unreadable) + len(images) == len(files) and unreadable
    print(f"{len(files)} files, {len(decodable)} decoded by pydicom, {len(images)} image rows, "
          f"{len(unreadable)} error rows, {len(rows)} rows")
    assert bundled["code"] == 3
    assert bundled["json"]["summary"][0]["text"].startswith(
        f"The audit covers {len(images)} images from {len(files)} files in ")


def test_unreadable_bundled_files_say_why_in_a_full_sentence_by_their_number(bundled):
    from vitroll.io.dicom import NOT_DICOM_OR_IMAGE

    files = bundled["files"]
    reasons = {files[row["input"] - 1]: row["reason"] for row in bundled["json"]["cases"] if row["status"] == "error"}
    for name, reason in reasons.items():
        assert reason[0].isupper() and reason.endswith(".") and "\n" not in reason and not reason.endswith(":."), reason
        assert Path(name).name not in reason and "test_files" not in reason
    # the four files that had no row at all before: no 'DICM' preamble
    assert reasons["rtstruct.dcm"] == ("This DICOM file (RT Structure Set Storage) has no PixelData, so there is no "
                                       "image to explain.")
    for name in ("ExplVR_LitEndNoMeta.dcm", "ExplVR_BigEndNoMeta.dcm"):
        assert reasons[name] == ("This DICOM file (RT Ion Plan Storage) has no PixelData, so there is no image to "
                                 "explain.")
    assert reasons["no_meta.dcm"] == NOT_DICOM_OR_IMAGE  # one stray byte before its first element
    assert reasons["README.txt"] == NOT_DICOM_OR_IMAGE
    assert reasons["JPEG-lossy.dcm"].startswith(
        "The compressed pixel data cannot be decoded: each decoder installed for its transfer syntax, JPEG Extended "
        "(Process 2 and 4) (UID 1.2.840.10008.1.2.4.51), failed (gdcm: ")
    assert reasons["JPEG-lossy.dcm"].endswith(
        "pydicom's pylibjpeg plugin would also try it, with pylibjpeg>=2.0 and pylibjpeg-libjpeg>=2.1 "
        "(pylibjpeg-libjpeg is GPL-3.0, so vitroll does not install it).")
    stderr = bundled["stderr"]
    number = files.index("rtstruct.dcm") + 1
    assert f"vitroll: not audited: file {number} (case-" in stderr and stderr.count("vitroll: not "
                                                                                    "audited:") == len(reasons)


def test_ultrasound_and_colour_captures_are_not_measured_against_a_body_outline(bundled):
    files, rows = bundled["files"], bundled["json"]["cases"]
    ultrasound = [row for row in rows if row["Modality"] == "US"]
    names = {files[row["input"] - 1] for row in ultrasound}
    assert {"examples_palette.dcm", "examples_ybr_color.dcm", "examples_rgb_color.dcm", "examples_jpeg2k.dcm"} <= names
    for row in ultrasound:
        assert row["outside_body"] is None and not row["flagged"] and row["status"] == "ok"
        assert row["not_measured"] == ("outside_body: not measured: the body outline does not apply to ultrasound "
                                       "(Modality US); pass --body-masks to measure it")
        assert row["border"] is not None
    colour_ot = [row for row in rows if row["Modality"] == "OT" and row["not_measured"]]
    assert colour_ot and all("a colour image with Modality OT" in row["not_measured"] for row in colour_ot)
    measured = [row for row in rows if row["status"] != "error" and not row["not_measured"]]
    assert measured and all(row["outside_body"] is not None for row in measured)
    summary = [sentence["text"] for sentence in bundled["json"]["summary"]]
    assert (f"For {len(ultrasound)} of {len(measured) + len([r for r in rows if r['not_measured']])} images "
            in " ".join(summary))
    flagged = sum(bool(row["flagged"]) for row in rows)
    assert any(text.startswith(f"In {flagged} of {len(measured)} measured images") for text in summary)


def test_a_body_mask_given_for_an_ultrasound_image_is_measured(tmp_path):
    from pydicom.data import get_testdata_file

    from vitroll.models import load_model

    source = Path(get_testdata_file("examples_palette.dcm"))
    (tmp_path / "masks").mkdir()
    mask = np.zeros((35, 80), np.uint8)  # its 800 × 350 pixels at a tenth
    mask[8:27, 20:60] = 255
    Image.fromarray(mask).save(tmp_path / "masks" / "examples_palette.png")
    report = run_audit([source], load_model("vitroll-shapes"), out_dir=tmp_path / "out", settings=ExplainSettings(),
                       options=AuditOptions(body_masks=MaskSource(tmp_path / "masks"), salt="x"))
    (row,) = report.images
    assert row.metadata["Modality"] == "US" and not row.not_measured
    assert 0.0 <= row.metrics["outside_body"] <= 1.0


# --- provenance -------------------------------------------------------------------------------------------------------

def test_report_names_the_shipped_model_and_the_sha256_of_its_weights(bundled):
    import hashlib

    from vitroll import __version__
    from vitroll.testbed.model import WEIGHTS

    settings = bundled["json"]["settings"]
    digest = hashlib.sha256(WEIGHTS.read_bytes()).hexdigest()
    assert (settings["model"], settings["weights"], settings["weights_sha256"]) == ("vitroll-shapes", "testbed", digest)
    assert settings["vitroll_version"] == __version__ and settings["method"] == "rollout"
    assert settings["random_weights"] is False
    header, first = bundled["csv"].splitlines()[:2]
    assert header.endswith(",model,weights,weights_sha256,method,vitroll_version")
    assert first.endswith(f",vitroll-shapes,testbed,{digest},rollout,{__version__}")
    html = (bundled["out"] / "report.html").read_text()
    assert "random-weights" not in html and f"SHA-256 {digest}" in html


def test_checkpoint_provenance_is_its_sha256(audited, checkpoint):
    import hashlib

    settings = audited["json"]["settings"]
    digest = hashlib.sha256(checkpoint[0].read_bytes()).hexdigest()
    assert (settings["model"], settings["weights"], settings["weights_sha256"]) == ("test_vit", "checkpoint", digest)
    assert settings["weights_description"] == "checkpoint file model.safetensors"
    assert f"SHA-256 {digest}" in (audited["out"] / "report.html").read_text()


def test_random_weights_get_a_banner_in_every_report_file(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_dicom(inputs / "one.dcm", body_phantom())
    code, _, stderr = run_cli("audit", str(inputs), "--out", str(tmp_path / "out"), *MODEL)
    assert code == 0 and "test_vit has random weights" in stderr
    settings = json.loads((tmp_path / "out" / "report.json").read_text())["settings"]
    assert settings["random_weights"] is True and settings["weights"] == "random" and settings["weights_sha256"] is None
    assert ",test_vit,random,,rollout," in (tmp_path / "out" / "report.csv").read_text()
    html = (tmp_path / "out" / "report.html").read_text()
    assert ('<p class="banner" id="random-weights">RANDOM WEIGHTS: this model was not trained (no --pretrained or '
            "--checkpoint). Its saliency maps, predictions and every number in this report mean nothing.</p>") in html


@pytest.mark.parametrize("spoil, reason", [
    ("permission", "cannot be opened (Permission denied)"),
    ("directory", "cannot be opened (Is a directory)"),
    ("removed", "the file is gone: removed or moved while the audit ran"),
    ("truncated", "This DICOM file (Secondary Capture Image Storage) is cut short: it ends in the middle of its pixel "
                  "data, so the image is incomplete and is not shown."),
])
def test_a_file_taken_away_after_its_header_was_read_is_worded_as_other_read_failures(tmp_path, monkeypatch, spoil,
                                                                                        reason):
    """A cine's pixel data (over 256 KB) is read from the file after its header: a file no longer readable then (chmod
    000, told by the PermissionError its reading raises, since root reads such a file), replaced by a folder, removed
    or cut short. The first was "The pixel data cannot be decoded: … pydicom said: [Errno 13] Permission denied:
    '<file>'; … it is the header that does not describe it", the folder "cut short"."""
    import errno

    import vitroll.audit.pipeline as pipeline
    import vitroll.io.dicom.reading as reading

    path = tmp_path / "cine.dcm"
    write_dicom(path, np.stack([body_phantom(128)] * 9), number=1)  # 9 × 128 × 128 × 2 bytes: read later
    read_dataset, rgb_frames = reading._read_dataset, reading._rgb_frames

    def taken_away(read_path):
        read = read_dataset(read_path)
        if spoil == "directory":
            path.unlink()
            path.mkdir()
        elif spoil == "removed":
            path.unlink()
        elif spoil == "truncated":
            with open(path, "r+b") as file:
                file.truncate(path.stat().st_size // 2)
        return read

    def denied(source, *args, **kwargs):
        if spoil == "permission":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return rgb_frames(source, *args, **kwargs)

    monkeypatch.setattr(reading, "_read_dataset", taken_away)
    monkeypatch.setattr(reading, "_rgb_frames", denied)
    with pytest.raises(VitrollError) as failed:
        pipeline.audit_frames(pipeline.AuditInput(path, 1, "cine.dcm", count=9), AuditOptions(salt="s"))
    assert str(failed.value) == reason


def test_a_file_in_a_folder_made_unreadable_mid_run_cannot_be_opened_not_reading_failed(tmp_path, monkeypatch):
    """A folder of inputs made unreadable (chmod 000) after the input list was made: even a file's size cannot be read
    (stat raises PermissionError, as here, since root reads any folder). The row read "Reading failed
    (PermissionError: [Errno 13] Permission denied: '<file>')", and once a file no longer there was told by
    Path.exists (which raises for it), "<file>: cannot be processed (…)"."""
    import errno

    import vitroll.audit.pipeline as pipeline

    path = tmp_path / "sub" / "photo.png"
    path.parent.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    stat = Path.stat

    def refused(self, *args, **kwargs):
        if self == path:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", refused)
    with pytest.raises(VitrollError, match=r"^cannot be opened \(Permission denied\)$"):
        pipeline.audit_frames(pipeline.AuditInput(path, 1, "photo.png"), AuditOptions(salt="s"))


@pytest.mark.parametrize("name", ["photo.png", "scan.dcm"])
def test_an_unreadable_image_and_an_unreadable_dicom_file_give_one_reason(tmp_path, monkeypatch, name):
    """A file made unreadable (chmod 000, which root reads: told here by the PermissionError opening it raises) was
    'Cannot be read (Permission denied).' as a PNG and 'This file cannot be opened (Permission denied).' as DICOM."""
    import builtins
    import errno

    import vitroll.audit.pipeline as pipeline

    path = tmp_path / name
    if name.endswith(".dcm"):
        write_dicom(path, body_phantom(64), number=1)
    else:
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)
    opened = builtins.open

    def refused(file, *args, **kwargs):
        if str(file) == str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return opened(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refused)
    monkeypatch.setattr(io, "open", refused)
    with pytest.raises(VitrollError) as failed:
        pipeline.audit_frames(pipeline.AuditInput(path, 1, name), AuditOptions(salt="s"))
    assert str(failed.value) == "cannot be opened (Permission denied)"  # a row: "Cannot be opened (Permission denied)."


def test_one_flagged_image_of_two_is_not_told_as_a_scanner_model_they_come_from():
    """Of 2 flagged images, one from a scanner model made "1 of them come from one scanner model (MRT50H1), which
    supplied 1 of all 4 images" (an audit of four of pydicom's test files): half of 2 is one image, no pattern."""
    from vitroll.audit.summary import sentences

    def row(number: int, model: str, outside: float) -> AuditRow:
        return AuditRow(case=f"case-{number}", study="s", input_number=number,
                        metadata={"ManufacturerModelName": model},
                        metrics={"outside_body": outside, "border": 0.0, "annotation": 0.0}, flagged=outside > 0.5)

    options = AuditOptions(salt="s")
    one = [sentence.text for sentence in sentences([row(1, "MRT50H1", 0.9), row(2, "unknown", 0.8),
                                                    row(3, "MRT50H1", 0.1)], [], 3, options)]
    assert "In 2 of 3 images (67 %) more than half of the saliency lies outside the body." in one
    two = [sentence.text for sentence in sentences([row(1, "MRT50H1", 0.9), row(2, "MRT50H1", 0.8),
                                                    row(3, "Other", 0.9)], [], 3, options)]
    assert ("In 3 of 3 images (100 %) more than half of the saliency lies outside the body; 2 of them come from one "
            "scanner model (MRT50H1), which supplied 2 of all 3 images.") in two
