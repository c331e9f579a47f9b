"""`vitroll text` over many texts: the manifest, resuming after an interrupt, and error rows for bad texts."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil

import pytest

from interrupts import pressing_ctrl_c
from vitroll.checkpoints import file_sha256
from vitroll.cli import main
from vitroll.errors import OptionValueError, VitrollError
from vitroll.models import SHIPPED_TRANSFORMERS
from vitroll.pipelines import text_run

TEXTS = ["the film was great", "terrible acting", "a fine day", "the plot was dull", "good fun", "an awful mess"]


def run_text(out, texts_file, *extra: str) -> int:
    return main(["text", "--file", str(texts_file), "--model", "vitroll-text-keyword", "--out", str(out),
                 "--batch-size", "2", *extra])


@pytest.fixture()
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


def test_an_interrupted_run_resumes_to_the_scores_of_an_uninterrupted_one(tmp_path, texts_file, monkeypatch, capsys):
    assert run_text(tmp_path / "whole", texts_file) == 0
    whole = json.loads((tmp_path / "whole" / "scores.json").read_text())

    explain_texts, calls = text_run.explain_texts, []

    def interrupted_in_the_second_batch(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return explain_texts(*args, **kwargs)

    monkeypatch.setattr(text_run, "explain_texts", interrupted_in_the_second_batch)
    out = tmp_path / "resumed"
    assert run_text(out, texts_file) == 130
    assert "interrupted — rerun the same command to resume; 2 texts ok" in capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [(row["index"], row["status"]) for row in rows] == [(0, "ok"), (1, "ok")]
    assert len(json.loads((out / "scores.json").read_text())["texts"]) == 2  # the report of what was done

    assert run_text(out, texts_file) == 0
    assert capsys.readouterr().out.startswith("2 of 6 texts already done\n")
    assert calls[2:] == [TEXTS[2:4], TEXTS[4:6]]  # only the texts not done were explained
    assert json.loads((out / "scores.json").read_text()) == whole
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [row["index"] for row in rows] == list(range(6))
    assert rows[3]["key"] == "4:" + hashlib.sha256(b"the plot was dull").hexdigest()


def test_a_ctrl_c_once_every_text_is_done_lets_the_report_be_written(tmp_path, texts_file, monkeypatch, capsys):
    """A Ctrl-C while the report was written after the last batch broke it off: the run exited 130 without
    scores.json or text.html, though there was nothing left to resume."""
    import signal

    monkeypatch.setattr(text_run, "write_text_report", pressing_ctrl_c(text_run.write_text_report))
    out = tmp_path / "out"
    assert run_text(out, texts_file) == 0
    assert "6 texts ok, 0 failed" in capsys.readouterr().out
    assert len(json.loads((out / "scores.json").read_text())["texts"]) == 6 and (out / "text.html").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_while_the_run_winds_down_keeps_the_report_of_the_texts_done(tmp_path, texts_file,
                                                                                     monkeypatch, capsys):
    """After a first Ctrl-C a second one, while the report of the texts done was written, broke that off."""
    import signal

    monkeypatch.setattr(text_run, "explain_texts", pressing_ctrl_c(text_run.explain_texts, on_calls=(2,)))
    # and again, while the work done is written
    monkeypatch.setattr(text_run, "write_text_report", pressing_ctrl_c(text_run.write_text_report))
    out = tmp_path / "out"
    assert run_text(out, texts_file) == 130
    assert "interrupted — rerun the same command to resume; 2 texts ok" in capsys.readouterr().out
    assert len(json.loads((out / "scores.json").read_text())["texts"]) == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_bad_line_is_an_error_row_and_the_others_are_scored(tmp_path, capsys):
    texts_file = tmp_path / "texts.txt"
    too_long = " ".join(["word"] * 600)  # more tokens than the model has positions
    texts_file.write_text(f"good fun\n\n{too_long}\nterrible acting\n", encoding="utf-8")
    out = tmp_path / "out"
    assert run_text(out, texts_file) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "vitroll: failed: #2: empty text" and err[1].startswith("vitroll: failed: #3: cannot explain it: ")
    report = json.loads((out / "scores.json").read_text())
    assert [(entry["index"], entry["prediction"]) for entry in report["texts"]] == [(0, "positive"), (3, "negative")]
    assert [(failure["index"], failure["error"]) for failure in report["failed"]] == [
        (1, "empty text"), (2, err[1].split(": ", 3)[3])]
    rows = {row["index"]: row for row in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}
    assert [rows[index]["status"] for index in range(4)] == ["ok", "error", "error", "ok"]
    # a rerun redoes only the failed texts
    assert run_text(out, texts_file) == 3
    assert capsys.readouterr().out.startswith("2 of 4 texts already done\n")


def test_resuming_with_other_settings_is_refused_naming_them_and_overwrite_redoes(tmp_path, texts_file, capsys):
    out = tmp_path / "out"
    assert run_text(out, texts_file) == 0
    manifest = (out / "manifest.jsonl").read_text()
    capsys.readouterr()
    assert run_text(out, texts_file, "--method", "attention") == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: {out}: its outputs were made with other settings (method: \"rollout\" → \"attention\"); "
        "rerun with those settings to resume, add --overwrite to redo these inputs with the new ones, or choose "
        "another --out\n")
    assert (out / "manifest.jsonl").read_text() == manifest  # nothing done is lost
    assert run_text(out, texts_file, "--method", "attention", "--overwrite") == 0
    printed = capsys.readouterr().out
    assert "already done" not in printed and "6 texts ok, 0 failed" in printed
    assert json.loads((out / "scores.json").read_text())["method"] == "attention"
    assert run_text(out, texts_file, "--method", "attention") == 0  # the folder's settings are now the new ones
    assert capsys.readouterr().out.startswith("6 of 6 texts already done\n")


@pytest.mark.parametrize(("changed_file", "setting"), [("model.safetensors", "weights"),
                                                        ("tokenizer.json", "tokenizer.tokenizer.json")])
def test_a_file_changed_inside_the_model_folder_is_other_settings(tmp_path, texts_file, capsys, changed_file, setting):
    folder = tmp_path / "model"
    shutil.copytree(SHIPPED_TRANSFORMERS["vitroll-text-keyword"], folder)
    out = tmp_path / "out"
    command = ["text", "--file", str(texts_file), "--model", str(folder), "--out", str(out)]
    assert main(command) == 0
    before = file_sha256(folder / changed_file)
    if changed_file == "tokenizer.json":
        vocabulary = json.loads((folder / changed_file).read_text(encoding="utf-8"))
        vocabulary["model"]["vocab"]["film"], vocabulary["model"]["vocab"]["great"] = (
            vocabulary["model"]["vocab"]["great"], vocabulary["model"]["vocab"]["film"])
        (folder / changed_file).write_text(json.dumps(vocabulary), encoding="utf-8")
    else:
        shutil.copyfile(SHIPPED_TRANSFORMERS["vitroll-text-shortcut"] / changed_file, folder / changed_file)
    after = file_sha256(folder / changed_file)
    capsys.readouterr()
    assert main(command) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"vitroll: error: {out}: its outputs were made with other settings ({setting}: ")
    assert before[:10] in error and after[:10] in error and error.count("\n") == 1


@pytest.mark.parametrize(("options", "message"), [
    (["--start-layer", "9"], "--start-layer 9 is out of range for a model with 2 layers (0…1)"),
    (["--method", "attention", "--option", "layer=7"],
     "--option layer=7 is out of range for a model with 2 layers (-2…1)"),
    (["--method", "integrated_gradients", "--option", "steps=0"], "--option steps must be at least 1; got 0"),
    (["--position", "9"], "--position 9 is outside every text: the longest has 6 tokens (0 the first, -1 the last)"),
    (["--readout", "token_mean", "--position", "1"],
     "position is for readout 'position'; readout 'token_mean' reads no position"),
], ids=["start-layer", "layer", "steps", "position", "position-without-its-readout"])
def test_an_option_value_mistake_stops_the_run_in_one_line(tmp_path, texts_file, capsys, options, message):
    assert run_text(tmp_path / "out", texts_file, *options) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"vitroll: error: {message}"]
    manifest = tmp_path / "out" / "manifest.jsonl"
    assert not manifest.exists() or manifest.read_text() == ""  # no error row per text


def test_from_python_a_position_outside_every_text_and_a_changed_method_name_the_arguments(tmp_path):
    """run_texts told a Python user that ``--position 9`` lies outside every text and to add ``--overwrite`` or
    choose another ``--out``: it names ``position=9``, ``resume=False`` and ``out_dir`` (the CLI's words above)."""
    from vitroll.adapters.tokenizers import registered_tokenizer
    from vitroll.models import load_model

    model = load_model("vitroll-text-keyword")
    run = functools.partial(text_run.run_texts, model, TEXTS, registered_tokenizer(model), tmp_path / "out",
                            identity={"model": "vitroll-text-keyword"})
    with pytest.raises(OptionValueError, match=r"^position=9 is outside every text: the longest has 6 tokens \(0 the "
                                               r"first, -1 the last\)$"):
        run(position=9)
    run()
    with pytest.raises(VitrollError) as raised:
        run(identity={"model": "vitroll-text-keyword", "method": "attention"}, method="attention")
    assert str(raised.value).endswith("add resume=False to redo these inputs with the new ones, or choose another "
                                      "out_dir")


def test_a_position_that_fits_some_texts_fails_only_the_others(tmp_path, texts_file, capsys):
    assert run_text(tmp_path / "out", texts_file, "--position", "4") == 3
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: failed: #2: cannot explain it: position 4 is outside its 4 real tokens",
        "vitroll: failed: #5: cannot explain it: position 4 is outside its 4 real tokens"]


def test_flow_refuses_only_the_texts_with_more_tokens_than_max_tokens(tmp_path, texts_file, capsys):
    assert run_text(tmp_path / "out", texts_file, "--method", "flow", "--option", "max_tokens=5") == 3
    refusal = "attention flow on 6 tokens is impractical (one max-flow per patch over 2·6² edges); use a smaller " \
              "input or pass --option max_tokens=6 knowingly"
    assert capsys.readouterr().err.splitlines() == [f"vitroll: failed: #{number}: cannot explain it: {refusal}"
                                                    for number in (1, 4)]


def test_an_occlusion_window_longer_than_some_texts_fails_only_those(tmp_path, texts_file, capsys):
    # "good fun" is 4 tokens: alone (after its batch failed) the window outgrew the whole batch, which stopped the run
    assert run_text(tmp_path / "out", texts_file, "--method", "occlusion", "--option", "window=5") == 3
    # "a fine day" and "an awful mess" are 5 tokens: the one window hides them all, their scores one value (not the
    # model's doing); it said 1 input, the first batch's, before the run's batches were added up
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: failed: #2: cannot explain it: window 5 is longer than the text (4 tokens)",
        "vitroll: failed: #5: cannot explain it: window 5 is longer than the text (4 tokens)",
        "vitroll: warning: occlusion's map is constant (all 4.959e-05 for the first) for 2 inputs of the run, in 2 of "
        "its batches: window 5 covers the whole text, hiding every token at once, so each gets the same score; a "
        "smaller window tells them apart",
        "vitroll: warning: occlusion's map is near-constant (9.887, all within 0.00058% of it) for 1 input of the run, "
        "in its batch: every window of 5 tokens lowers the score alike; a smaller window may tell them apart, or "
        "a model with untrained (random) weights gives such maps"]
    report = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert [text["index"] for text in report["texts"]] == [0, 2, 3, 5]


def test_the_constant_map_warning_counts_the_inputs_of_every_batch_of_the_run(tmp_path, capsys):
    """It was told once a process, counting the first batch that had such maps only: "for input 0 of the batch" for a
    run of batches of 1 where two texts' one window covers the whole text."""
    texts = tmp_path / "texts.txt"
    texts.write_text("an awful mess\nwhat an awful mess\nan awful mess\n", encoding="utf-8")
    assert main(["text", "--file", str(texts), "--model", "vitroll-text-keyword", "--out", str(tmp_path / "out"),
                 "--batch-size", "1", "--method", "occlusion", "--option", "window=5"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vitroll: warning:")]
    assert warnings == [
        "vitroll: warning: occlusion's map is constant (all 9.887 for the first) for 2 inputs of the run, in 2 of its "
        "batches: window 5 covers the whole text, hiding every token at once, so each gets the same score; a smaller "
        "window tells them apart",
        "vitroll: warning: occlusion's map is near-constant (9.887, all within 0.00058% of it) for 1 input of the run, "
        "in its batch: every window of 5 tokens lowers the score alike; a smaller window may tell them apart, or a "
        "model with untrained (random) weights gives such maps"]


def test_a_position_alone_reads_that_position(tmp_path, texts_file):
    def scores(name: str, *options: str) -> list:
        assert run_text(tmp_path / name, texts_file, "--method", "attention", *options) == 0
        return [[token["score"] for token in text["tokens"]]
                for text in json.loads((tmp_path / name / "scores.json").read_text())["texts"]]

    alone = scores("alone", "--position", "1")
    assert alone == scores("with-readout", "--readout", "position", "--position", "1")
    assert alone != scores("class-token")


def test_one_text_is_counted_as_one_text(tmp_path, capsys):
    texts_file = tmp_path / "texts.txt"
    texts_file.write_text("good fun\n", encoding="utf-8")
    assert run_text(tmp_path / "out", texts_file) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("1 text ok, 0 failed -> ")


def test_a_text_argument_not_in_utf8_is_refused_in_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    import os

    latin1 = os.fsdecode(b"caf\xe9 great")  # what a shell in a Latin-1 locale passes for "café great"
    monkeypatch.setattr(text_run, "run_texts", lambda *args, **kwargs: pytest.fail("the run started"))
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main(["text", "a fine day", latin1, "--model", "vitroll-text-keyword", "--out", str(tmp_path / "out")])
    assert exited.value.code == 2  # was "vitroll: error: 'utf-8' codec can't encode character '\\udce9' …" after load
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: error: text: argument TEXT: 'caf\\xe9 great' is not UTF-8 text: byte 0xe9 at offset 3: give texts in "
        "UTF-8 (see `vitroll text --help`)"]
    assert not (tmp_path / "out").exists()


def test_control_characters_of_a_text_are_spelt_in_the_terminal_not_sent_to_it(tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("great \x1b[2Jfun\n", encoding="utf-8")  # \x1b[2J clears a terminal's screen
    assert run_text(tmp_path / "out", texts) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out  # was printed as it is, in the shaded text and in the words
    assert "[CLS]great \\x1b[2Jfun[SEP]" in out
    scores = json.loads((tmp_path / "out" / "scores.json").read_text(encoding="utf-8"))
    assert scores["texts"][0]["text"] == "great \x1b[2Jfun"  # the files keep the text as it is


def test_control_characters_of_a_class_name_are_spelt_in_the_heading(tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(SHIPPED_TRANSFORMERS["vitroll-text-keyword"], folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["id2label"] = {"0": "nega\x1b[2Jtive", "1": "posi\x1b[2Jtive"}  # a model's config is not ours
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert main(["text", "great fun", "--model", str(folder), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out  # the heading printed the class name as it is
    assert "#1  prediction: posi\\x1b[2Jtive (1.000)" in out


def test_a_position_outside_texts_of_one_token_counts_one_token_not_one_tokens(tmp_path):
    """A decoder's one-token texts and ``position=-2`` were told "the longest has 1 tokens"."""
    pytest.importorskip("transformers")
    from small_tokenizers import bpe_tokenizer

    with pytest.raises(OptionValueError, match=r"^position=-2 is outside every text: the longest has 1 token \(0 the "
                                               r"first, -1 the last\)$"):
        text_run._check_position_fits_some(["cat", "cat"], bpe_tokenizer(tmp_path), -2)
