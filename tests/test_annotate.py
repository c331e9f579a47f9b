"""``vitroll annotate``: every input gets a manifest row, runs resume without duplicates, shards cover all inputs."""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

import numpy as np
import pytest
import torch
from PIL import Image

from vitroll.commands.annotate import save_kinds
from vitroll.cli import main
from vitroll.errors import ImageReadError, OptionValueError, VitrollError
from vitroll.io.names import error_line
from vitroll.pipelines import folder, manifest, ranks, stream
from vitroll.pipelines.inputs import discover
from claimed_size import png_claiming_size
from interrupts import pressing_ctrl_c
from manifest_check import assert_manifest_matches_folder

GOOD = ["a/x.png", "b/x.png", "cmyk.jpg", "deep16.png", "palette.png", "rgba.png", "rotated.jpg"]
BAD = {"empty.jpg": "empty file", "truncated.jpg": "corrupt or truncated", "text.jpg": "not an image"}


def rgb(height=48, width=64, seed=0):
    return np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)


@pytest.fixture
def messy(tmp_path):
    root = tmp_path / "in"
    for folder_name in ("a", "b"):
        (root / folder_name).mkdir(parents=True)
    Image.fromarray(rgb(seed=1)).save(root / "a" / "x.png")
    Image.fromarray(rgb(seed=2)).save(root / "b" / "x.png")
    Image.fromarray(rgb(seed=3)).convert("CMYK").save(root / "cmyk.jpg")
    Image.fromarray((np.arange(48 * 64).reshape(48, 64) * 20).astype(np.uint16)).save(root / "deep16.png")
    Image.fromarray(rgb(seed=4)).convert("P").save(root / "palette.png")
    Image.fromarray(np.dstack([rgb(seed=5), np.full((48, 64), 128, np.uint8)])).save(root / "rgba.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb(40, 60, seed=6)).save(root / "rotated.jpg", exif=exif)
    (root / "empty.jpg").write_bytes(b"")
    Image.fromarray(rgb(seed=7)).save(root / "full.jpg")
    data = (root / "full.jpg").read_bytes()
    (root / "full.jpg").unlink()
    (root / "truncated.jpg").write_bytes(data[: len(data) // 2])
    (root / "text.jpg").write_text("not a picture")
    return root


def annotate(*argv: str) -> int:
    return main(["annotate", *argv, "--batch-size", "3", "--workers", "1", "--no-progress"])


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def test_every_input_gets_a_row_and_every_good_image_its_outputs(messy, tmp_path, capsys):
    out = tmp_path / "out"
    code = annotate(str(messy), "--out", str(out), "--recursive", "--save", "overlay,heatmap,figure")
    assert code == folder.EXIT_SOME_FAILED == 3
    table = {row["path"]: row for row in assert_manifest_matches_folder(out)}
    assert sorted(table) == sorted(GOOD + list(BAD))
    for path in GOOD:
        row = table[path]
        assert row["status"] == "ok", row
        assert (row["overlay"], row["heatmap"], row["figure"]) == (f"overlays/{path}.png", f"heatmaps/{path}.npy",
                                                                   f"figures/{path}.png")
        overlay = np.asarray(Image.open(out / row["overlay"]))
        assert overlay.shape[:2] == (row["height"], row["width"])
        assert np.load(out / row["heatmap"]).dtype == np.float16
        assert row["size"] == (messy / path).stat().st_size and row["mtime_ns"] == (messy / path).stat().st_mtime_ns
        assert 0 <= row["peak_x"] < row["width"] and 0 <= row["peak_y"] < row["height"]
        assert len(row["key_patches"]) == 5 and row["top1_name"] in ("square", "disk", "triangle", "cross")
    assert table["rotated.jpg"]["width"] == 40 and table["rotated.jpg"]["height"] == 60  # EXIF applied
    for path, reason in BAD.items():
        assert table[path]["status"] == "error" and reason in table[path]["error"], table[path]
        assert "\n" not in table[path]["error"]
    assert not list(out.rglob("*.tmp"))
    csv_lines = (out / "manifest.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(GOOD) + len(BAD)
    captured = capsys.readouterr()
    assert "7 ok, 3 failed, 0 skipped" in captured.out
    assert "truncated.jpg" in captured.err


def interrupt_second_batch(monkeypatch) -> Callable:
    """Make the stream's second batch raise KeyboardInterrupt, as a Ctrl-C would; return the real batch function."""
    real = stream.explain_batch
    calls = {"n": 0}

    def interrupting(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(stream, "explain_batch", interrupting)
    return real


def test_interrupted_run_resumes_without_duplicates_or_partial_files(messy, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    real = interrupt_second_batch(monkeypatch)
    assert annotate(str(messy), "--out", str(out), "--recursive") == 130
    first = rows(out)
    assert 0 < len([r for r in first if r["status"] == "ok"]) < len(GOOD)
    assert "interrupted — rerun the same command to resume" in capsys.readouterr().out
    assert not (out / ".vitroll.lock").exists()
    assert assert_manifest_matches_folder(out) == first  # manifest.csv too, for the work done
    assert f'"path": "{first[0]["path"]}"' in (out / "gallery" / "rows.js").read_text()
    assert (out / "index.html").is_file()

    monkeypatch.setattr(stream, "explain_batch", real)
    assert annotate(str(messy), "--out", str(out), "--recursive") == 3
    final = assert_manifest_matches_folder(out)
    assert [r["path"] for r in final] == sorted(GOOD + list(BAD))  # one row per input
    ok_before = len([r for r in first if r["status"] == "ok"])
    assert f"{len(GOOD) - ok_before} ok, 3 failed, {ok_before} skipped" in capsys.readouterr().out
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*.tmp"))
    assert sum(1 for _ in (out / "overlays").rglob("*.png")) == len(GOOD)

    # a file half-written by a killed run is swept away at the next start
    leftover = out / "overlays" / "a" / ".x.png.12345.tmp"
    leftover.write_bytes(b"partial")
    # a third run has nothing left to do but the failures; other settings are refused, or redo everything
    assert annotate(str(messy), "--out", str(out), "--recursive") == 3
    assert f"0 ok, 3 failed, {len(GOOD)} skipped" in capsys.readouterr().out
    assert not leftover.exists()
    assert annotate(str(messy), "--out", str(out), "--recursive", "--alpha", "0.7") == 2
    assert "alpha: 0.5 → 0.7" in capsys.readouterr().err
    assert annotate(str(messy), "--out", str(out), "--recursive", "--alpha", "0.7", "--overwrite") == 3
    assert f"{len(GOOD)} ok, 3 failed, 0 skipped" in capsys.readouterr().out


def test_a_second_ctrl_c_while_the_run_winds_down_is_ignored(messy, tmp_path, monkeypatch, capsys):
    """A second Ctrl-C broke off writing manifest.csv and the gallery (and printed a loader's traceback)."""
    import signal

    from vitroll.pipelines import manifest

    monkeypatch.setattr(stream, "explain_batch", pressing_ctrl_c(stream.explain_batch, on_calls=(2,)))
    # and again, while the work done is kept (the first call is the start's, of an empty folder)
    monkeypatch.setattr(manifest, "write_final", pressing_ctrl_c(manifest.write_final, on_calls=(2,)))
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--recursive") == 130
    assert "interrupted — rerun the same command to resume" in capsys.readouterr().out
    first = assert_manifest_matches_folder(out)  # manifest.csv too
    assert 0 < len(first) < len(GOOD) + len(BAD)
    assert f'"path": "{first[-1]["path"]}"' in (out / "gallery" / "rows.js").read_text()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_once_every_input_is_done_lets_the_run_finish(messy, tmp_path, monkeypatch, capsys):
    """A Ctrl-C while manifest.csv was written after the last batch broke it off: the run exited 130 with no
    manifest.csv or gallery, though there was nothing left to resume."""
    from vitroll.pipelines import manifest

    # the merge after the last batch, not the start's (of an empty folder)
    monkeypatch.setattr(manifest, "write_final", pressing_ctrl_c(manifest.write_final, on_calls=(2,)))
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--recursive") == 3
    assert f"{len(GOOD)} ok, {len(BAD)} failed, 0 skipped" in capsys.readouterr().out
    assert len(assert_manifest_matches_folder(out)) == len(GOOD) + len(BAD)  # manifest.csv too
    assert (out / "gallery" / "rows.js").exists()


def test_a_second_run_on_the_same_folder_is_refused(messy, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    import socket

    (out / ".vitroll.lock").write_text(f"{os.getpid()} {socket.gethostname()}\n")  # alive: this very process
    assert annotate(str(messy), "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"another vitroll run (pid {os.getpid()}) is writing here" in err[0]
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (out / ".vitroll.lock").write_text(f"{finished.stdout.strip()} {socket.gethostname()}\n")  # stale
    assert annotate(str(messy), "--out", str(out), "--limit", "2") == 0
    assert not (out / ".vitroll.lock").exists()


def test_a_limit_of_0_is_refused_as_such(messy, tmp_path, capsys):
    """``--limit 0`` said 'no image files in this folder, only in its sub-folders (add --recursive)'."""
    with pytest.raises(SystemExit) as exit_info:
        annotate(str(messy), "--out", str(tmp_path / "out"), "--limit", "0")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("vitroll: error: annotate: argument --limit: must be an integer ≥ 1; got 0 "
                                       "(see `vitroll annotate --help`)\n")


def test_list_file_input_and_limit(messy, tmp_path):
    listing = tmp_path / "inputs.csv"
    listing.write_text("path,label\nin/a/x.png,1\nin/b/x.png,2\nin/text.jpg,3\n")
    items = discover(listing)
    assert [i.key for i in items] == ["in/a/x.png", "in/b/x.png", "in/text.jpg"]
    assert [i.key for i in discover(listing, limit=2)] == ["in/a/x.png", "in/b/x.png"]
    out = tmp_path / "out"
    assert annotate(str(listing), "--out", str(out)) == 3
    assert [r.get("overlay") for r in assert_manifest_matches_folder(out)] == ["overlays/in/a/x.png.png",
                                                                          "overlays/in/b/x.png.png", None]


def test_outputs_inside_the_input_folder_are_not_inputs_next_time(messy, tmp_path):
    out = messy / "annotated"
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "2") == 0
    assert annotate(str(messy), "--out", str(out), "--recursive") == 3
    assert not any(r["path"].startswith("annotated/") for r in assert_manifest_matches_folder(out))
    (messy / ".hidden.png").write_bytes(b"")
    assert ".hidden.png" not in [i.key for i in discover(messy)]


def test_an_input_folder_that_is_the_output_folder_or_inside_it_is_named_so(messy, tmp_path, capsys):
    """``--out`` the input folder itself found "no image files" in a folder full of them."""
    assert annotate(str(messy), "--out", str(messy)) == 2
    assert capsys.readouterr().err == (f"vitroll: error: {messy}: is the output folder, whose files are never inputs "
                                       "(they would be outputs); choose another --out\n")
    assert annotate(str(messy / "a"), "--out", str(messy)) == 2
    assert capsys.readouterr().err == (f"vitroll: error: {messy / 'a'}: is inside {messy}, whose files are never "
                                       "inputs (they would be outputs); choose another --out\n")
    assert sorted(path.name for path in messy.iterdir()) == [
        "a", "b", "cmyk.jpg", "deep16.png", "empty.jpg", "palette.png", "rgba.png", "rotated.jpg", "text.jpg",
        "truncated.jpg"]  # nothing written


def test_from_python_annotate_names_its_arguments_not_the_flags(messy, tmp_path, capsys):
    """A Python user was told to fix ``--save``, ``--precision fp16``, ``--out``, ``--recursive`` and ``--overwrite``,
    flags of a command line they never ran: they are told ``save``, ``precision='fp16'``, ``out_dir``,
    ``recursive=True`` and ``resume=False``; the command line keeps its flags."""
    from vitroll.models import load_model
    from vitroll.pipelines.explain import ExplainSettings

    with pytest.raises(OptionValueError, match=r"^save takes overlay, heatmap, figure; got 'movie'$"):
        folder.AnnotateOptions(save=("overlay", "movie"))
    with pytest.raises(ImageReadError) as raised:
        folder.find_inputs(messy, messy, folder.AnnotateOptions())
    assert str(raised.value) == f"{messy}: is the output folder, whose files are never inputs (they would be " \
                                "outputs); choose another out_dir"
    with pytest.raises(ImageReadError) as raised:
        folder.find_inputs(messy.parent, tmp_path / "out", folder.AnnotateOptions())
    assert str(raised.value).endswith(": no image files in this folder, only in its sub-folders (add recursive=True)")

    model, out = load_model("vitroll-shapes"), tmp_path / "out"
    run = functools.partial(folder.annotate, messy, out, model, ExplainSettings())
    with pytest.raises(OptionValueError) as raised:
        run(identity={"model": "vitroll-shapes"}, options=folder.AnnotateOptions(precision="fp16", workers=0,
                                                                                 progress=False, limit=1))
    assert str(raised.value) == "precision='fp16' needs a CUDA device; use bf16 or fp32 on the CPU"
    options = folder.AnnotateOptions(workers=0, progress=False, limit=1)
    assert run(identity={"model": "vitroll-shapes"}, options=options).ok == 1
    with pytest.raises(VitrollError) as raised:
        run(identity={"model": "another"}, options=options)
    assert str(raised.value).endswith("rerun with those settings to resume, add resume=False to redo these inputs "
                                      "with the new ones, or choose another out_dir")
    assert "--" not in str(raised.value)

    capsys.readouterr()
    assert annotate(str(messy), "--out", str(tmp_path / "fp16"), "--precision", "fp16", "--device", "cpu") == 2
    assert one_error(capsys) == "vitroll: error: --precision fp16 needs a CUDA device; use bf16 or fp32 on the CPU"


def test_a_sub_folder_that_cannot_be_listed_is_one_line_before_any_work(messy, tmp_path, monkeypatch, capsys):
    from test_discovery import deny_listing

    deny_listing(monkeypatch, {messy / "b"})
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--recursive") == 2
    assert capsys.readouterr().err == (f"vitroll: error: {messy / 'b'}: cannot be listed (Permission denied), so its "
                                       "files would be left out; make it readable\n")
    assert not out.exists()


def test_same_stem_different_suffix_do_not_collide(tmp_path):
    (tmp_path / "p.png").write_bytes(b"")
    (tmp_path / "p.jpg").write_bytes(b"")
    (tmp_path / "q.png").write_bytes(b"")
    assert [i.output_name for i in discover(tmp_path)] == ["p.jpg", "p.png", "q.png"]


def test_names_that_differ_only_by_case_get_outputs_of_their_own_that_keep_their_names(tmp_path, capsys):
    source, out = tmp_path / "in", tmp_path / "out"
    (source / "sub").mkdir(parents=True)
    for name, seed in (("a.png", 1), ("a.jpg", 2), ("sub/a.png", 3), ("Sub/a.png", 4), ("caf\u00e9.png", 5)):
        (source / name).parent.mkdir(exist_ok=True)
        Image.fromarray(rgb(seed=seed)).save(source / name)
    assert annotate(str(source), "--out", str(out), "--recursive") == 0
    overlays = {row["path"]: row["overlay"] for row in rows(out)}
    # one file each on a case-insensitive disk too (macOS, Windows): Sub/a.png sorts first and keeps its name
    assert overlays == {"Sub/a.png": "overlays/Sub/a.png.png", "a.jpg": "overlays/a.jpg.png",
                        "a.png": "overlays/a.png.png", "caf\u00e9.png": "overlays/caf\u00e9.png.png",
                        "sub/a.png": "overlays/sub/a.png@2.png"}
    assert len({name.casefold() for name in overlays.values()}) == len(overlays)
    pictures = {key: np.asarray(Image.open(out / name)) for key, name in overlays.items()}

    # a later input whose name folds onto an existing output's takes the next free name; the others keep theirs
    Image.fromarray(rgb(seed=6)).save(source / "A.png")
    Image.fromarray(rgb(seed=7)).save(source / "cafe\u0301.png")  # the same name in NFD, as macOS spells it
    capsys.readouterr()
    assert annotate(str(source), "--out", str(out), "--recursive") == 0
    assert "2 ok, 0 failed, 5 skipped" in capsys.readouterr().out
    now = {row["path"]: row["overlay"] for row in assert_manifest_matches_folder(out)}
    assert now == {**overlays, "A.png": "overlays/A.png@2.png", "cafe\u0301.png": "overlays/cafe\u0301.png@2.png"}
    assert all(np.array_equal(np.asarray(Image.open(out / overlays[key])), picture)
               for key, picture in pictures.items())
    assert annotate(str(source), "--out", str(out), "--recursive", "--overwrite") == 0
    assert {row["path"]: row["overlay"] for row in assert_manifest_matches_folder(out)} == now


def test_method_disagreement_is_recorded_per_image(messy, tmp_path):
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--limit", "3", "--compare-with", "center", "--disagree-below",
                    "2") == 3
    ok = [r for r in rows(out) if r["status"] == "ok"]
    assert ok and all(-1 <= r["agreement"] <= 1 and r["disagrees"] is True for r in ok)


def test_missing_input_is_one_line(tmp_path, capsys):
    assert annotate(str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")) == 2
    assert capsys.readouterr().err.strip().endswith("nowhere: no such folder or list file")


def test_inputs_are_found_once_and_before_the_model_is_loaded(messy, tmp_path, monkeypatch, capsys):
    """A missing INPUT was told only once the model was loaded (minutes for a large --pretrained one)."""
    from vitroll.commands import common

    loaded, found = [], []
    real_load, real_discover = common.model_from_args, folder.discover
    monkeypatch.setattr(common, "model_from_args", lambda args: loaded.append(args.model) or real_load(args))
    monkeypatch.setattr(folder, "discover", lambda *args, **how: found.append(args) or real_discover(*args, **how))
    assert annotate(str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")) == 2
    assert capsys.readouterr().err == f"vitroll: error: {tmp_path / 'nowhere'}: no such folder or list file\n"
    assert loaded == []
    found.clear()
    assert annotate(str(messy), "--out", str(tmp_path / "out")) == 3
    assert len(found) == 1 and len(loaded) == 1  # the inputs the check found are the run's
    assert len(rows(tmp_path / "out")) == len(GOOD) - 2 + len(BAD)  # a/x.png and b/x.png are in sub-folders


@pytest.mark.parametrize("empty", [",", "", " , "])
def test_an_empty_save_list_is_refused_and_none_asks_for_the_manifest_alone(empty, messy, tmp_path, capsys):
    """``--save ,`` (or a script's empty variable) wrote the manifest alone without a word."""
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        annotate(str(messy), "--out", str(out), "--save", empty)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "vitroll: error: annotate: argument --save: takes one or more of overlay, heatmap, figure, "
        f"comma-separated, or none for the manifest alone; got {empty!r} (see `vitroll annotate --help`)\n")
    assert not out.exists()
    assert annotate(str(messy), "--out", str(out), "--save", "none", "--limit", "2") == 0
    assert [(row["path"], row["status"], "overlay" in row or "heatmap" in row) for row in rows(out)] == [
        ("cmyk.jpg", "ok", False), ("deep16.png", "ok", False)]
    assert sorted(path.name for path in out.iterdir()) == [
        "gallery", "index.html", "manifest.csv", "manifest.jsonl", "settings.json"]


def test_a_dicom_input_is_refused_before_anything_is_written(messy, tmp_path, capsys):
    """The refusal left OUT made, with an empty manifest.jsonl and a manifest.csv of the header alone; then OUT's
    missing parent, made with it."""
    (messy / "scan.png").write_bytes(bytes(128) + b"DICM" + bytes(64))
    out = tmp_path / "new" / "out"
    assert annotate(str(messy), "--out", str(out)) == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: {messy / 'scan.png'}: a DICOM file: this command reads images; `vitroll audit` explains "
        "DICOM and keeps patient data out of its outputs; leave it out of annotate's inputs\n")
    assert list(tmp_path.iterdir()) == [messy]  # nor the parent made for OUT
    (tmp_path / "new" / "kept").mkdir(parents=True)
    assert annotate(str(messy), "--out", str(tmp_path / "new" / "a" / "b")) == 2
    assert list((tmp_path / "new").iterdir()) == [tmp_path / "new" / "kept"]  # a folder that was there stays


def test_none_among_save_kinds_is_refused_as_such(messy, tmp_path, capsys):
    """``--save none,overlay`` was told ``takes … or none …; got 'none'``."""
    with pytest.raises(SystemExit) as exit_info:
        annotate(str(messy), "--out", str(tmp_path / "out"), "--save", "none,overlay")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "vitroll: error: annotate: argument --save: none (the manifest alone) is not combined with other kinds; "
        "got 'none,overlay' (see `vitroll annotate --help`)\n")


def test_the_order_or_repetition_of_save_kinds_is_no_other_setting(messy, tmp_path, capsys):
    """``--save heatmap,overlay`` after ``--save overlay,heatmap`` (the same outputs) was refused as a resume with
    other settings (``save: ["overlay", "heatmap"] → ["heatmap", "overlay"]``)."""
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--save", "overlay,heatmap", "--limit", "1") == 0
    capsys.readouterr()
    assert annotate(str(messy), "--out", str(out), "--save", "heatmap,overlay,heatmap", "--limit", "2") == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("1 ok, 0 failed, 1 skipped (done before)")
    assert folder.AnnotateOptions(save=("figure", "overlay", "figure")).save == ("overlay", "figure")
    assert save_kinds("none,none") == save_kinds(" none ") == ()  # was refused as none "combined with other kinds"
    assert [sorted(kind for kind in ("overlay", "heatmap", "figure") if kind in row) for row in rows(out)] == [
        ["heatmap", "overlay"]] * 2


def test_a_folder_that_kept_save_kinds_as_typed_resumes_with_the_same_command(messy, tmp_path, capsys):
    """A folder made with ``--save heatmap,overlay`` before the kinds were kept in one order recorded ``save`` as
    typed, under a settings hash of its own; the same command was then refused as a resume with other settings
    (``save: ["heatmap", "overlay"] → ["overlay", "heatmap"]``)."""
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--save", "heatmap,overlay", "--limit", "1") == 0
    capsys.readouterr()
    # what such a run left: settings.json and the rows under the hash of save in the order typed
    (new_hash, recorded), = json.loads((out / "settings.json").read_text()).items()
    recorded["save"] = ["heatmap", "overlay"]
    old_hash = manifest.settings_hash(recorded)
    assert old_hash != new_hash
    (out / "settings.json").write_text(json.dumps({old_hash: recorded}))
    (out / "manifest.jsonl").write_text("".join(json.dumps({**row, "settings_hash": old_hash}) + "\n"
                                                for row in rows(out)))
    assert annotate(str(messy), "--out", str(out), "--save", "heatmap,overlay", "--limit", "2") == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("1 ok, 0 failed, 1 skipped (done before)")
    assert [row["settings_hash"] for row in rows(out)] == [old_hash, new_hash]
    assert list(json.loads((out / "settings.json").read_text())) == [old_hash, new_hash]
    # another setting is still told
    assert annotate(str(messy), "--out", str(out), "--save", "overlay", "--limit", "2") == 2
    assert 'save: ["overlay", "heatmap"] → ["overlay"]' in capsys.readouterr().err


def test_a_python_run_with_small_images_and_strips_warns_once_naming_how_many_and_the_python_setting(tmp_path):
    """``vitroll annotate`` tells of images smaller than the patch grid and of strips the model saw little of;
    ``folder.annotate`` gave a Python caller only ``RunSummary.sights``, numbers without a word. It now warns once a
    run (a UserWarning), with the count and the ``preprocessing=`` to pass, no flag."""
    import warnings

    from vitroll.models import load_model
    from vitroll.pipelines.explain import ExplainSettings

    (tmp_path / "in").mkdir()
    for index in range(4):
        Image.fromarray(rgb(2, 2, seed=index)).save(tmp_path / "in" / f"tiny{index}.png")
    Image.fromarray(rgb(20, 400)).save(tmp_path / "in" / "strip.png")
    Image.fromarray(rgb(64, 64)).save(tmp_path / "in" / "square.png")
    model = load_model("vitroll-shapes")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = folder.annotate(tmp_path / "in", tmp_path / "out", model, ExplainSettings(),
                                 identity={"model": "vitroll-shapes"},
                                 options=folder.AnnotateOptions(workers=0, progress=False, save=()))
    assert result.ok == 6
    told = [warning for warning in caught if "patch grid" in str(warning.message)]
    assert len(told) == 1 and told[0].category is UserWarning and told[0].filename == __file__
    assert str(told[0].message).splitlines() == [
        "4 images (tiny0.png, tiny1.png, tiny2.png and 1 more) are told of as the first, tiny0.png: the image is "
        "smaller than the model's patch grid: enlarged to fit, each patch covers 0.25 of its pixels a side, so its "
        "map and classes say next to nothing about it",
        "strip.png: the model saw only 5 % of the image (the middle of its long side) and its map covers only that; "
        "annotate(..., preprocessing=Preprocessing.from_model(model, crop_mode='border', crop_pct=1.0)) shows the "
        "model all of it, padded (crop_mode='squash', crop_pct=1.0: stretched)"]
    assert "--" not in str(told[0].message)


def _shard_worker(rank: int, world_size: int, source: str, out: str, init_file: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        from vitroll.models import load_model
        from vitroll.pipelines.explain import ExplainSettings

        model = load_model("vitroll-shapes")
        result = folder.annotate(source, out, model, ExplainSettings(), identity={"model": "vitroll-shapes"},
                                 options=folder.AnnotateOptions(batch_size=2, workers=0, progress=False))
        assert result.ok == 9 and result.failed == 2, result  # summed over both ranks
        # each rank had one broken file; rank 0 listed only its own
        assert result.failures == [f"{source}/bad_a.png: empty file (0 bytes)",
                                   f"{source}/bad_b.png: not an image Pillow can read"]
    finally:
        torch.distributed.destroy_process_group()


def test_two_gloo_ranks_cover_every_input_exactly_once(tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for index in range(9):
        Image.fromarray(rgb(seed=index)).save(source / f"img{index}.png")
    (source / "bad_a.png").write_bytes(b"")
    (source / "bad_b.png").write_text("not a picture")
    out = tmp_path / "out"
    torch.multiprocessing.spawn(_shard_worker, args=(2, str(source), str(out), str(tmp_path / "init")), nprocs=2)
    final = assert_manifest_matches_folder(out)
    assert [r["path"] for r in final] == ["bad_a.png", "bad_b.png", *(f"img{i}.png" for i in range(9))]
    assert [r["status"] for r in final] == ["error"] * 2 + ["ok"] * 9
    assert not list(out.glob("manifest.rank*.jsonl"))
    assert folder.shard_of(list(range(9)), 0, 2) == [0, 2, 4, 6, 8]
    assert folder.shard_of(list(range(9)), 1, 2) == [1, 3, 5, 7]


@pytest.mark.parametrize("cores, threads", [(None, 2), (1, 2), (2, 2), (6, 3), (16, 8), (128, 8)])
def test_writer_threads_default_to_half_the_cores_from_2_to_8(cores, threads, monkeypatch):
    from vitroll.pipelines import folder

    monkeypatch.setattr(folder.os, "cpu_count", lambda: cores)
    assert folder.AnnotateOptions().writer_threads == threads


def test_a_run_on_other_inputs_says_how_many_earlier_rows_it_kept(tmp_path, capsys):
    for name, seed in (("first/x.png", 1), ("first/y.png", 2), ("second/x.png", 3)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        Image.fromarray(rgb(seed=seed)).save(tmp_path / name)
    out = tmp_path / "out"
    assert annotate(str(tmp_path / "first"), "--out", str(out)) == 0
    assert "kept" not in capsys.readouterr().out
    assert annotate(str(tmp_path / "second"), "--out", str(out)) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("1 ok, 0 failed, 0 skipped (done before), ")
    assert line.endswith("; 1 row of other inputs kept from earlier runs (in the manifest and the gallery)")
    assert sorted(row["path"] for row in assert_manifest_matches_folder(out)) == ["x.png", "y.png"]


@pytest.fixture
def weights(tmp_path):
    """Two random-init timm test ViTs (3 classes, 64 px) saved as safetensors, and two class-name files."""
    import timm
    from safetensors.torch import save_file

    files = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = timm.create_model("test_vit", img_size=64, num_classes=3)
        files.append(tmp_path / f"weights{seed}.safetensors")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, files[-1])
    (tmp_path / "abc.txt").write_text("a\nb\nc\n")
    (tmp_path / "xyz.txt").write_text("x\ny\nz\n")
    return files


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vitroll: error: "), err
    return err[0]


def test_resume_with_other_weights_or_model_settings_is_refused_naming_what_differs(messy, weights, tmp_path, capsys):
    out, checkpoint, names = tmp_path / "out", tmp_path / "model.safetensors", tmp_path / "names.txt"
    checkpoint.write_bytes(weights[0].read_bytes())
    names.write_text("a\nb\nc\n")
    model = ("--model", "test_vit", "--img-size", "64", "--num-classes", "3", "--checkpoint", str(checkpoint),
             "--class-names", str(names), "--limit", "2")
    assert annotate(str(messy), "--out", str(out), *model) == 0
    capsys.readouterr()
    before = {path: path.read_bytes() for path in (out / "overlays").rglob("*.png")}
    (recorded,) = json.loads((out / "settings.json").read_text()).values()
    # the fields earlier versions recorded, no more (the grey models' channels follow the model): their folders resume
    assert set(recorded["preprocessing"]) == {"input_size", "mean", "std", "crop_pct", "interpolation", "crop_mode",
                                              "crop_rounding"}

    checkpoint.write_bytes(weights[1].read_bytes())  # same path, other contents
    assert annotate(str(messy), "--out", str(out), *model) == 2
    line = one_error(capsys)
    assert f"{out}: its outputs were made with other settings (weights: \"checkpoint SHA-256 " in line
    assert line.endswith("rerun with those settings to resume, add --overwrite to redo these inputs with the new "
                         "ones, or choose another --out")
    checkpoint.write_bytes(weights[0].read_bytes())
    names.write_text("x\ny\nz\n")
    assert annotate(str(messy), "--out", str(out), *model) == 2
    assert '(class_names: ["a", "b", "c"] → ["x", "y", "z"])' in one_error(capsys)
    names.write_text("a\nb\nc\n")
    assert annotate(str(messy), "--out", str(out), *model, "--dynamic-img-size") == 2
    assert "(dynamic_img_size: false → true)" in one_error(capsys)
    assert annotate(str(messy), "--out", str(out), *model, "--crop-pct", "1") == 2
    assert "(preprocessing.crop_pct: 0.95 → 1.0)" in one_error(capsys)
    assert {path: path.read_bytes() for path in (out / "overlays").rglob("*.png")} == before  # nothing touched

    assert annotate(str(messy), "--out", str(out), *model) == 0  # the same settings resume
    assert "0 ok, 0 failed, 2 skipped" in capsys.readouterr().out
    names.write_text("x\ny\nz\n")
    assert annotate(str(messy), "--out", str(out), *model, "--overwrite") == 0
    assert {row["top1_name"] for row in rows(out)} <= {"x", "y", "z"}
    assert annotate(str(messy), "--out", str(out), *model) == 0  # the new settings are now the folder's
    assert "0 ok, 0 failed, 2 skipped" in capsys.readouterr().out


def test_an_interrupted_overwrite_resumes_with_its_new_settings(messy, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "4") == 0
    real = interrupt_second_batch(monkeypatch)
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "4", "--alpha", "0.7",
                    "--overwrite") == 130
    monkeypatch.setattr(stream, "explain_batch", real)
    capsys.readouterr()
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "4", "--alpha", "0.7") == 0
    assert "1 ok, 0 failed, 3 skipped" in capsys.readouterr().out
    assert len({row["settings_hash"] for row in rows(out)}) == 1
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "4") == 2
    assert "(alpha: 0.7 → 0.5)" in one_error(capsys)


KILL_AFTER_FIRST_BATCH = """
import os, sys
from vitroll.cli import main
from vitroll.pipelines import manifest
real = manifest.ManifestWriter.append
appended = []
def append(self, rows):
    if appended:  # killed as the second batch's rows were to be written: its files on disk, the first's rows in
        os._exit(9)
    appended.append(rows)
    real(self, rows)
manifest.ManifestWriter.append = append
sys.exit(main(sys.argv[1:]))
"""


def test_outputs_a_killed_run_wrote_without_their_rows_are_removed_by_the_next(messy, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["annotate", str(messy), "--out", str(out), "--recursive", "--batch-size", "2", "--workers", "0",
            "--no-progress"]
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST_BATCH, *argv], capture_output=True, text=True,
                            cwd=Path(__file__).parent.parent)
    assert killed.returncode == 9, killed.stderr
    listed = {row["overlay"] for row in rows(out)}
    assert listed == {"overlays/a/x.png.png", "overlays/b/x.png.png"}
    orphans = {path.relative_to(out).as_posix() for path in (out / "overlays").rglob("*.png")} - listed
    assert orphans, "the second batch's files were on disk before their rows"
    # a run that touches none of those inputs still removes what no row names
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "2") == 0
    assert "0 ok, 0 failed, 2 skipped" in capsys.readouterr().out
    assert {path.relative_to(out).as_posix() for path in (out / "overlays").rglob("*.png")} == listed
    assert_manifest_matches_folder(out)


def test_an_input_that_fails_mid_render_or_mid_write_is_an_error_row_and_leaves_no_files(messy, tmp_path,
                                                                                        monkeypatch, capsys):
    out = tmp_path / "out"
    real = folder.render

    def render(rgb, *args, **kwargs):
        if (rgb != rgb[..., :1]).any():  # cmyk.jpg, not deep16.png (grey) of the three
            raise RuntimeError("no colours left")
        return real(rgb, *args, **kwargs)

    monkeypatch.setattr(folder, "render", render)
    (out / "heatmaps" / "deep16.png.npy").mkdir(parents=True)  # a folder in the way of deep16.png's heatmap
    assert annotate(str(messy), "--out", str(out), "--limit", "3") == 3
    table = {row["path"]: row for row in rows(out)}
    assert table["cmyk.jpg"]["error"] == f"{messy / 'cmyk.jpg'}: cannot be rendered (RuntimeError: no colours left)"
    # was "cannot write outputs (Is a directory)", naming no file
    assert table["deep16.png"]["error"] == (f"{messy / 'deep16.png'}: cannot write outputs: "
                                            f"{out / 'heatmaps' / 'deep16.png.npy'}: Is a directory")
    assert table["empty.jpg"]["status"] == "error"
    assert not (out / "overlays" / "deep16.png.png").exists()  # written before the heatmap failed: removed
    assert not (out / "overlays" / "cmyk.jpg.png").exists()
    assert "cannot be rendered" in capsys.readouterr().err


def test_a_ctrl_c_while_a_batch_s_rows_are_written_keeps_that_batch(messy, tmp_path, monkeypatch, capsys):
    from vitroll.pipelines import manifest

    out = tmp_path / "out"
    real = manifest.ManifestWriter.append
    calls = {"n": 0}

    def interrupted_once(self, rows_of_batch):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # before the first batch's rows are written
        real(self, rows_of_batch)

    monkeypatch.setattr(manifest.ManifestWriter, "append", interrupted_once)
    assert annotate(str(messy), "--out", str(out), "--recursive") == 130
    done = [row["path"] for row in assert_manifest_matches_folder(out) if row["status"] == "ok"]
    assert done[:3] == ["a/x.png", "b/x.png", "cmyk.jpg"]  # the first batch's rows, with its files
    monkeypatch.setattr(manifest.ManifestWriter, "append", real)
    capsys.readouterr()
    assert annotate(str(messy), "--out", str(out), "--recursive") == 3
    assert f"{len(done)} skipped" in capsys.readouterr().out


def test_broken_and_looping_links_are_error_rows_that_name_them_and_the_batch_goes_on(messy, tmp_path, capsys):
    (messy / "gone.png").symlink_to("nowhere.png")
    (messy / "loop.png").symlink_to("loop.png")
    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out)) == 3
    table = {row["path"]: row for row in rows(out)}
    assert table["gone.png"]["error"] == (
        f"{messy / 'gone.png'}: broken symbolic link (to nowhere.png, which does not exist)")
    assert table["loop.png"]["error"] == f"{messy / 'loop.png'}: symbolic link loop (its links lead back to it)"
    assert [path for path, row in table.items() if row["status"] == "ok"] == [
        "cmyk.jpg", "deep16.png", "palette.png", "rgba.png", "rotated.jpg"]
    assert f"{messy / 'loop.png'}: symbolic link loop" in capsys.readouterr().err


def test_a_manifest_that_cannot_be_written_is_one_line_naming_it(messy, tmp_path, monkeypatch, capsys):
    import errno

    from vitroll.pipelines import manifest

    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "2") == 0
    (out / "manifest.jsonl").unlink()
    (out / "manifest.jsonl").mkdir()
    capsys.readouterr()
    assert annotate(str(messy), "--out", str(out), "--recursive") == 2
    assert one_error(capsys) == (f"vitroll: error: {out / 'manifest.jsonl'}: is not a file, so the manifest cannot "
                                 "be read or written; move it out of the way")
    assert (out / "overlays" / "a" / "x.png.png").is_file()  # not taken for outputs without rows
    (out / "manifest.jsonl").rmdir()

    def full_disk(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(manifest.os, "fsync", full_disk)
    assert annotate(str(messy), "--out", str(out), "--recursive") == 2
    assert one_error(capsys) == (f"vitroll: error: {out / 'manifest.jsonl'}: cannot write the manifest (No space "
                                 "left on device); the next run redoes the inputs whose rows are missing")


def test_a_full_disk_while_manifest_csv_is_rewritten_keeps_the_previous_one(messy, tmp_path, monkeypatch, capsys):
    """On a full disk the rewrite of manifest.csv must not leave it holding only its header: it goes through a
    temporary file renamed over the old one, so the previous manifest.csv survives the failed write whole."""
    import errno

    out = tmp_path / "out"
    assert annotate(str(messy), "--out", str(out), "--recursive", "--limit", "2") == 0
    previous = (out / "manifest.csv").read_bytes()
    assert len(previous.decode().splitlines()) == 3  # the header and the two rows
    real_write_bytes = Path.write_bytes

    def full_midway(path: Path, data: bytes) -> int:
        if "manifest.csv" not in path.name:
            return real_write_bytes(path, data)
        real_write_bytes(path, data[:len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full_midway)
    capsys.readouterr()
    assert annotate(str(messy), "--out", str(out), "--recursive") == 2
    assert one_error(capsys) == f"vitroll: error: {out / 'manifest.csv'}: No space left on device"
    assert (out / "manifest.csv").read_bytes() == previous
    assert not [name for name in os.listdir(out) if name.endswith(".tmp")]


def test_an_output_folder_that_cannot_be_written_is_named_not_its_lock_file(messy, tmp_path, monkeypatch, capsys):
    """A read-only --out said 'OUT/.vitroll.lock: Read-only file system' (we run as root: chmod cannot show it)."""
    import errno

    from vitroll.pipelines import manifest

    read_only = tmp_path / "read-only"
    read_only.mkdir()
    real_open, real_mkdir = os.open, Path.mkdir

    def open_on_a_read_only_disk(path, *args, **kwargs):
        if Path(path).parent == read_only:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *args, **kwargs)

    def mkdir_on_a_read_only_disk(path, *args, **kwargs):
        if path.parent == read_only:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(manifest.os, "open", open_on_a_read_only_disk)
    monkeypatch.setattr(Path, "mkdir", mkdir_on_a_read_only_disk)
    assert annotate(str(messy), "--out", str(read_only)) == 2
    assert one_error(capsys) == f"vitroll: error: cannot write to the output folder {read_only} (Read-only file system)"
    assert annotate(str(messy), "--out", str(read_only / "new")) == 2
    assert one_error(capsys) == (f"vitroll: error: cannot make the output folder {read_only / 'new'} "
                                 "(Read-only file system)")
    assert list(read_only.iterdir()) == []


def test_an_input_named_near_the_file_systems_limit_gets_outputs_that_fit(tmp_path, capsys):
    root = tmp_path / "in"
    root.mkdir()
    name = "é" * 125 + ".png"  # 254 bytes: with .png after it, 258
    Image.fromarray(rgb(seed=1)).save(root / name)
    out = tmp_path / "out"
    assert annotate(str(root), "--out", str(out), "--model", "vit_tiny_patch16_224", "--method", "attention") == 0
    [row] = rows(out)
    assert row["status"] == "ok", row["error"]  # was 'cannot write outputs (File name too long)'
    for kind in ("overlay", "heatmap"):
        written = out / row[kind]
        assert written.is_file() and len(written.name.encode()) <= 255 and written.name.startswith("é" * 100)
    assert annotate(str(root), "--out", str(out), "--model", "vit_tiny_patch16_224", "--method", "attention") == 0
    assert "0 ok, 0 failed, 1 skipped" in capsys.readouterr().out


FAILING_RANK_LAUNCHER = '''
import errno, os, sys, time
from vitroll.cli import main
from vitroll.pipelines import manifest

appended = 0
real_append = manifest.ManifestWriter.append


def full_disk(descriptor):
    raise OSError(errno.ENOSPC, "No space left on device")


def append(self, rows):  # rank 1's disk fills up after its first batch, once rank 0 has a row on disk
    global appended
    appended += 1
    if os.environ["RANK"] == "1" and appended > 1:
        rank0_shard = self.path.with_name("manifest.rank0.jsonl")
        while not (rank0_shard.exists() and rank0_shard.stat().st_size):  # a loaded machine may start rank 0 late
            time.sleep(0.1)
        os.fsync = full_disk  # and stays full: the manifest's fsync runs after append returns
    real_append(self, rows)


manifest.ManifestWriter.append = append
sys.exit(main())
'''


def test_a_rank_that_fails_under_torchrun_stops_all_of_them_with_one_line_and_keeps_the_work_done(tmp_path, capsys):
    source = tmp_path / "in"
    source.mkdir()
    for index in range(8):
        Image.fromarray(rgb(seed=index)).save(source / f"img{index}.png")
    launcher = tmp_path / "launcher.py"
    launcher.write_text(FAILING_RANK_LAUNCHER)
    out = tmp_path / "out"
    finished = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(launcher),
         "annotate", str(source), "--out", str(out), "--batch-size", "1", "--workers", "0", "--no-progress"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(folder.__file__).parents[2])})
    assert finished.returncode != 0
    errors = [line for line in finished.stderr.splitlines() if "vitroll: error:" in line]
    assert errors == [f"vitroll: error: {out / 'manifest.rank1.jsonl'}: cannot write the manifest (No space left "
                      "on device); the next run redoes the inputs whose rows are missing"], finished.stderr
    assert "[rank0]" not in finished.stderr and "[rank1]" not in finished.stderr  # no rank's traceback
    done = [row["path"] for row in assert_manifest_matches_folder(out)]  # merged, rank 0's work and rank 1's first
    assert "img1.png" in done and "img0.png" in done and len(done) < 8
    assert not list(out.glob("manifest.rank*.jsonl")) and not (out / ".vitroll.stop").exists()
    assert '"path": "img0.png"' in (out / "gallery" / "rows.js").read_text()
    assert annotate(str(source), "--out", str(out)) == 0
    assert f"{8 - len(done)} ok, 0 failed, {len(done)} skipped" in capsys.readouterr().out


def _torchrun_errors(*argv: str) -> tuple[list[str], str]:
    """The ``vitroll: error:`` lines and the whole stderr of ``torchrun --nproc_per_node 2 -m vitroll *argv``,
    once every rank has ended: checked to have failed (torchrun exits 1 whatever its ranks' statuses)."""
    finished = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "vitroll",
         *argv], capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(folder.__file__).parents[2])})
    assert finished.returncode != 0, finished.stderr
    return [line for line in finished.stderr.splitlines() if "vitroll: error:" in line], finished.stderr


def test_a_bad_model_under_torchrun_is_one_line_not_one_per_rank(tmp_path):
    """An error before the run started (here loading the model) was printed by every rank: K identical lines."""
    Image.fromarray(rgb()).save(tmp_path / "img.png")  # the inputs are looked for first
    errors, stderr = _torchrun_errors("annotate", str(tmp_path), "--out", str(tmp_path / "out"), "--model",
                                      "nonexistent", "--no-progress")
    assert len(errors) == 1 and errors[0].startswith("vitroll: error: unknown model name 'nonexistent'"), stderr


@pytest.mark.parametrize("mistake, told", [
    (["--disagree-below", "0.5"], "vitroll: error: --disagree-below marks rows by their agreement with "
                                  "--compare-with METHOD; give --compare-with"),
    (["--batch-size", "0"], "vitroll: error: annotate: argument --batch-size: must be an integer ≥ 1; got 0 (see "
                            "`vitroll annotate --help`)"),
])
def test_a_usage_error_under_torchrun_is_told_by_rank_0_alone_and_every_rank_fails(mistake, told, tmp_path):
    """Every rank parses the same command line, and each printed its mistake: one line per rank. Rank 1 now waits
    for torchrun to stop it (once rank 0 has exited). Parsing takes well under a second, so torchrun may stop rank 1
    before its interpreter has reached the handler that exits 2 (the next test): either way rank 1 fails, silent."""
    errors, stderr = _torchrun_errors("annotate", str(tmp_path), "--out", str(tmp_path / "out"), *mistake)
    assert errors == [told], stderr
    statuses = re.findall(r"exitcode  : (\S+)", stderr)  # torchrun's report of each rank's status
    assert sorted(statuses) in (["2", "2"], ["-15", "2"]), stderr


def test_a_rank_stopped_while_it_leaves_the_mistake_to_rank_0_exits_with_rank_0s_status(monkeypatch, capsys):
    """torchrun stops the other ranks with SIGTERM once rank 0 has exited: a waiting rank exits 2 as rank 0 did,
    printing nothing."""
    import signal

    stopped_by_torchrun = SimpleNamespace(sleep=lambda seconds: os.kill(os.getpid(), signal.SIGTERM))
    monkeypatch.setattr(ranks, "time", stopped_by_torchrun)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit:
            ranks.leave_to_rank_zero(error_line("annotate: argument --batch-size: …"), 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exit.value.code == 2
    assert capsys.readouterr().err == ""


def test_a_rank_that_rank_0_did_not_stop_tells_a_multi_line_mistake_on_one_line(monkeypatch, capsys):
    """Rank 1's own line, when rank 0 failed otherwise (another node), was formatted by hand: a message with a line
    break (a path that holds one) printed as two lines, not as the CLI's one ``vitroll: error:`` line."""
    import signal

    monkeypatch.setattr(ranks, "RANK_ZERO_PATIENCE_S", 0.0)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        status = ranks.leave_to_rank_zero(error_line("/data/new\nline: not a folder"), 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert status == 2
    assert capsys.readouterr().err == "vitroll: error: /data/new\\nline: not a folder\n"


def test_a_rank_that_rank_0_did_not_stop_tells_a_usage_error_with_one_prefix(monkeypatch, capsys):
    """The parser's line on a rank other than 0 was handed to leave_to_rank_zero finished and prefixed again there:
    ``vitroll: error: vitroll: error: annotate: …``."""
    import signal

    monkeypatch.setattr(ranks, "RANK_ZERO_PATIENCE_S", 0.0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit:
            main(["annotate", "in/", "--out", "out/", "--no-such-option"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("vitroll: error: annotate: unrecognized arguments: --no-such-option")
    assert err.count("vitroll: error:") == 1 and err.count("\n") == 1


def test_a_file_name_that_is_not_utf8_is_annotated_and_the_manifest_names_its_bytes(tmp_path, capsys):
    source = tmp_path / "in"
    source.mkdir()
    latin1 = os.fsencode(source) + b"/caf\xe9.png"  # as an old Windows share or a Latin-1 camera names it
    Image.fromarray(rgb(seed=1)).save(latin1)
    Image.fromarray(rgb(seed=2)).save(source / "caf\\xe9.png")  # a UTF-8 name spelt like its escape
    open(os.fsencode(source) + b"/vid\xe9.png", "wb").close()
    out = tmp_path / "out"
    # the figure's title was 'cannot be rendered (TypeError: set_text(): incompatible function arguments …'
    assert annotate(str(source), "--out", str(out), "--save", "overlay,heatmap,figure") == 3
    printed = capsys.readouterr()
    assert "2 ok, 1 failed, 0 skipped" in printed.out
    assert f"vitroll: failed: {source}/vid\\xe9.png: empty file (0 bytes)" in printed.err.splitlines()
    table = {row["path"]: row for row in rows(out)}
    key = os.fsdecode(b"caf\xe9.png")
    assert os.fsencode(source / key) == latin1 and table[key]["status"] == "ok"
    overlays = {table[key]["overlay"], table["caf\\xe9.png"]["overlay"]}
    assert len(overlays) == 2 and all((out / name).is_file() for name in overlays)
    assert table[key]["overlay"].startswith("overlays/caf\\xe9.png~")  # valid UTF-8, a hash of the bytes after
    assert (out / table[key]["figure"]).is_file()
    # the CSV and the gallery spell the bytes as the output names and the messages do (they had \udce9 and �)
    with (out / "manifest.csv").open(encoding="utf-8", newline="") as handle:
        assert [row["path"] for row in csv.DictReader(handle)] == ["caf\\xe9.png", "caf\\xe9.png", "vid\\xe9.png"]
    shown = json.loads((out / "gallery" / "rows.js").read_text(encoding="utf-8").split(" = ", 1)[1].rstrip(";\n"))
    assert [row["path"] for row in shown] == ["caf\\xe9.png", "caf\\xe9.png", "vid\\xe9.png"]
    assert shown[2]["error"] == f"{source}/vid\\xe9.png: empty file (0 bytes)"
    assert annotate(str(source), "--out", str(out), "--save", "overlay,heatmap,figure") == 3
    assert "0 ok, 1 failed, 2 skipped" in capsys.readouterr().out


def test_a_name_with_line_breaks_keeps_its_reason_and_one_line(tmp_path, capsys):
    """A file named ``bad\\nname.jpg`` was recorded with the reason ``…/bad`` (the message cut at the name's line
    break) and printed on two lines."""
    root = tmp_path / "in"
    root.mkdir()
    Image.fromarray(rgb(seed=1)).save(root / "ok\nname.png")
    Image.fromarray(rgb(seed=2)).save(root / "full.jpg")
    (root / "bad\r\nname.jpg").write_bytes((root / "full.jpg").read_bytes()[:200])
    (root / "full.jpg").unlink()
    out = tmp_path / "out"
    assert annotate(str(root), "--out", str(out)) == folder.EXIT_SOME_FAILED
    table = {row["path"]: row for row in rows(out)}
    reason = f"{root}/bad\\r\\nname.jpg: corrupt or truncated image data"
    assert table["bad\r\nname.jpg"]["error"].startswith(reason)
    assert table["ok\nname.png"]["status"] == "ok"
    assert np.asarray(Image.open(out / table["ok\nname.png"]["overlay"])).shape == (48, 64, 3)
    failed = [line for line in capsys.readouterr().err.splitlines() if "bad" in line]
    assert len(failed) == 1 and failed[0].startswith(f"vitroll: failed: {reason}")


GATED_OPEN = """# test-only: Pillow never opens an image named gate*, until a signal's handler raises
import signal
from pathlib import Path

from PIL import Image

_open = Image.open


def _gated_open(file, *args, **kwargs):
    while Path(str(file)).name.startswith("gate"):
        signal.pause()
    return _open(file, *args, **kwargs)


Image.open = _gated_open
"""
"""A ``sitecustomize`` for the processes a test starts (and the ranks they start): their run cannot finish, whatever
the machine's load, until the test has interrupted it."""


def _processes(*argv: str, gated: Optional[Path] = None, **popen) -> subprocess.Popen:
    """``vitroll annotate ARGV --processes 2``; with ``gated`` (a folder for :data:`GATED_OPEN`), every rank stops at
    its first image named ``gate*``."""
    path = [str(Path(folder.__file__).parents[2])]
    if gated is not None:
        gated.mkdir()
        (gated / "sitecustomize.py").write_text(GATED_OPEN)
        path.insert(0, str(gated))
    return subprocess.Popen(
        [sys.executable, "-m", "vitroll", "annotate", *argv, "--processes", "2", "--batch-size", "1", "--workers", "0",
         "--no-progress", "--device", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(path)}, **popen)


def test_more_processes_than_cpu_cores_are_refused_before_any_starts(tmp_path, capsys, monkeypatch):
    """`--processes 99999` started ranks until it failed with "rank1017.err: Too many open files"."""
    def started(*args, **kwargs):
        raise AssertionError("a rank was started")

    monkeypatch.setattr(ranks.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(ranks.subprocess, "Popen", started)
    source = tmp_path / "in"
    source.mkdir()
    Image.new("RGB", (32, 32)).save(source / "a.png")
    code = main(["annotate", str(source), "--out", str(tmp_path / "out"), "--processes", "5"])
    assert (code, capsys.readouterr().err) == (2, "vitroll: error: --processes 5: more ranks than this machine's 4 "
                                                  "CPU cores, each a Python process with its own model; give at most "
                                                  "4\n")
    assert not (tmp_path / "out").exists()


def test_from_python_more_ranks_than_cpu_cores_name_processes_not_the_flag(monkeypatch):
    monkeypatch.setattr(ranks.os, "cpu_count", lambda: 4)
    with pytest.raises(OptionValueError, match=r"^processes=5: more ranks than this machine's 4 CPU cores, each a "
                                               r"Python process with its own model; give at most 4$"):
        ranks.run_ranks(["annotate", "in", "--out", "out"], 5)


class RankStarted(Exception):
    """Raised by a stand-in for subprocess.Popen: a rank would have started."""


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    """A machine of 16 CPU cores and 2 CUDA devices (as torch sees it), where starting a rank raises RankStarted, and
    a folder of one image to annotate."""
    def started(*args, **kwargs):
        raise RankStarted()

    monkeypatch.setattr(ranks.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(ranks.subprocess, "Popen", started)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    source = tmp_path / "in"
    source.mkdir()
    Image.new("RGB", (32, 32)).save(source / "a.png")
    return source


def test_more_processes_than_cuda_devices_are_refused_in_one_line_before_any_starts(two_gpus, tmp_path, capsys):
    """Each rank k takes cuda:k: a third rank on two GPUs failed in torch.cuda.set_device with a traceback."""
    out = str(tmp_path / "out")
    assert main(["annotate", str(two_gpus), "--out", out, "--processes", "3"]) == 2
    assert capsys.readouterr().err == ("vitroll: error: --processes 3: more ranks than this machine's 2 CUDA devices, "
                                       "rank k taking cuda:k; give at most 2, or --device cpu\n")
    with pytest.raises(OptionValueError, match=r"^processes=3: more ranks than this machine's 2 CUDA devices, rank k "
                                               r"taking cuda:k; give at most 2, or device='cpu'$"):
        ranks.run_ranks(["annotate", str(two_gpus), "--out", out], 3, cuda_devices=2)
    assert not (tmp_path / "out").exists()
    for allowed in (["--processes", "2"], ["--processes", "3", "--device", "cpu"]):  # as many as GPUs; the CPU's cores
        with pytest.raises(RankStarted):
            main(["annotate", str(two_gpus), "--out", out, *allowed])


def test_one_cuda_device_for_several_ranks_is_refused_in_one_line(two_gpus, tmp_path, monkeypatch, capsys):
    """``--device cuda:1 --processes 2`` (or under torchrun) put every rank on cuda:1, which NCCL refuses."""
    out = str(tmp_path / "out")
    assert main(["annotate", str(two_gpus), "--out", out, "--processes", "2", "--device", "cuda:1"]) == 2
    assert capsys.readouterr().err == ("vitroll: error: --device cuda:1 puts all 2 ranks of this machine on one GPU, "
                                       "which NCCL refuses; give --device cuda (rank k takes cuda:k) or --device cpu\n")
    for name, value in {"WORLD_SIZE": 2, "LOCAL_WORLD_SIZE": 2, "RANK": 0, "LOCAL_RANK": 0}.items():
        monkeypatch.setenv(name, str(value))
    assert main(["annotate", str(two_gpus), "--out", out, "--device", "cuda:0"]) == 2
    assert capsys.readouterr().err.startswith("vitroll: error: --device cuda:0 puts all 2 ranks of this machine on one "
                                              "GPU, which NCCL refuses")


@pytest.mark.parametrize("rank", [0, 3])
def test_more_torchrun_ranks_than_cuda_devices_are_one_line_not_a_traceback(two_gpus, tmp_path, monkeypatch, capsys,
                                                                             rank):
    """``torchrun --nproc_per_node 4`` on two GPUs: ranks 2 and 3 failed in torch.cuda.set_device('cuda:3') with a
    traceback each. Every rank now sees the count: rank 0 tells it, the others leave it to rank 0."""
    import signal

    def joined(*args, **kwargs):
        raise AssertionError("the process group was joined")

    monkeypatch.setattr(torch.distributed, "init_process_group", joined)
    monkeypatch.setattr(ranks, "RANK_ZERO_PATIENCE_S", 0.0)
    for name, value in {"WORLD_SIZE": 4, "LOCAL_WORLD_SIZE": 4, "RANK": rank, "LOCAL_RANK": rank}.items():
        monkeypatch.setenv(name, str(value))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = main(["annotate", str(two_gpus), "--out", str(tmp_path / "out")])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (code, capsys.readouterr().err) == (2, "vitroll: error: torchrun started 4 ranks on this machine, more "
                                                  "than its 2 CUDA devices, rank k taking cuda:k; give "
                                                  "--nproc_per_node at most 2, or --device cpu\n")


def test_processes_pass_on_the_exit_status_that_torchrun_turns_into_1(tmp_path):
    """Under torchrun one bad image among many, a usage error and an interrupt all exited 1 (and printed torchrun's
    ChildFailedError report): --processes runs the same ranks and exits as one process does."""
    source = tmp_path / "in"
    source.mkdir()
    for index in range(4):
        Image.fromarray(rgb(seed=index)).save(source / f"img{index}.png")
    (source / "bad.png").write_bytes(b"not a png")
    out = tmp_path / "out"
    finished = _processes(str(source), "--out", str(out))
    stdout, stderr = finished.communicate(timeout=600)
    assert finished.returncode == folder.EXIT_SOME_FAILED, stderr
    assert stderr.splitlines() == [f"vitroll: failed: {source / 'bad.png'}: not an image Pillow can read"]
    assert stdout.startswith("4 ok, 1 failed, 0 skipped")
    assert sorted(row["path"] for row in assert_manifest_matches_folder(out)) == [
        "bad.png", "img0.png", "img1.png", "img2.png", "img3.png"]
    empty = tmp_path / "empty"
    empty.mkdir()
    finished = _processes(str(empty), "--out", str(tmp_path / "out2"))
    stdout, stderr = finished.communicate(timeout=600)
    assert (finished.returncode, stdout, stderr) == (2, "", f"vitroll: error: {empty}: no image files found\n")


@pytest.mark.parametrize("names, written", [
    # rank 0 takes a0, a2, gate0, z0 and rank 1 a1, a3, gate1, z1: each has written a row (a0, a1) at its gate
    (["a0.png", "a1.png", "a2.png", "a3.png", "gate0.png", "gate1.png", "z0.png", "z1.png"], 2),
    # rank 1 has done all its share (a1, a3) and waits for rank 0 at the merge: its Ctrl-C broke the merge off
    # (rank 0 died at the next collective with torch's traceback, and the run exited 1)
    (["a0.png", "a1.png", "a2.png", "a3.png", "gate0.png"], 3),
], ids=["both ranks at work", "one rank done"])
def test_an_interrupt_of_processes_exits_130_and_keeps_the_work_done(names, written, tmp_path, capsys):
    """Ctrl-C to a run of several ranks: each keeps its rows and the run exits 130. (It flaked on a loaded machine:
    the run could finish before the test's Ctrl-C; now rank 0 stops at a gate image that opens only once
    interrupted.)"""
    import signal
    import time

    source = tmp_path / "in"
    source.mkdir()
    for index, name in enumerate(names):
        Image.fromarray(rgb(seed=index)).save(source / name)
    out = tmp_path / "out"
    running = _processes(str(source), "--out", str(out), gated=tmp_path / "gated")
    shards = [out / "manifest.rank0.jsonl", out / "manifest.rank1.jsonl"]
    # the most the ranks can write before the gates (a batch's rows are written once the next batch is explained)
    while sum(len(shard.read_bytes().splitlines()) for shard in shards if shard.exists()) < written:
        assert running.poll() is None, running.communicate()
        time.sleep(0.2)
    running.send_signal(signal.SIGINT)  # as Ctrl-C: to the launcher, which passes it on
    stdout, stderr = running.communicate(timeout=600)
    assert (running.returncode, stderr) == (130, "")
    assert stdout.startswith("interrupted — rerun the same command to resume; 4 ok, 0 failed, 0 skipped")
    # the batch in flight at the gate (a2, and a3 where rank 1 had it in flight) was kept too
    assert sorted(row["path"] for row in assert_manifest_matches_folder(out)) == names[:4]
    assert annotate(str(source), "--out", str(out)) == 0
    assert f"{len(names) - 4} ok, 0 failed, 4 skipped" in capsys.readouterr().out


def test_each_row_says_how_much_of_its_image_the_model_saw(tmp_path):
    """A strip's map covered its middle square only, and nothing in the manifest told which rows were strips."""
    (tmp_path / "in").mkdir()
    Image.fromarray(rgb(20, 400)).save(tmp_path / "in" / "strip.png")
    Image.fromarray(rgb(48, 48)).save(tmp_path / "in" / "square.png")
    assert annotate(str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--crop-pct", "1") == 0
    assert {row["path"]: row["seen"] for row in rows(tmp_path / "out")} == {"square.png": 1.0, "strip.png": 0.05}
    with open(tmp_path / "out" / "manifest.csv", newline="") as handle:
        assert [row["seen"] for row in csv.DictReader(handle)] == ["1.0", "0.05"]


def test_an_image_over_max_pixels_is_an_error_row_and_its_batch_goes_on_and_a_rerun_with_more_reads_it(tmp_path,
                                                                                                     capsys):
    """A large photo was refused with Pillow's "decompression bomb DOS attack" text; now in vitroll's terms, as its
    own row (the limit is read from the header: the small image, 64×48 = 0.003 MP, stands for the large one)."""
    source = tmp_path / "in"
    source.mkdir()
    Image.fromarray(rgb(seed=1)).save(source / "a.png")
    Image.fromarray(rgb(seed=2)).save(source / "b.png")
    png_claiming_size(source / "huge.png", 40_000, 30_000)
    out = tmp_path / "out"
    assert annotate(str(source), "--out", str(out)) == folder.EXIT_SOME_FAILED
    table = {row["path"]: row for row in rows(out)}
    assert [table[name]["status"] for name in ("a.png", "b.png", "huge.png")] == ["ok", "ok", "error"]
    assert table["huge.png"]["error"] == (f"{source / 'huge.png'}: image too large: 1200 MP (40000×30000), over the "
                                          "limit of 500 MP; --max-pixels 1200M reads it if the memory allows (an "
                                          "overlay takes about 20 bytes a pixel)")
    capsys.readouterr()
    Image.fromarray(rgb(seed=3)).save(source / "huge.png")  # stands for the same photo, now allowed
    assert annotate(str(source), "--out", str(out), "--max-pixels", "0.003M") == folder.EXIT_SOME_FAILED
    assert {row["path"]: row["status"] for row in rows(out)} == {"a.png": "ok", "b.png": "ok", "huge.png": "error"}
    assert "over the limit of 0.003 MP" in {row["path"]: row for row in rows(out)}["huge.png"]["error"]
    assert annotate(str(source), "--out", str(out), "--max-pixels", "none") == 0
    assert {row["path"]: row["status"] for row in rows(out)} == {"a.png": "ok", "b.png": "ok", "huge.png": "ok"}


def test_heic_photos_that_annotate_leaves_out_are_counted_with_what_to_do(tmp_path, capsys):
    """A folder of iPhone photos gave "no image files found", and one of JPEGs and HEICs left the HEICs out silently."""
    source = tmp_path / "phone"
    source.mkdir()
    for name in ("IMG_0001.HEIC", "IMG_0002.heic"):
        (source / name).write_bytes(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic" + bytes(200))
    advice = "2 HEIC/HEIF photos (an iPhone's format), which Pillow does not read: save them as JPEG or PNG"
    assert annotate(str(source), "--out", str(tmp_path / "out")) == 2
    assert capsys.readouterr().err == f"vitroll: error: {source}: no image files found, but {advice}\n"
    Image.fromarray(rgb()).save(source / "IMG_0003.jpg")
    assert annotate(str(source), "--out", str(tmp_path / "out")) == 0
    assert capsys.readouterr().err == f"vitroll: warning: {source}: left out {advice}\n"
    assert [row["path"] for row in rows(tmp_path / "out")] == ["IMG_0003.jpg"]


def test_a_run_tells_once_of_its_images_smaller_than_the_patch_grid_and_of_strips_the_model_saw_little_of(tmp_path,
                                                                                                        capsys):
    """``vitroll overlay`` warned of an image smaller than the patch grid and of a strip the model saw a speck of;
    ``vitroll annotate`` said nothing. It now tells of each kind in one line for the run, with a count and a few
    names (not a line per image of a large folder), and the manifest gives each image's ``patch_pixels``."""
    (tmp_path / "in").mkdir()
    for index in range(5):
        Image.fromarray(rgb(2, 2, seed=index)).save(tmp_path / "in" / f"tiny{index}.png")
    Image.fromarray(rgb(20, 400)).save(tmp_path / "in" / "strip.png")
    Image.fromarray(rgb(64, 64)).save(tmp_path / "in" / "square.png")
    assert annotate(str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--crop-pct", "1", "--save", "none") == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "warning" in line] == [
        "vitroll: warning: 5 images (tiny0.png, tiny1.png, tiny2.png and 2 more) are told of as the first, tiny0.png: "
        "the image is smaller than the model's patch grid: enlarged to fit, each patch covers 0.25 of its pixels a "
        "side, so its map and classes say next to nothing about it",
        "vitroll: warning: strip.png: the model saw only 5 % of the image (the middle of its long side) and its map "
        "covers only that; --crop-mode border --crop-pct 1 shows the model all of it, padded (--crop-mode squash "
        "--crop-pct 1: stretched)"]
    # 8 × 8 patches of the testbed: a 2 × 2 image's patch covers 2/8 of a pixel a side, a 400 × 20 strip's 20/8
    assert {row["path"]: row["patch_pixels"] for row in rows(tmp_path / "out")} == {
        **{f"tiny{index}.png": 0.25 for index in range(5)}, "strip.png": 2.5, "square.png": 8.0}
    with open(tmp_path / "out" / "manifest.csv", newline="") as handle:
        assert {row["path"]: row["patch_pixels"] for row in csv.DictReader(handle)}["tiny3.png"] == "0.25"
    assert annotate(str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--crop-pct", "1", "--save", "none") == 0
    assert "warning" not in capsys.readouterr().err  # a resumed run explained none of them again


def test_a_bad_option_is_told_before_a_folder_without_images(tmp_path, capsys):
    """annotate EMPTY --option head_fusion=bogus said only "no image files found": fixing the folder then met the
    option's mistake. The typed settings are now checked before the folder is scanned."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert annotate(str(empty), "--out", str(tmp_path / "out"), "--option", "head_fusion=bogus") == 2
    assert capsys.readouterr().err == ("vitroll: error: option 'head_fusion' of method 'rollout' takes 'mean' | 'max' "
                                       "| 'min'; got 'bogus'\n")
    assert annotate(str(empty), "--out", str(tmp_path / "out")) == 2
    assert capsys.readouterr().err == f"vitroll: error: {empty}: no image files found\n"
