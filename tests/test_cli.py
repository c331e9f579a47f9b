"""The overlay command end to end, and its one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitroll.cli import main

ROOT = Path(__file__).resolve().parents[1]
PHOTO = ROOT / "sample_images" / "cat.jpg"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_overlay_writes_original_sized_png_and_prints_top5(tmp_path, capsys):
    code, out, err = run(capsys, "overlay", str(PHOTO), "--model", "vit_tiny_patch16_224", "--out", str(tmp_path),
                         "--figure", "--device", "cpu")
    assert code == 0, err
    written = np.asarray(Image.open(tmp_path / "cat_rollout.png"))
    assert written.shape == (*Image.open(PHOTO).size[::-1], 3)
    assert (tmp_path / "cat_rollout_figure.png").stat().st_size > 10_000
    assert len([line for line in out.splitlines() if line.strip()[:2] in {f"{i}." for i in range(1, 6)}]) == 5
    assert "random weights" in err


def test_same_named_inputs_do_not_overwrite_each_other(tmp_path, capsys):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        Image.open(PHOTO).resize((64, 48)).save(tmp_path / folder / "x.png")
    code, _, err = run(capsys, "overlay", str(tmp_path / "a" / "x.png"), str(tmp_path / "b" / "x.png"),
                       "--model", "vit_tiny_patch16_224", "--out", str(tmp_path / "out"), "--method", "attention")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x-2_attention.png", "x_attention.png"]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("vitroll: error")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_missing_file(tmp_path, capsys):
    code, _, err = run(capsys, "overlay", str(tmp_path / "nope.jpg"), "--model", "vit_tiny_patch16_224",
                       "--out", str(tmp_path))
    assert code != 0
    assert one_error_line(err).endswith("nope.jpg: no such file")


def test_unreadable_image_is_reported_and_the_good_one_still_written(tmp_path, capsys):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"this is not a jpeg")
    code, _, err = run(capsys, "overlay", str(bad), str(PHOTO), "--model", "vit_tiny_patch16_224",
                       "--out", str(tmp_path / "out"))
    assert code != 0
    assert "bad.jpg: not an image" in one_error_line(err)
    assert (tmp_path / "out" / "cat_rollout.png").exists()


def test_unknown_model_name(tmp_path, capsys):
    code, _, err = run(capsys, "overlay", str(PHOTO), "--model", "vit_tiny_patch16_22", "--out", str(tmp_path))
    assert code == 2
    assert "unknown model name 'vit_tiny_patch16_22'; did you mean vit_tiny_patch16_224" in one_error_line(err)


def test_pretrained_without_network_fails_fast_with_advice(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("vitroll.models.hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    code, _, err = run(capsys, "overlay", str(PHOTO), "--model", "vit_tiny_patch16_224", "--pretrained",
                       "--out", str(tmp_path))
    assert code == 2
    assert "--checkpoint" in one_error_line(err)


def test_cli_rejects_bad_option_values(tmp_path, capsys):
    for option, value in (("--discard-ratio", "1.5"), ("--head-fusion", "median")):
        with pytest.raises(SystemExit) as exit_info:
            main(["overlay", str(PHOTO), "--model", "vit_tiny_patch16_224", "--out", str(tmp_path), option, value])
        assert exit_info.value.code == 2
        assert f"argument {option}: " in one_error_line(capsys.readouterr().err)
