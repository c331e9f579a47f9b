"""The overlay command end to end, and its one-line errors."""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from claimed_size import png_claiming_size
from vitroll.cli import build_parser, main
from vitroll.io.names import utf8_name

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


def test_figures_of_files_named_with_dollars_are_written_with_the_name_as_it_is(tmp_path, capsys):
    names = ["x$\\frac$y.png", "price_$5 and $x^2.png"]
    for name in names:
        Image.open(PHOTO).resize((64, 48)).save(tmp_path / name)
    code, out, err = run(capsys, "overlay", *(str(tmp_path / name) for name in names), "--model",
                         "vit_tiny_patch16_224", "--out", str(tmp_path / "out"), "--figure", "--method", "attention")
    assert code == 0, err  # x$\frac$y.png stopped the batch with a three-line mathtext ParseSyntaxException
    assert "error" not in err and out.count(" -> ") == 2
    figures = sorted(p.name for p in (tmp_path / "out").glob("*_figure.png"))
    assert figures == ["price_$5 and $x^2_attention_figure.png", "x$\\frac$y_attention_figure.png"]

def test_same_named_inputs_do_not_overwrite_each_other(tmp_path, capsys):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        Image.open(PHOTO).resize((64, 48)).save(tmp_path / folder / "x.png")
    code, _, err = run(capsys, "overlay", str(tmp_path / "a" / "x.png"), str(tmp_path / "b" / "x.png"),
                       "--model", "vit_tiny_patch16_224", "--out", str(tmp_path / "out"), "--method", "attention")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["x-2_attention.png", "x_attention.png"]


def test_overlay_names_never_collide_nor_replace_an_input_and_a_repeated_input_is_explained_once(tmp_path, capsys):
    out = tmp_path / "out"
    for name in ("a/x.png", "b/x.png", "c/x-2.png", "out/y.png", "out/y_attention.png"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        Image.open(PHOTO).resize((32, 24)).save(tmp_path / name)
    before = (out / "y_attention.png").read_bytes()
    images = [str(tmp_path / name) for name in ("a/x.png", "b/x.png", "c/x-2.png", "out/y.png", "out/y_attention.png")]
    code, stdout, err = run(capsys, "overlay", *images, images[0], "--model", "vit_tiny_patch16_224", "--out", str(out),
                            "--method", "attention")
    assert code == 0, err
    assert (out / "y_attention.png").read_bytes() == before  # the input y_attention.png is not y.png's overlay
    assert sorted(p.name for p in out.iterdir()) == [
        "x-2_attention.png", "x-3_attention.png", "x_attention.png", "y-2_attention.png", "y.png",
        "y_attention.png", "y_attention_attention.png"]
    assert stdout.count(" -> ") == 5  # a/x.png given twice is explained once


def test_unique_names_skip_suffixes_other_names_already_have():
    from vitroll.pipelines.single import text_slugs, unique_names

    assert unique_names(["x", "x", "x-2"]) == ["x", "x-3", "x-2"]
    assert unique_names(["x", "y"], taken={"x"}) == ["x-2", "y"]
    assert text_slugs(["a dog", "A dog!", "a dog 2"]) == ["a-dog", "a-dog-3", "a-dog-2"]


def one_error_line(err: str, kind: str = "error") -> str:
    """The one ``vitroll: error`` line of ``err`` (``kind="failed"``: the one line of an input that failed while the
    others went on)."""
    lines = [line for line in err.splitlines() if line.startswith(f"vitroll: {kind}")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "vitroll: error" not in err.replace(lines[0], ""), err
    return lines[0]


def test_missing_file(tmp_path, capsys):
    code, _, err = run(capsys, "overlay", str(tmp_path / "nope.jpg"), "--model", "vit_tiny_patch16_224",
                       "--out", str(tmp_path))
    assert code == 3  # as caption, text, annotate and audit: some input failed (was 1)
    assert one_error_line(err, "failed") == f"vitroll: failed: {tmp_path / 'nope.jpg'}: no such file"


def test_names_with_line_breaks_are_printed_on_one_line_each(tmp_path, capsys):
    """Each printed name ran on over two lines (``vitroll: failed: …/bad`` then ``name.jpg: corrupt …``), and a
    terminal escape in a name coloured the rest of the terminal."""
    Image.open(PHOTO).resize((64, 48)).save(tmp_path / "ok\nname.png")
    (tmp_path / "bad\x1b[31mname.jpg").write_bytes(PHOTO.read_bytes()[:300])
    code, out, err = run(capsys, "overlay", str(tmp_path / "ok\nname.png"), str(tmp_path / "bad\x1b[31mname.jpg"),
                         "--model", "vit_tiny_patch16_224", "--out", str(tmp_path / "out"), "--method", "attention")
    assert code == 3
    assert one_error_line(err, "failed").startswith(
        f"vitroll: failed: {tmp_path}/bad\\x1b[31mname.jpg: corrupt or truncated image data")
    assert out.splitlines()[0] == f"{tmp_path}/ok\\nname.png -> {tmp_path}/out/ok\\nname_attention.png"
    assert np.asarray(Image.open(tmp_path / "out" / "ok\nname_attention.png")).shape == (48, 64, 3)
    code, _, err = run(capsys, "annotate", str(tmp_path / "no\nsuch"), "--out", str(tmp_path / "out2"))
    assert (code, err) == (2, f"vitroll: error: {tmp_path}/no\\nsuch: no such folder or list file\n")


def test_unreadable_image_is_reported_and_the_good_one_still_written(tmp_path, capsys):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"this is not a jpeg")
    code, _, err = run(capsys, "overlay", str(bad), str(PHOTO), "--model", "vit_tiny_patch16_224",
                       "--out", str(tmp_path / "out"))
    assert code == 3
    assert "bad.jpg: not an image" in one_error_line(err, "failed")
    assert (tmp_path / "out" / "cat_rollout.png").exists()


def test_an_image_over_max_pixels_is_refused_in_one_line_and_the_others_written(tmp_path, capsys):
    """A 144 MP photo was refused with Pillow's "could be decompression bomb DOS attack" text and no way out; now
    the limit is 500 MP, and a larger image is refused in vitroll's words, from its header."""
    huge = png_claiming_size(tmp_path / "huge.png", 30_000, 20_000)
    code, out, err = run(capsys, "overlay", str(huge), str(PHOTO), "--model", "vit_tiny_patch16_224",
                         "--out", str(tmp_path / "out"), "--method", "attention")
    assert code == 3
    assert one_error_line(err, "failed") == (
        f"vitroll: failed: {huge}: image too large: 600 MP (30000×20000), over the limit of 500 MP; --max-pixels 600M "
        "reads it if the memory allows (an overlay takes about 20 bytes a pixel)")
    assert (tmp_path / "out" / "cat_attention.png").exists() and not (tmp_path / "out" / "huge_attention.png").exists()
    code, out, err = run(capsys, "overlay", str(PHOTO), "--model", "vit_tiny_patch16_224", "--out",
                         str(tmp_path / "out"), "--method", "attention", "--max-pixels", "0.1M")
    width, height = Image.open(PHOTO).size
    assert code == 3 and f"{width * height / 1e6:.3g} MP ({width}×{height}), over the limit of 0.1 MP" in err
    for value in ("0", "0.5", "lots", "inf", "nan"):  # inf said "must be at least 1 pixel", not what it takes
        with pytest.raises(SystemExit) as exit_info:
            main(["overlay", str(PHOTO), "--out", str(tmp_path), "--max-pixels", value])
        assert (exit_info.value.code, capsys.readouterr().err) == (
            2, "vitroll: error: overlay: argument --max-pixels: expected a number of pixels ≥ 1 (250000000, 250M or "
               f"250MP, 1G or 1GP) or none for no limit; got {value!r} (see `vitroll overlay --help`)\n")


def test_max_pixels_reads_the_units_its_refusal_writes():
    """The refusal says "600 MP", and --max-pixels 600MP was refused: megapixels and gigapixels read with or without
    their P, in any case."""
    from vitroll.commands.arguments import pixel_count

    assert [pixel_count(text) for text in ("600MP", "600mp", "600M", "1GP", "1g", " 2.5M ", "2500", "none")] == [
        600_000_000, 600_000_000, 600_000_000, 1_000_000_000, 1_000_000_000, 2_500_000, 2500, None]
    for text in ("MP", "P", "5PP", "600 MPx"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a number of pixels"):
            pixel_count(text)


def test_an_output_that_cannot_be_written_fails_that_image_alone(tmp_path, capsys):
    for name in ("a.png", "b.png"):
        Image.open(PHOTO).resize((32, 24)).save(tmp_path / name)
    (tmp_path / "out" / "a_rollout.png").mkdir(parents=True)  # a folder where a's overlay goes
    code, stdout, err = run(capsys, "overlay", str(tmp_path / "a.png"), str(tmp_path / "b.png"),
                            "--model", "vit_tiny_patch16_224", "--out", str(tmp_path / "out"))
    assert code == 3
    assert one_error_line(err, "failed") == (f"vitroll: failed: {tmp_path / 'a.png'}: cannot write outputs: "
                                   f"{tmp_path / 'out' / 'a_rollout.png'}: Is a directory")
    assert (tmp_path / "out" / "b_rollout.png").is_file() and f"{tmp_path / 'b.png'} -> " in stdout
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temporary file left


def test_unknown_model_name(tmp_path, capsys):
    code, _, err = run(capsys, "overlay", str(PHOTO), "--model", "vit_tiny_patch16_22", "--out", str(tmp_path))
    assert code == 2
    assert "unknown model name 'vit_tiny_patch16_22'; did you mean vit_tiny_patch16_224" in one_error_line(err)


def test_pretrained_without_network_fails_fast_with_advice(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("vitroll.models.hub.hub_reachable", lambda timeout=3.0: False)
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


def test_a_file_named_like_an_option_is_named_in_the_error(tmp_path, capsys, monkeypatch):
    """``vitroll overlay -scan.png`` said only that IMAGE was missing: argparse reads -scan.png as an option."""
    monkeypatch.chdir(tmp_path)
    Image.open(PHOTO).resize((32, 24)).save(tmp_path / "-scan.png")
    hint = "-scan.png is a file read as an option: write ./-scan.png (or put it after --, which ends the options)"
    for images in (["-scan.png"], [str(PHOTO), "-scan.png"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["overlay", *images, "--model", "vit_tiny_patch16_224", "--out", "out"])
        assert exit_info.value.code == 2
        assert f"; {hint} (see `vitroll overlay --help`)" in one_error_line(capsys.readouterr().err)
    code, out, err = run(capsys, "overlay", "--model", "vit_tiny_patch16_224", "--out", "out", "--method", "attention",
                         "--", "-scan.png")
    assert code == 0 and out.startswith("-scan.png -> out/-scan_attention.png"), err


def test_a_folder_named_like_an_option_is_called_a_folder(tmp_path, capsys, monkeypatch):
    """``vitroll annotate -dashdir`` called the folder a file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-dashdir").mkdir()
    hint = "-dashdir is a folder read as an option: write ./-dashdir (or put it after --, which ends the options)"
    for command in ("annotate", "evaluate"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "-dashdir", "--out", "out"])
        assert exit_info.value.code == 2
        assert f"; {hint} (see `vitroll {command} --help`)" in one_error_line(capsys.readouterr().err)


def test_a_file_named_like_an_option_after_the_double_dash_gets_no_hint(tmp_path, capsys, monkeypatch):
    """After ``--`` it is an input already: another error must not tell the user to put it there."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-scan.png").touch()
    with pytest.raises(SystemExit):
        main(["overlay", "--method", "nope", "--", "-scan.png"])
    error = one_error_line(capsys.readouterr().err)
    assert "invalid choice: 'nope'" in error and "read as an option" not in error


def test_inputs_named_near_the_file_systems_limit_get_short_distinct_stable_output_names(tmp_path, capsys):
    stems = ["漢" * 82 + "a", "漢" * 82 + "b"]  # 247 bytes of UTF-8 each: their _attention.png did not fit
    for stem in stems:
        Image.open(PHOTO).resize((32, 24)).save(tmp_path / f"{stem}.png")
    argv = ["overlay", *(str(tmp_path / f"{stem}.png") for stem in stems), "--model", "vit_tiny_patch16_224",
            "--out", str(tmp_path / "out"), "--method", "attention", "--figure"]
    code, _, err = run(capsys, *argv)
    assert code == 0, err  # was: '…/.漢漢…_attention.png.PID.tmp: File name too long' for each
    names = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert len(names) == 4 and all(len(name.encode()) <= 255 for name in names)
    overlays = [name for name in names if name.endswith("_attention.png")]
    assert len(overlays) == 2 and all(name.startswith("漢" * 50) and "~" in name for name in overlays)
    assert sorted(name.replace("_attention.png", "_attention_figure.png") for name in overlays) == [
        name for name in names if name.endswith("_figure.png")]
    assert run(capsys, *argv)[0] == 0
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == names  # the same names again


def test_an_input_named_in_latin1_gets_outputs_named_as_annotate_names_them(tmp_path, capsys):
    latin1 = os.fsencode(tmp_path) + b"/caf\xe9.png"
    Image.open(PHOTO).resize((32, 24)).save(latin1)
    code, out, err = run(capsys, "overlay", os.fsdecode(latin1), "--model", "vit_tiny_patch16_224", "--out",
                         str(tmp_path / "out"), "--method", "attention", "--figure")
    assert code == 0, err  # was "vitroll: error: 'utf-8' codec can't encode character '\\udce9' …", also when printed
    assert f"{tmp_path}/caf\\xe9.png -> " in out
    stem = utf8_name(os.fsdecode(b"caf\xe9"))
    assert stem.startswith("caf\\xe9~")
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [f"{stem}_attention.png",
                                                                         f"{stem}_attention_figure.png"]


def test_names_are_printed_readable_while_a_command_runs_and_the_streams_handlers_come_back_after(tmp_path,
                                                                                                monkeypatch):
    streams = {name: io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict") for name in ("stdout", "stderr")}
    for name, stream in streams.items():
        monkeypatch.setattr(sys, name, stream)
    missing = os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.png")
    assert main(["overlay", missing, "--out", str(tmp_path / "out")]) == 3
    streams["stderr"].flush()
    assert f"{tmp_path}/caf\\xe9.png: no such file" in streams["stderr"].buffer.getvalue().decode()
    assert [stream.errors for stream in streams.values()] == ["strict", "strict"]  # was vitroll.readable for good


def test_a_folder_given_to_overlay_points_to_annotate_before_any_model_is_loaded(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "my scans"
    folder.mkdir()
    monkeypatch.setattr("vitroll.commands.common.model_from_args", lambda args: pytest.fail("model loaded"))
    code, out, err = run(capsys, "overlay", str(PHOTO), str(folder), "--model", "vit_tiny_patch16_224",
                         "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert err == (f"vitroll: error: {folder} is a folder: `vitroll overlay` takes image files; for a folder use "
                   f"`vitroll annotate '{folder}' --out OUT`\n")  # was '…: is a directory, not an image'


def test_a_folder_given_to_caption_asks_for_its_images_before_any_model_is_loaded(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "scans"
    folder.mkdir()
    monkeypatch.setattr("vitroll.commands.common.load_model_of_kind",
                        lambda *args, **kwargs: pytest.fail("model loaded"))
    code, out, err = run(capsys, "caption", str(folder), "--model", "vitroll-caption-shapes", "--out", str(tmp_path))
    assert code == 2 and out == ""
    assert err == (f"vitroll: error: {folder} is a folder: `vitroll caption` takes image files; pass the folder's "
                   f"images, e.g. {folder}/*.png\n")  # was 'vitroll: failed: …: is a directory, not an image', exit 3


@pytest.mark.parametrize("command", ["compare", "caption"])
def test_a_folder_named_with_its_trailing_slash_is_advised_without_a_double_one(command, tmp_path, capsys):
    """``vitroll compare photos/ …`` (a shell completes a folder with ``/``) advised ``photos//*.png``."""
    folder = tmp_path / "photos"
    folder.mkdir()
    models = {"compare": ["--model", "vitroll-shapes", "--model", "vitroll-shapes"],
              "caption": ["--model", "vitroll-caption-shapes"]}[command]
    code, out, err = run(capsys, command, f"{folder}/", *models, "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert err == (f"vitroll: error: {folder}/ is a folder: `vitroll {command}` takes image files; pass the "
                   f"folder's images, e.g. {folder}/*.png\n")


def test_a_folder_given_to_compare_asks_for_its_images_before_any_model_is_loaded(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "scans"
    folder.mkdir()
    monkeypatch.setattr("vitroll.commands.compare.explainers_from_args", lambda args: pytest.fail("models loaded"))
    code, out, err = run(capsys, "compare", str(PHOTO), str(folder), "--model", "vitroll-shapes", "--model",
                         "vitroll-shapes", "--out", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert err == (f"vitroll: error: {folder} is a folder: `vitroll compare` takes image files; pass the folder's "
                   f"images, e.g. {folder}/*.png\n")  # was 'vitroll: failed: …: is a directory, not an image'


def sub_command_options() -> list[tuple[str, argparse.ArgumentParser, argparse.Action]]:
    """(sub-command, its parser, one of its arguments) for every argument of every sub-command but ``--help``."""
    parser = build_parser()
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return [(name, command, action) for name, command in commands.choices.items() for action in command._actions
            if not isinstance(action, argparse._HelpAction)]


def test_every_argument_of_every_sub_command_has_a_help_text():
    assert [f"{name} {'/'.join(action.option_strings) or action.metavar}" for name, _, action in sub_command_options()
            if not action.help] == []


def test_every_default_a_help_text_could_state_is_stated_as_the_one_used():
    """An option whose default is a number or a word says `default: VALUE` (or `default VALUE`) with that value."""
    unstated = []
    for name, command, action in sub_command_options():
        if isinstance(action.default, bool) or not isinstance(action.default, (int, float, str)):
            continue
        value = f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
        shown = command._get_formatter()._expand_help(action)
        if f"default: {value}" not in shown and f"default {value}" not in shown:
            unstated.append(f"{name} {action.option_strings[0]} = {value}: {shown}")
    assert unstated == []


def test_the_same_option_is_spelled_alike_in_every_sub_command():
    """Metavars of options shared by several sub-commands agree (--checkpoint FILE, --out DIR, --batch-size N, …)."""
    metavars: dict[str, set] = {}
    for _, _, action in sub_command_options():
        if action.option_strings:
            metavars.setdefault(action.option_strings[0], set()).add(str(action.metavar))
    # audit's --window is a DICOM grey window, caption's the occlusion method's block side: two meanings, two spellings
    assert {option: spellings for option, spellings in metavars.items() if len(spellings) > 1} == {
        "--window": {"PRESET|W,L", "N"}}
    assert {option: metavars[option] for option in ("--checkpoint", "--class-names", "--out", "--batch-size")} == {
        "--checkpoint": {"FILE"}, "--class-names": {"FILE"}, "--out": {"DIR"}, "--batch-size": {"N"}}


def test_help_texts_name_flags_not_python_keywords_and_the_methods_a_command_takes():
    """--input-size said 'models built with --img-size or dynamic_img_size' (a keyword, where --dynamic-img-size is
    the flag); --target-class said 'gradient methods' though occlusion takes it too; --num-classes said 'from the
    checkpoint's head' also without one; `vitroll text --help` offered center, which a text model refuses."""
    import re

    from vitroll.wording import FLAGS

    options = {(name, "/".join(action.option_strings) or action.metavar):
               " ".join(command._get_formatter()._expand_help(action).split())
               for name, command, action in sub_command_options()}
    keywords = [key for key in FLAGS if "_" in key]
    assert [(option, key) for option, shown in options.items() for key in keywords
            if re.search(rf"(?<![-\w]){key}(?![=\w])", shown)] == []
    assert options["overlay", "--target-class"] == ("class explained by the gradient methods and occlusion (default: "
                                                    "the prediction)")
    assert options["overlay",
                   "--num-classes"] == "classifier size (default: the checkpoint's head, else the model's own)"
    assert "center" not in options["text", "--method"] and "occlusion, random, rollout" in options["text", "--method"]
    assert "center, chefer" in options["overlay", "--method"]


def test_every_option_that_takes_a_value_names_it_for_a_user():
    """--help showed argparse's default metavars, the option's name in capitals (--crop-pct CROP_PCT,
    --discard-ratio DISCARD_RATIO, --target-class TARGET_CLASS): every option that takes a value now says what kind of
    value (FRACTION, LAYER, CLASS, COLORMAP, …), and options of the same kind say it alike."""
    unnamed = [f"{name} {action.option_strings[0]}" for name, _, action in sub_command_options()
               if action.option_strings and action.nargs != 0 and action.choices is None and action.metavar is None]
    assert unnamed == []
    metavars = {action.option_strings[0]: action.metavar for _, _, action in sub_command_options()
                if action.option_strings}
    assert {option: metavars[option] for option in (
        "--crop-pct", "--discard-ratio", "--attention-weight", "--alpha", "--flag-threshold", "--border",
        "--start-layer", "--target-class", "--cmap", "--save", "--group-by")} == {
        "--crop-pct": "FRACTION", "--discard-ratio": "FRACTION", "--attention-weight": "FRACTION",
        "--alpha": "FRACTION", "--flag-threshold": "FRACTION", "--border": "FRACTION", "--start-layer": "LAYER",
        "--target-class": "CLASS", "--cmap": "COLORMAP", "--save": "KIND,…", "--group-by": "FIELD,…"}
    usage = build_parser()._subparsers._group_actions[0].choices["overlay"].format_usage()
    assert "[--crop-pct FRACTION]" in usage and "CROP_PCT" not in usage and "TARGET_CLASS" not in usage


@pytest.mark.parametrize("command", ["overlay", "annotate", "audit", "compare", "evaluate", "text", "models"])
def test_help_reads_docstring_code_as_plain_backquotes(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert "``" not in out and f"`vitroll {command}" in out


def test_a_strip_the_model_saw_little_of_is_warned_about_with_the_options_that_show_all_of_it(tmp_path, capsys):
    """A 400×20 strip was centre-cropped to its middle 20×20 pixels without a word: the map covered 5 % of it."""
    strip, photo = tmp_path / "strip.png", tmp_path / "photo.png"
    Image.open(PHOTO).resize((400, 20)).save(strip)
    Image.open(PHOTO).resize((64, 48)).save(photo)
    code, out, err = run(capsys, "overlay", str(strip), str(photo), "--out", str(tmp_path / "out"))
    assert code == 0, err
    assert err.splitlines() == [f"vitroll: warning: {strip}: the model saw only 5 % of the image (the middle of its "
                                "long side) and its map covers only that; --crop-mode border --crop-pct 1 shows the "
                                "model all of it, padded (--crop-mode squash --crop-pct 1: stretched)"]
    assert out.count(" -> ") == 2
    code, _, err = run(capsys, "overlay", str(strip), "--out", str(tmp_path / "all"), "--crop-mode", "squash",
                       "--crop-pct", "1")
    assert code == 0 and err == ""


def _no_model(*args, **kwargs):
    raise AssertionError("a model was loaded for inputs that are all missing")


@pytest.mark.parametrize("command, loader, expected", [
    (["overlay"], "vitroll.commands.common.model_from_args", (3, "failed", "nope.png: no such file")),
    (["caption", "--model", "vitroll-caption-shapes"], "vitroll.commands.common.load_model_of_kind",
     (3, "failed", "nope.png: no such file")),
    (["compare", "--model", "vit_tiny_patch16_224"], "vitroll.commands.compare.explainers_from_args",
     (3, "failed", "nope.png: no such file")),
    (["audit"], "vitroll.commands.common.model_from_args", (2, "error", "nope.png: no such file or folder")),
])
def test_missing_inputs_are_told_before_any_model_loads(tmp_path, capsys, monkeypatch, command, loader, expected):
    """`vitroll overlay missing.png` loaded the model (seconds, minutes for a large one) before it found the file
    missing; now the mistyped name is the first thing said, and no model loads."""
    monkeypatch.setattr(loader, _no_model)
    code, out, err = run(capsys, *command, str(tmp_path / "nope.png"), "--out", str(tmp_path / "out"))
    status, kind, reason = expected
    assert code == status
    assert one_error_line(err, kind) == f"vitroll: {kind}: {tmp_path / reason}"
    assert out == ""


@pytest.mark.parametrize("command, model, said", [
    ("caption", "vitroll-text-keyword",
     "vitroll-text-keyword is a text model (BertForSequenceClassification); explain it with `vitroll text`"),
    ("overlay", "vitroll-caption-shapes",
     "vitroll-caption-shapes is a captioner (VisionEncoderDecoderModel); explain it with `vitroll caption`"),
    ("caption", "vitroll-clip-shapes",  # an image–text model's config was not read: only the images were told
     "vitroll-clip-shapes is an image–text model (CLIPModel); explain it with `vitroll overlay --text …`"),
])
def test_missing_images_and_a_model_of_another_kind_are_told_together_in_one_line(tmp_path, capsys, monkeypatch,
                                                                                  command, model, said):
    """`vitroll caption missing.png --model <a text model>` said only 'missing.png: no such file' (exit 3); once it
    was found, the rerun said the model was the wrong kind. The model's kind, told by its config.json without
    building it, changes the command to run, so it comes first, and the images that cannot be read follow in the
    same line: one rerun mends both."""
    monkeypatch.setattr("vitroll.commands.common.load_model", _no_model)
    names = [tmp_path / f"n{index}.png" for index in range(5)]
    code, out, err = run(capsys, command, *map(str, names), "--model", model, "--out", str(tmp_path / "out"))
    assert (code, out) == (2, "")
    assert err == (f"vitroll: error: {said}; nor can any image given be read ({names[0]}: no such file; {names[1]}: "
                   f"no such file; {names[2]}: no such file; … and 2 more)\n")
    code, out, err = run(capsys, command, str(names[0]), "--model", model, "--out", str(tmp_path / "out"))
    assert (code, out, err) == (2, "", f"vitroll: error: {said}; nor can any image given be read ({names[0]}: no "
                                       "such file)\n")


@pytest.mark.parametrize("model, said", [
    ("vitroll-text-keyword",
     "vitroll-text-keyword is a text model (BertForSequenceClassification); explain it with `vitroll text`"),
    ("vitroll-caption-shapes",
     "vitroll-caption-shapes is a captioner (VisionEncoderDecoderModel); explain it with `vitroll caption`"),
    ("vitroll-clip-shapes",
     "vitroll-clip-shapes is an image–text model (CLIPModel); explain it with `vitroll overlay --text …`"),
])
def test_compare_tells_missing_images_and_a_model_of_another_kind_together_in_one_line(tmp_path, capsys, monkeypatch,
                                                                                       model, said):
    """`vitroll compare missing.png --model vitroll-shapes --model <a text model>` said only 'missing.png: no such
    file' (exit 3), as overlay and caption did before; and with the image there, the text model was refused for its
    unknown preprocessing, the captioner for having no class scores, rather than with the command that explains it."""
    missing = tmp_path / "missing.png"
    monkeypatch.setattr("vitroll.commands.common.load_model", _no_model)
    code, out, err = run(capsys, "compare", str(missing), "--model", "vitroll-shapes", "--model", model,
                         "--out", str(tmp_path / "out"))
    assert (code, out, err) == (2, "", f"vitroll: error: {said}; nor can any image given be read ({missing}: no such "
                                       "file)\n")
    monkeypatch.undo()
    code, out, err = run(capsys, "compare", str(PHOTO), "--model", "vitroll-shapes", "--model", model,
                         "--out", str(tmp_path / "out"))
    assert (code, out, err) == (2, "", f"vitroll: error: {said}\n")


def test_compare_refuses_an_image_text_model_in_one_line(tmp_path, capsys):
    """It went on to a traceback (TypeError: 'NoneType' object is not subscriptable): CLIP has no class names."""
    code, out, err = run(capsys, "compare", str(PHOTO), "--model", "vitroll-shapes", "--model", "vitroll-clip-shapes",
                         "--out", str(tmp_path / "out"))
    assert (code, out, err) == (2, "", "vitroll: error: vitroll-clip-shapes is an image–text model (CLIPModel); "
                                       "explain it with `vitroll overlay --text …`\n")


def test_an_empty_image_among_missing_ones_is_told_before_the_model_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("vitroll.commands.common.model_from_args", _no_model)
    (tmp_path / "empty.png").write_bytes(b"")
    code, _, err = run(capsys, "overlay", str(tmp_path / "nope.png"), str(tmp_path / "empty.png"),
                       str(tmp_path / "nope.png"), "--out", str(tmp_path / "out"))
    assert code == 3
    assert err.splitlines() == [f"vitroll: failed: {tmp_path / 'nope.png'}: no such file",
                                f"vitroll: failed: {tmp_path / 'empty.png'}: empty file (0 bytes)"]


def test_one_readable_image_among_missing_ones_still_runs(tmp_path, capsys):
    code, out, err = run(capsys, "overlay", str(tmp_path / "nope.png"), str(PHOTO), "--out", str(tmp_path / "out"),
                         "--device", "cpu")
    assert code == 3
    assert f"vitroll: failed: {tmp_path / 'nope.png'}: no such file" in err.splitlines()
    assert (tmp_path / "out" / "cat_rollout.png").is_file(), err


def test_an_unreadable_class_names_file_is_told_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """`--class-names` with a typo was read after the model had loaded, its error seconds (minutes) later."""
    monkeypatch.setattr("vitroll.commands.common.model_from_args", _no_model)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    for name, reason in (("nope.txt", "No such file or directory"), ("latin1.txt", "not UTF-8 text: byte 0xe9")):
        with pytest.raises(SystemExit) as stopped:
            main(["overlay", str(PHOTO), "--class-names", str(tmp_path / name), "--out", str(tmp_path / "out")])
        assert stopped.value.code == 2
        line = one_error_line(capsys.readouterr().err)
        assert line.startswith(f"vitroll: error: overlay: argument --class-names: {tmp_path / name}: cannot read class "
                               f"names ({reason}"), line


def test_an_image_in_a_folder_made_unreadable_is_one_failed_line_and_the_others_are_drawn(tmp_path, capsys,
                                                                                           monkeypatch):
    """Telling a folder among the images (Path.is_dir) stopped the command: 'vitroll: error: …: Permission denied'."""
    from test_images import in_a_folder_made_unreadable

    Image.open(PHOTO).resize((64, 48)).save(tmp_path / "ok.png")
    locked = tmp_path / "sub" / "locked.png"
    locked.parent.mkdir()
    Image.open(PHOTO).resize((64, 48)).save(locked)
    in_a_folder_made_unreadable(monkeypatch, locked)
    code, out, err = run(capsys, "overlay", str(locked), str(tmp_path / "ok.png"), "--model", "vit_tiny_patch16_224",
                         "--out", str(tmp_path / "out"), "--method", "attention")
    assert code == 3
    assert one_error_line(err, "failed") == f"vitroll: failed: {locked}: cannot be opened (Permission denied)"
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["ok_attention.png"]


def test_audit_frame_help_says_what_a_file_with_fewer_frames_gives():
    """`--frame` said "only this frame of multi-frame files", yet a single-frame file given --frame 3 is a row "out
    of range" (tests/test_dicom.py), not audited as its one frame: the help misled an auditor picking a cine's
    frame in a folder of single-frame slices."""
    (frame,) = [action for name, _, action in sub_command_options() if name == "audit" and "--frame" in
                action.option_strings]
    assert frame.help.startswith("only this frame of every file, from 0; a file with fewer frames (a single-frame "
                                 "file for any INDEX but 0) is a row saying so")
