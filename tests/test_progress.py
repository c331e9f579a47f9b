"""The progress bar of annotate, text and audit: a live bar in a terminal, plain lines now and then when piped."""

from __future__ import annotations

import contextlib
import io
import types
from pathlib import Path

import numpy as np
import pytest
import tqdm.std
from PIL import Image

import vitroll.pipelines.progress as progress
from vitroll.cli import main
from vitroll.pipelines.progress import PlainProgress, plain_line, progress_bar


class Terminal(io.StringIO):
    """What a terminal shows the bar on, as tqdm sees it."""

    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_live_bar_and_a_pipe_plain_lines():
    assert type(progress_bar(3, "file", stream=Terminal())) is not PlainProgress
    assert type(progress_bar(3, "file", stream=io.StringIO())) is PlainProgress
    assert progress_bar(3, "file", stream=io.StringIO(), shown=False).disable


def test_a_plain_line_says_counts_share_times_and_postfix():
    meter = {"n": 40, "total": 300, "elapsed": 62.0, "rate": 0.5, "unit": "file", "postfix": "file 41: 3/9 frames"}
    assert plain_line(meter) == ("vitroll: progress: 40/300 files (13 %), 01:02 elapsed, about 08:40 left; "
                                 "file 41: 3/9 frames")
    assert plain_line({**meter, "n": 0, "rate": None, "elapsed": 0.0, "postfix": ""}) == (
        "vitroll: progress: 0/300 files (0 %), 00:00 elapsed")


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The time the bar sees (its own clock and tqdm's), moved by the test, not by how long the test takes."""
    now = [1000.0]
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    return now


def test_a_run_shorter_than_the_interval_writes_no_line_when_piped(clock):
    stream = io.StringIO()
    bar = progress_bar(3, "file", stream=stream)
    clock[0] += 29.0
    bar.update(2)
    bar.set_postfix_str("file 3: 1/2 frames")
    bar.clear()
    bar.refresh()
    bar.update(1)
    bar.close()
    assert stream.getvalue() == ""


def test_piped_a_line_comes_once_the_interval_has_passed_then_not_again_before_the_next(clock):
    stream = io.StringIO()
    bar = progress_bar(300, "file", stream=stream)
    clock[0] += 29.0
    bar.update(39)
    assert stream.getvalue() == ""
    clock[0] += 1.0
    bar.update(1)  # 40 files in 30 s: 260 left at 4 every 3 s
    assert stream.getvalue() == "vitroll: progress: 40/300 files (13 %), 00:30 elapsed, about 03:15 left\n"
    clock[0] += 29.0
    bar.update(10)
    bar.set_postfix_str("file 51: 3/9 frames")
    bar.close()
    assert stream.getvalue().count("\n") == 1


def _annotate(tmp_path: Path) -> list[str]:
    folder = tmp_path / "images"
    folder.mkdir()
    for index in range(3):
        Image.fromarray(np.full((32, 32, 3), 60 * index, np.uint8)).save(folder / f"{index}.png")
    return ["annotate", str(folder), "--out", str(tmp_path / "out"), "--model", "vitroll-shapes", "--batch-size", "1",
            "--workers", "0"]


def _audit(tmp_path: Path) -> list[str]:
    from dicom_factory import body_phantom, write_dicom

    pytest.importorskip("pydicom", minversion="3.0")
    (tmp_path / "in").mkdir()
    for index in range(3):
        write_dicom(tmp_path / "in" / f"{index}.dcm", body_phantom(), number=index + 1)
    return ["audit", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--model", "vitroll-shapes",
            "--keep-burned-in-text", "--batch-size", "1"]


def _text(tmp_path: Path) -> list[str]:
    pytest.importorskip("transformers")
    return ["text", *(f"the cat sat {index}" for index in range(21)), "--model", "vitroll-text-keyword", "--out",
            str(tmp_path / "out"), "--batch-size", "4"]


@pytest.mark.parametrize("command", [_annotate, _audit, _text], ids=["annotate", "audit", "text"])
def test_piped_the_bar_writes_plain_lines_and_no_carriage_return(command, tmp_path, monkeypatch):
    """Into a file or a CI log, each bar wrote its carriage-return updates, which pile up as one endless line."""
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)  # a line at every update: what a long run writes now and then
    argv = command(tmp_path)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        assert main(argv) == 0
    lines = err.getvalue().splitlines()
    assert argv[0] != "annotate" or " files/s" in out.getvalue()
    assert "\r" not in err.getvalue() and all(line.startswith("vitroll: ") for line in lines), err.getvalue()
    total = 21 if argv[0] == "text" else 3
    done = [line.split()[2] for line in lines if line.startswith("vitroll: progress: ")]
    assert done[-1] == f"{total}/{total}" and done == sorted(done, key=lambda count: int(count.split("/")[0]))
    # annotate said "images", but counts each file of an image's name, an unreadable one too; README says "files"
    units = {line.split()[3] for line in lines if line.startswith("vitroll: progress: ")}
    assert units == {"texts" if argv[0] == "text" else "files"}


def test_a_resumed_text_run_times_only_the_texts_left(clock):
    """The texts a resumed ``vitroll text`` skips were counted done at once: 280 of 300 resumed, the first line said
    about 00:00 left whatever the rate of the texts still to do."""
    from rich.console import Console

    from vitroll.commands.text import _announce
    from vitroll.pipelines.text_run import TextRunSummary

    stream, said = io.StringIO(), io.StringIO()
    bar = progress_bar(300, "text", stream=stream)
    _announce(Console(file=said), bar, TextRunSummary(total=300, done_before=280))
    assert said.getvalue() == "280 of 300 texts already done\n"
    clock[0] += 30.0
    bar.update(4)  # 4 texts in 30 s, 16 left
    assert stream.getvalue() == "vitroll: progress: 4/20 texts (20 %), 00:30 elapsed, about 02:00 left\n"
