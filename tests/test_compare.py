"""``vitroll compare``: models of different patch and input sizes, compared in original pixels."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from claimed_size import png_claiming_size
from vitroll.cli import main
from vitroll.errors import OptionValueError
from vitroll.pipelines.compare import (
    Explainer, agreement, compare, comparison_figure, pair_summaries, plot_comparison,
)
from vitroll.pipelines.explain import ExplainSettings
from vitroll.preprocess import Preprocessing
from vitroll.testbed import build_testbed_model, samples

PHOTO = Path(__file__).resolve().parents[1] / "sample_images" / "cat.jpg"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = build_testbed_model()
        with torch.no_grad():  # peaked attention so the maps have structure to agree on
            for name, parameter in model.named_parameters():
                if name.endswith("qkv.weight"):
                    parameter.normal_(0, 0.3)
        paths.append(folder / f"seed{seed}.safetensors")
        save_file(model.state_dict(), str(paths[-1]))
    return paths


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    paths = []
    for index, sample in enumerate(samples(9, 3)):
        path = folder / f"shape{index}.png"
        Image.fromarray(np.asarray(Image.fromarray(sample.image).resize((96, 80)))).save(path)
        paths.append(str(path))
    return paths + [str(PHOTO)]


def test_compare_two_patch_sizes_writes_grid_and_csv(tmp_path, capsys, checkpoints, images):
    code = main(["compare", *images, "--model", "vitroll-shapes", "--model", "vit_tiny_patch16_224",
                 "--checkpoint", str(checkpoints[0]), "--checkpoint", "none", "--out", str(tmp_path), "--device",
                 "cpu"])
    out, err = capsys.readouterr()
    assert code == 0
    # as overlay, evaluate and sanity say it: the timm model left at its random initialisation, not the testbed
    assert err.splitlines() == ["vitroll: note: vit_tiny_patch16_224 has random weights (no --pretrained or "
                                "--checkpoint); its maps mean nothing"]
    rows = list(csv.DictReader((tmp_path / "agreement.csv").open()))
    assert len(rows) == len(images) and {r["model_b"] for r in rows} == {"vit_tiny_patch16_224"}
    assert all(-1 <= float(r["spearman"]) <= 1 and 0 <= float(r["top10_iou"]) <= 1 for r in rows)
    grid = Image.open(tmp_path / "grid.png")
    assert grid.size[0] > 400 and grid.size[1] > 4 * 150
    assert "vitroll-shapes:seed0 vs vit_tiny_patch16_224: Spearman" in out


def test_a_model_agrees_with_itself_and_less_with_a_randomised_copy(tmp_path, capsys, images):
    from vitroll.models import load_model
    from vitroll.pipelines.sanity import cascade

    *_, (_, randomised) = cascade(load_model("vitroll-shapes"))  # every block and the head re-initialised
    save_file(randomised.state_dict(), str(tmp_path / "randomised.safetensors"))
    code = main(["compare", *images, "--model", "vitroll-shapes", "--model", "vitroll-shapes", "--model",
                 "vitroll-shapes",
                 "--checkpoint", "none", "--checkpoint", "none", "--checkpoint",
                 str(tmp_path / "randomised.safetensors"),
                 "--out", str(tmp_path)])
    assert code == 0
    rows = list(csv.DictReader((tmp_path / "agreement.csv").open()))
    itself = [r for r in rows if r["model_b"] == "vitroll-shapes#2"]
    other = [r for r in rows if r["model_a"] == "vitroll-shapes" and r["model_b"] == "vitroll-shapes:randomised"]
    assert [float(r["spearman"]) for r in itself] == pytest.approx([1.0] * len(images))
    assert all(float(r["top10_iou"]) == 1.0 for r in itself)
    # rollout keeps the residual stream's identity and bright objects stand out even in a random model, so the
    # randomised copy still correlates (0.66 on these images), but clearly less than the model with itself
    assert np.mean([float(r["spearman"]) for r in other]) < 0.8, other
    assert np.mean([float(r["top10_iou"]) for r in other]) < 0.6, other


def test_agreement_ignores_pixels_a_model_did_not_see():
    first = np.arange(16, dtype=np.float32).reshape(4, 4)
    second = first.copy()
    second[0] = np.nan
    assert agreement(first, second)[0] == pytest.approx(1.0)


def test_compare_needs_two_models_and_matching_checkpoints(capsys):
    assert main(["compare", str(PHOTO), "--model", "vitroll-shapes"]) == 2
    assert "at least two --model" in capsys.readouterr().err
    assert main(["compare", str(PHOTO), "--model", "a", "--model", "b", "--checkpoint", "x"]) == 2
    assert "1 --checkpoint for 2 --model" in capsys.readouterr().err


def test_a_second_method_is_refused_not_silently_the_only_one(tmp_path, capsys):
    """``--method chefer --method rollout`` (two methods, as two ``--model`` are two models) compared the models with
    rollout alone, without a word."""
    command = ["compare", str(PHOTO), "--model", "vitroll-shapes", "--model", "vitroll-shapes", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--method", "chefer", "--method", "rollout"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "vitroll: error: compare: argument --method: given twice (chefer, then rollout); compare runs one method on "
        "every model; to compare methods on the same images, see `vitroll annotate --compare-with` or `vitroll "
        "evaluate --disagreement` (see `vitroll compare --help`)\n")
    assert list(tmp_path.iterdir()) == []
    assert main([*command, "--method", "rollout"]) == 0  # the default, given once
    assert "Spearman 1.000" in capsys.readouterr().out


def test_a_checkpoint_trained_at_another_size_is_compared_built_at_its_size(tmp_path, capsys):
    """The size hint named --img-size, which compare lacked: it now takes one per --model."""
    import timm

    from vitroll.cli import build_parser
    from vitroll.commands.compare import explainers_from_args

    small = tmp_path / "small32.pth"
    torch.save(timm.create_model("vit_tiny_patch16_224", img_size=32, num_classes=3).state_dict(), small)
    command = ["compare", str(PHOTO), "--model", "vit_tiny_patch16_224", "--model", "vit_tiny_patch16_224",
               "--checkpoint", str(small), "--checkpoint", "none", "--out", str(tmp_path / "out")]
    assert main(command) == 2
    assert capsys.readouterr().err.strip().endswith(
        "shape mismatch: pos_embed (1, 5, 192) vs model (1, 197, 192); its position embedding is for 32×32 inputs: "
        "build the model for them with --img-size 32")

    sized = command + ["--img-size", "32", "--img-size", "none"]
    explainers = explainers_from_args(build_parser().parse_args(sized))
    assert [e.preprocessing.input_size for e in explainers] == [(32, 32), (224, 224)]
    assert main(sized) == 0
    with (tmp_path / "out" / "agreement.csv").open(encoding="utf-8") as handle:
        [row] = list(csv.DictReader(handle))
    assert (row["model_a"], row["model_b"]) == ("vit_tiny_patch16_224:small32@32", "vit_tiny_patch16_224")


def test_a_checkpoint_saved_with_other_create_model_arguments_is_compared_built_with_them(tmp_path, capsys):
    """The hint for a checkpoint saved with depth=2 named --model-arg, which compare lacked: it now takes KEY=VALUE
    words per --model, like its --img-size."""
    import timm

    from vitroll.cli import build_parser
    from vitroll.commands.compare import explainers_from_args

    shallow = tmp_path / "shallow.pth"
    torch.save(timm.create_model("vit_tiny_patch16_224", depth=2, img_size=32, num_classes=3).state_dict(), shallow)
    command = ["compare", str(PHOTO), "--model", "vit_tiny_patch16_224", "--model", "vit_tiny_patch16_224",
               "--checkpoint", str(shallow), "--checkpoint", "none", "--img-size", "32", "--img-size", "32",
               "--out", str(tmp_path / "out")]
    assert main(command) == 2
    assert capsys.readouterr().err.strip().endswith("build that one with --model-arg depth=2")
    built = command + ["--model-arg", "depth=2", "num_heads=3", "--model-arg", "none"]
    explainers = explainers_from_args(build_parser().parse_args(built))
    assert [len(explainer.model.blocks) for explainer in explainers] == [2, 12]


@pytest.mark.parametrize(("arguments", "line"), [
    (["--model-arg", "depth=2"], "1 --model-arg for 2 --model; give one per model ('none' for none)"),
    (["--model-arg", "depth=2", "none", "--model-arg", "none"], "--model-arg takes KEY=VALUE words or none, not both"),
    (["--model-arg", "depth=2", "depth=3", "--model-arg", "none"], "--model-arg depth is given twice; give it once"),
])
def test_compare_model_arg_mistakes_are_one_line(tmp_path, capsys, arguments, line):
    command = ["compare", str(PHOTO), "--model", "vit_tiny_patch16_224", "--model", "vit_tiny_patch16_224",
               *arguments, "--out", str(tmp_path)]
    assert main(command) == 2
    assert capsys.readouterr().err.strip() == f"vitroll: error: {line}"


def test_one_model_built_at_two_sizes_is_labelled_by_its_size_not_numbered():
    from vitroll.cli import build_parser
    from vitroll.commands.compare import explainers_from_args

    command = ["compare", str(PHOTO), "--model", "vit_tiny_patch16_224", "--model", "vit_tiny_patch16_224",
               "--model", "vit_tiny_patch16_224", "--img-size", "32", "--img-size", "32", "48", "--img-size", "none"]
    labels = [e.label for e in explainers_from_args(build_parser().parse_args(command))]
    assert labels == ["vit_tiny_patch16_224@32", "vit_tiny_patch16_224@32x48", "vit_tiny_patch16_224"]


@pytest.mark.parametrize(("sizes", "line"), [
    (["--img-size", "32"], "1 --img-size for 2 --model; give one per model ('none' for its default size)"),
    (["--img-size", "32", "none", "--img-size", "none"], "--img-size 32 none: give H, H W or none"),
    (["--img-size", "32", "32", "32", "--img-size", "none"], "--img-size takes H or H W; got 3 numbers"),
    (["--img-size", "none", "--img-size", "32"], "vitroll-shapes: the fixed 64×64 testbed with its own weights; "
                                                 "--img-size 32 does not apply"),
])
def test_compare_img_size_mistakes_are_one_line(tmp_path, capsys, sizes, line):
    command = ["compare", str(PHOTO), "--model", "vit_tiny_patch16_224", "--model", "vitroll-shapes", *sizes,
               "--out", str(tmp_path)]
    assert main(command) == 2
    assert capsys.readouterr().err.strip() == f"vitroll: error: {line}"


def test_explainers_sharing_a_label_are_refused_not_reported_as_agreeing():
    first, second = build_testbed_model().eval(), build_testbed_model().eval()
    preprocessing = Preprocessing.from_model(first)
    with pytest.raises(OptionValueError, match=r"^each explainer needs its own label; 'x' is given to 2 of them$"):
        compare([PHOTO], [Explainer("x", first, preprocessing), Explainer("x", second, preprocessing)],
                ExplainSettings())


def test_grid_titles_show_file_and_model_names_as_written(tmp_path):
    model = build_testbed_model().eval()
    preprocessing = Preprocessing.from_model(model)
    for name in ("a$\\frac$b.png", "price_$5 and $x^2.png"):
        Image.open(PHOTO).resize((64, 48)).save(tmp_path / name)
    result = compare([tmp_path / "a$\\frac$b.png", tmp_path / "price_$5 and $x^2.png"],
                     [Explainer("$a$_model", model, preprocessing), Explainer("b_" * 40, model, preprocessing)],
                     ExplainSettings())
    plot_comparison(result, tmp_path / "grid.png")  # a$\frac$b raised a mathtext ParseSyntaxException here
    assert Image.open(tmp_path / "grid.png").size == (3 * 260, 2 * 240)
    axes = comparison_figure(result).axes
    titles = [axes[index].get_title() for index in range(6)]
    assert titles[0] == "a$\\frac$b.png" and titles[3] == "price_$5 and $x^2.png"
    assert titles[1].split("\n")[0] == "$a$_model"
    assert titles[2].split("\n")[0].startswith("b_b_") and titles[2].split("\n")[0].endswith("…")  # one line
    assert not any(axis.title.get_parse_math() for axis in axes)


def test_a_missing_image_fails_alone_with_the_exit_status_of_every_command(tmp_path, capsys, images):
    missing = tmp_path / "nope.png"
    code = main(["compare", str(missing), images[0], "--model", "vitroll-shapes", "--model", "vitroll-shapes",
                 "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 3  # some inputs failed, as in overlay, caption, text, annotate and audit (was 1)
    assert captured.err == f"vitroll: failed: {missing}: no such file\n"
    assert [row["image"] for row in csv.DictReader((tmp_path / "out" / "agreement.csv").open())] == [images[0]]
    assert main(["compare", str(missing), "--model", "vitroll-shapes", "--model", "vitroll-shapes",
                 "--out", str(tmp_path / "none")]) == 3


def test_an_image_over_max_pixels_fails_alone_in_vitrolls_words(tmp_path, capsys, images):
    huge = png_claiming_size(tmp_path / "huge.png", 30_000, 20_000)
    arguments = [str(huge), images[0], "--model", "vitroll-shapes", "--model", "vitroll-shapes"]
    assert main(["compare", *arguments, "--out", str(tmp_path / "out")]) == 3
    assert capsys.readouterr().err == (f"vitroll: failed: {huge}: image too large: 600 MP (30000×20000), over the "
                                       "limit of 500 MP; --max-pixels 600M reads it if the memory allows (an "
                                       "overlay takes about 20 bytes a pixel)\n")
    assert [row["image"] for row in csv.DictReader((tmp_path / "out" / "agreement.csv").open())] == [images[0]]
    assert main(["compare", images[0], *arguments[2:], "--out", str(tmp_path / "less"), "--max-pixels", "100"]) == 3
    assert "over the limit of 0.0001 MP; --max-pixels 1M" in capsys.readouterr().err


def test_an_image_whose_name_is_not_utf8_is_compared_and_spelt_out(tmp_path, capsys, images):
    """Its row stopped the run when agreement.csv was written ('utf-8' codec can't encode '\\udce9'), after the
    maps were computed; it is spelt as manifest.csv spells it."""
    latin1 = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.png"))
    latin1.write_bytes(Path(images[0]).read_bytes())
    assert main(["compare", str(latin1), "--model", "vitroll-shapes", "--model", "vitroll-shapes",
                 "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    rows = list(csv.DictReader((tmp_path / "out" / "agreement.csv").open(encoding="utf-8")))
    assert [row["image"] for row in rows] == [f"{tmp_path}/caf\\xe9.png"]
    assert (tmp_path / "out" / "grid.png").stat().st_size > 0


def test_pair_summaries_count_one_image_in_the_singular():
    row = dict(image="a.png", model_a="x", model_b="y", spearman=0.5, top10_iou=0.25)
    assert pair_summaries([row]) == ["x vs y: Spearman 0.500, top-10 % IoU 0.250 over 1 image"]
    assert pair_summaries([row, {**row, "image": "b.png"}])[0].endswith("over 2 images")


def test_compare_warns_of_an_image_smaller_than_the_patch_grid_and_of_a_strip_as_overlay_does(tmp_path, capsys):
    """``vitroll overlay`` warned of an image smaller than the patch grid and of a strip the model saw a speck of;
    ``vitroll compare`` said nothing. It now says so in overlay's words, without the crop flags it does not take."""
    tiny, strip = tmp_path / "tiny.png", tmp_path / "strip.png"
    Image.fromarray(np.full((2, 2, 3), 90, np.uint8)).save(tiny)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 6400, 3), np.uint8)).save(strip)
    code = main(["compare", str(tiny), str(strip), "--model", "vitroll-shapes", "--model", "vitroll-shapes",
                 "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert code == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "warning" in line] == [
        f"vitroll: warning: {tiny}: the image is smaller than the model's patch grid: enlarged to fit, each patch "
        "covers 0.25 of its pixels a side, so its map and classes say next to nothing about it",
        f"vitroll: warning: {strip}: the model saw only 1 % of the image (the middle of its long side) and its map "
        "covers only that"]
