"""``vitroll evaluate`` and ``vitroll sanity`` end to end, on the testbed and on a folder with masks."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from reference import reference_spearman
from vitroll.cli import main
from vitroll.errors import OptionValueError, VitrollError
from vitroll.pipelines.evaluate import (
    Evaluation, MaskedImage, curves_figure, evaluate, examples_figure, folder_images, mean_and_ci, summarize,
    shapes_images,
)
from vitroll.pipelines.sanity import cascade, sanity_check
from vitroll.testbed import build_testbed_model


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "random.safetensors"
    save_file(build_testbed_model().state_dict(), str(path))
    return path


def test_evaluate_writes_the_table_for_every_method(tmp_path, capsys, random_checkpoint):
    code = main(["evaluate", "--testbed", "4", "--checkpoint", str(random_checkpoint), "--out", str(tmp_path),
                 "--methods", "rollout,chefer,flow,random,center", "--steps", "4"])
    out = capsys.readouterr().out
    assert code == 0
    for method in ("rollout", "chefer", "flow", "random", "center"):
        assert f"| {method} |" in out
    rows = list(csv.DictReader((tmp_path / "per_image.csv").open()))
    assert len(rows) == 4 * 5
    assert {float(r["pointing_game"]) for r in rows} <= {0.0, 1.0}
    assert all(0 <= float(r["deletion_auc"]) <= 1 for r in rows)
    for name in ("summary.csv", "summary.md", "curves.png", "examples.png"):
        assert (tmp_path / name).stat().st_size > 100


def test_disagreement_between_two_methods_is_written_and_flagged(tmp_path, capsys, random_checkpoint):
    code = main(["evaluate", "--testbed", "3", "--checkpoint", str(random_checkpoint), "--out", str(tmp_path),
                 "--methods", "rollout,center", "--steps", "2", "--disagreement", "rollout,center", "--disagree-below",
                 "2"])
    out = capsys.readouterr().out
    assert code == 0 and "rollout vs center: median Spearman" in out and "3 of 3 images below 2" in out
    rows = list(csv.DictReader((tmp_path / "disagreement.csv").open()))
    assert len(rows) == 3 and all(r["flagged"] == "True" for r in rows)
    assert all(-1 <= float(r["spearman"]) <= 1 for r in rows)
    assert main(["evaluate", "--testbed", "2", "--methods", "rollout", "--disagreement", "rollout,chefer"]) == 2
    assert "two of the evaluated methods" in capsys.readouterr().err


def test_disagreement_rows_name_each_image_once_with_its_correlation_and_flag():
    """The rows of disagreement.csv were built in the command; an Evaluation gives them (Python users too)."""
    rng = np.random.default_rng(0)
    first = [rng.random((4, 4)) for _ in range(3)]
    second = [first[0], -first[1], rng.random((4, 4))]
    result = Evaluation(rows=[{"image": name, "method": method} for name in ("a", "b", "c") for method in "xy"],
                        grid_maps={"x": first, "y": second})
    rows = result.disagreement_rows("x", "y", below=0.5)
    assert [row["image"] for row in rows] == ["a", "b", "c"]
    assert [row["spearman"] for row in rows] == pytest.approx([reference_spearman(f, s) for f, s in zip(first, second)],
                                                              abs=1e-12)
    assert rows[0]["spearman"] == pytest.approx(1.0) and rows[1]["spearman"] == pytest.approx(-1.0)
    assert [row["flagged"] for row in rows] == [row["spearman"] < 0.5 for row in rows]
    assert rows[0]["flagged"] is False and rows[1]["flagged"] is True


def test_summary_is_mean_with_a_student_t_95_percent_interval():
    rows = [dict(method="m", pointing_game=v, energy_in_mask=0.5, top10_iou=0.0, deletion_auc=0.1, insertion_auc=0.2)
            for v in (0.0, 1.0, 1.0, 0.0)]
    (entry,) = summarize(rows)
    assert entry["pointing_game"] == 0.5
    # t₀.₉₇₅ with 3 degrees of freedom is 3.1824 (printed tables); the normal 1.96 gave 0.566, too narrow at n = 4
    assert entry["pointing_game_ci95"] == pytest.approx(3.182446 * np.std([0, 1, 1, 0], ddof=1) / 2, rel=1e-6)
    assert entry["pointing_game_ci95"] == pytest.approx(0.9187, abs=1e-4)
    assert entry["energy_in_mask_ci95"] == 0.0 and entry["images"] == 4


@pytest.mark.parametrize("count, quantile", [(2, 12.706205), (5, 2.776445), (11, 2.228139), (31, 2.042272),
                                             (201, 1.971896)])
def test_interval_half_width_uses_the_t_quantile_of_n_minus_1_degrees_of_freedom(count, quantile):
    values = np.r_[np.zeros(count - 1), 1.0]
    mean, half_width = mean_and_ci(values)
    assert mean == pytest.approx(1 / count)
    assert half_width == pytest.approx(quantile * values.std(ddof=1) / np.sqrt(count), rel=1e-6)


def test_interval_of_fewer_than_two_values_is_nan():
    assert mean_and_ci([0.25])[0] == 0.25 and np.isnan(mean_and_ci([0.25])[1])
    assert all(np.isnan(value) for value in mean_and_ci([]))


def test_a_map_equal_to_the_mask_scores_perfectly_on_localisation(random_checkpoint):
    from vitroll.models import load_model
    from vitroll.methods import register_method, METHODS
    from vitroll.methods.base import Saliency

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    images = shapes_images(3, seed=11)
    patch_masks = torch.tensor(np.stack([i.mask.reshape(8, 8, 8, 8).mean(axis=(1, 3)) for i in images]))

    @register_method("oracle_for_test")
    def oracle(model, batch):
        return Saliency(patch_masks[: len(batch)].float(), model(batch))

    try:
        result = evaluate(model, images, ["oracle_for_test"], steps=2)
    finally:
        del METHODS["oracle_for_test"]
    assert all(row["pointing_game"] == 1.0 for row in result.rows)
    areas = [i.mask.mean() for i in images]  # what a uniform map would score
    assert all(row["energy_in_mask"] > max(0.5, 4 * area) for row, area in zip(result.rows, areas))


def test_folder_with_masks_and_its_errors(tmp_path, capsys, random_checkpoint):
    for item in shapes_images(2, seed=4):
        Image.fromarray(item.image).save(tmp_path / f"{item.name}.png")
        Image.fromarray(item.mask.astype(np.uint8) * 255).save(tmp_path / f"{item.name}_mask.png")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "no_mask_here.png")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.jpg")
    found = folder_images(tmp_path)
    assert [i.name for i in found] == ["shapes-4-0000.png", "shapes-4-0001.png"]
    assert found.without_mask == ("a.jpg", "no_mask_here.png")
    code = main(["evaluate", str(tmp_path), "--checkpoint", str(random_checkpoint), "--out", str(tmp_path / "out"),
                 "--methods", "rollout", "--steps", "2"])
    assert code == 0
    # the images without a mask were left out without a word: 2 images evaluated of 4
    assert capsys.readouterr().err == (
        f"vitroll: warning: 2 of 4 images in {tmp_path} left out for want of a mask (NAME_mask.* beside NAME.*: "
        "none such as a_mask.png beside a.jpg)\n")
    assert (tmp_path / "out" / "summary.md").read_text().startswith(
        f"2 images ({tmp_path}; 2 images without a mask left out), model vitroll-shapes;")
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(tmp_path / "shapes-4-0001_mask.png")
    code = main(["evaluate", str(tmp_path), "--checkpoint", str(random_checkpoint), "--methods", "rollout"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "shapes-4-0001_mask.png" in err[0] and "mask is 10×10 but its image is 64×64" in err[0]


@pytest.mark.parametrize("empty", [np.zeros((64, 64), np.uint8), np.full((64, 64, 4), 255, np.uint8) * [1, 1, 1, 0]])
def test_a_mask_without_any_object_pixel_stops_the_run_in_one_line(empty, tmp_path, capsys, random_checkpoint):
    """An all-black mask (or a fully transparent one) was scored: every method's pointing game, energy and IoU 0 on
    it, pulling every mean down, without a word."""
    for item in shapes_images(2, seed=4):
        Image.fromarray(item.image).save(tmp_path / f"{item.name}.png")
        Image.fromarray(item.mask.astype(np.uint8) * 255).save(tmp_path / f"{item.name}_mask.png")
    Image.fromarray(empty.astype(np.uint8)).save(tmp_path / "shapes-4-0001_mask.png")
    out = tmp_path / "out"
    code = main(["evaluate", str(tmp_path), "--checkpoint", str(random_checkpoint), "--methods", "rollout",
                 "--out", str(out)])
    assert code == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: {tmp_path / 'shapes-4-0001_mask.png'}: mask has no object pixel (all zero, or all "
        "transparent): every method would score 0 on it; give the object's mask, or remove this mask to leave its "
        "image out\n")
    assert not out.exists()


@pytest.mark.parametrize("command", ["evaluate", "sanity"])
def test_a_folder_image_over_max_pixels_is_refused_naming_the_flag_the_command_takes(command, tmp_path, capsys,
                                                                                     random_checkpoint):
    """The limit's refusal named --max-pixels, which evaluate and sanity did not take (argparse then refused it)."""
    item = shapes_images(1, seed=4)[0]
    Image.fromarray(item.image).save(tmp_path / "shape.png")  # 64×64: 4096 pixels
    Image.fromarray(item.mask.astype(np.uint8) * 255).save(tmp_path / "shape_mask.png")
    arguments = [command, str(tmp_path), "--checkpoint", str(random_checkpoint), "--methods", "rollout",
                 "--out", str(tmp_path / "out")]
    assert main([*arguments, "--max-pixels", "4000"]) == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: {tmp_path / 'shape.png'}: image too large: 0.0041 MP (64×64), over the limit of 0.004 MP; "
        "--max-pixels 1M reads it if the memory allows (an overlay takes about 20 bytes a pixel)\n")
    assert main([*arguments, "--max-pixels", "4096"]) == 0  # the mask, as large, is read under the same limit


@pytest.mark.parametrize("arguments, refusal", [
    (["evaluate", "--testbed", "2"], "--max-pixels limits the images of a FOLDER; the generated testbed's are small"),
    (["sanity"], "--max-pixels limits the images of a FOLDER; the generated testbed's are small"),
    (["evaluate", "--testbed-kind", "text"], "--max-pixels limits the images of a FOLDER; the generated testbed's are "
                                             "small"),
])
def test_max_pixels_without_a_folder_is_refused_as_it_limits_nothing(arguments, refusal, capsys):
    assert main([*arguments, "--max-pixels", "1G"]) == 2
    assert capsys.readouterr().err == f"vitroll: error: {refusal}\n"

def test_unknown_method_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "--testbed", "2", "--methods", "rollout,nope"])
    assert exit_info.value.code == 2
    assert "unknown method 'nope'" in capsys.readouterr().err


def test_cascade_randomises_top_down_and_leaves_the_model_alone(random_checkpoint):
    from vitroll.models import load_model

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stages = []
    for stage, randomized in cascade(model):
        changed = sorted({k.split(".")[0] + ("." + k.split(".")[1] if k.startswith("blocks") else "")
                          for k, v in randomized.state_dict().items() if not torch.equal(v, before[k])})
        stages.append((stage, changed))
    assert [s for s, _ in stages] == ["head", "blocks.3", "blocks.2", "blocks.1", "blocks.0"]
    assert stages[0][1] == ["head"]
    assert stages[2][1] == ["blocks.2", "blocks.3", "head"]
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_sanity_flags_maps_that_ignore_the_weights(random_checkpoint):
    from vitroll.models import load_model

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    images = torch.stack([torch.from_numpy(i.image).permute(2, 0, 1).float() / 127.5 - 1 for i in shapes_images(6)])
    result = sanity_check(model, images, ["rollout", "center", "random"])
    assert set(result.flagged()) == {"center", "random"}
    assert result.correlations["rollout"][-1].mean() < 0.9
    assert result.correlations["center"].shape == (5, 6)


def test_a_method_named_twice_is_evaluated_and_checked_once(random_checkpoint):
    from vitroll.models import load_model

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    images = shapes_images(1)
    twice = evaluate(model, images, ["center", "center"], steps=1)
    assert [row["method"] for row in twice.rows] == ["center"] and len(twice.grid_maps["center"]) == 1
    assert summarize(twice.rows)[0]["images"] == 1
    tensor = torch.from_numpy(images[0].image).permute(2, 0, 1)[None].float() / 127.5 - 1
    once = sanity_check(model, tensor, ["rollout"])
    doubled = sanity_check(model, tensor, ["rollout", "rollout"])
    assert doubled.correlations["rollout"].shape == (5, 1)  # one row per stage, not two
    assert doubled.table() == once.table()


def test_sanity_takes_images_as_every_method_does(random_checkpoint):
    from pathlib import Path

    from vitroll.models import load_model
    from vitroll.preprocess import Preprocessing

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    disk = Path(__file__).resolve().parents[1] / "sample_images" / "shapes_disk.png"
    tensor, _ = Preprocessing.from_model(model).batch([Image.open(disk).convert("RGB")])
    from_path = sanity_check(model, [str(disk)], ["rollout"])
    assert from_path.table() == sanity_check(model, tensor, ["rollout"]).table()


def test_sanity_runs_batch_size_images_at_a_time_with_the_same_correlations(random_checkpoint, tmp_path, capsys):
    import csv

    from vitroll.cli import main
    from vitroll.models import load_model

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    tensor = torch.stack([torch.from_numpy(i.image).permute(2, 0, 1).float() / 127.5 - 1 for i in shapes_images(5)])
    seen = []
    model.patch_embed.register_forward_hook(lambda module, inputs, output: seen.append(len(inputs[0])))
    whole = sanity_check(model, tensor, ["rollout", "chefer"])
    seen.clear()
    in_twos = sanity_check(model, tensor, ["rollout", "chefer"], batch_size=2)
    assert set(seen) == {2, 1}  # 2 + 2 + 1 images per forward pass, never all 5
    for method in ("rollout", "chefer"):  # chefer: each part explains its own images' predictions
        np.testing.assert_allclose(in_twos.correlations[method], whole.correlations[method], atol=1e-5)
    assert main(["sanity", "--testbed", "3", "--methods", "rollout", "--batch-size", "2", "--checkpoint",
                 str(random_checkpoint), "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "sanity.csv").open(encoding="utf-8")))
    assert [row["method"] for row in rows] == ["rollout"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["sanity", "--help"])
    assert "--batch-size N images per forward pass (default: 16)" in " ".join(capsys.readouterr().out.split())


def test_a_cut_out_mask_on_a_transparent_background_is_its_object_not_the_whole_image(tmp_path):
    item = shapes_images(1, seed=4)[0]
    Image.fromarray(item.image).save(tmp_path / "disk.png")
    cut_out = np.zeros(item.mask.shape + (4,), np.uint8)
    cut_out[item.mask] = 255
    Image.fromarray(cut_out).save(tmp_path / "disk_mask.png")
    (found,) = folder_images(tmp_path)
    assert np.array_equal(found.mask, item.mask) and 0 < found.mask.mean() < 0.5


def test_sanity_explains_the_target_class_it_is_given_else_the_prediction(random_checkpoint):
    from vitroll.models import load_model

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    tensor = torch.from_numpy(shapes_images(1)[0].image).permute(2, 0, 1)[None].float() / 127.5 - 1
    predicted = int(model(tensor).argmax())
    default = sanity_check(model, tensor, ["chefer"]).correlations["chefer"]
    other = sanity_check(model, tensor, ["chefer"], method_options={"target_class": (predicted + 1) % 4})
    assert not np.allclose(other.correlations["chefer"], default)  # it was the prediction's, whatever was asked


def test_deletion_and_insertion_follow_the_target_class_where_one_is_given(random_checkpoint):
    from vitroll import center
    from vitroll.metrics import deletion_insertion
    from vitroll.models import load_model
    from vitroll.preprocess import Preprocessing

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    images = shapes_images(1)
    tensor, _ = Preprocessing.from_model(model).batch([Image.fromarray(images[0].image)])
    other = (int(model(tensor).argmax()) + 1) % 4
    rows = evaluate(model, images, ["chefer", "center"], method_options={"target_class": other}, steps=2).rows
    expected = deletion_insertion(model, tensor, center(model, tensor), torch.tensor([other]), steps=2,
                                  substrate="mean")
    assert rows[1]["method"] == "center" and rows[1]["deletion_auc"] == pytest.approx(float(expected.deletion_auc[0]))
    assert rows[1]["insertion_auc"] == pytest.approx(float(expected.insertion_auc[0]))


def test_sanity_reads_a_folder_of_images_without_masks(tmp_path, capsys, random_checkpoint):
    from vitroll.models import load_model
    from vitroll.preprocess import Preprocessing

    items = shapes_images(3, seed=5)
    for name, item in zip(["b", "a", "c_mask"], items):  # c_mask: named as a mask, so left out
        Image.fromarray(item.image).save(tmp_path / f"{name}.png")
    out = tmp_path / "out"
    assert main(["sanity", str(tmp_path), "--methods", "rollout", "--checkpoint", str(random_checkpoint),
                 "--out", str(out)]) == 0
    assert "2 images" in (out / "sanity.md").read_text()
    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    tensor, _ = Preprocessing.from_model(model).batch([Image.fromarray(items[1].image),
                                                       Image.fromarray(items[0].image)])
    (row,) = list(csv.DictReader((out / "sanity.csv").open()))
    expected = sanity_check(model, tensor, ["rollout"]).table()[0]
    assert {stage: float(row[stage]) for stage in expected if stage not in ("method", "flagged")} == pytest.approx(
        {stage: value for stage, value in expected.items() if stage not in ("method", "flagged")}, abs=1e-9)
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert main(["sanity", str(empty), "--checkpoint", str(random_checkpoint), "--out", str(out)]) != 0
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: error: {empty}: no image in this folder (PNG, JPEG, TIFF, BMP, GIF, WebP, PPM/PGM)"]


def test_figures_draw_method_names_as_written_and_the_legend_keeps_one_starting_with_an_underscore():
    methods = ["_mine", "a$x$b", "rollout"]  # '_mine' was left out of the legend; '$x$' was drawn as math
    curve = {"deletion": [np.linspace(1, 0, 5)], "insertion": [np.linspace(0, 1, 5)]}
    evaluation = Evaluation(fractions=np.linspace(0, 1, 5), curves={method: curve for method in methods},
                            examples={method: [np.ones((8, 8), np.float32)] for method in methods})
    legend = curves_figure(evaluation).axes[1].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == methods
    assert not any(text.get_parse_math() for text in legend.get_texts())
    image = MaskedImage("x", np.zeros((8, 8, 3), np.uint8), np.eye(8, dtype=bool))
    titles = [axis.title for axis in examples_figure(evaluation, [image]).axes]
    assert [title.get_text() for title in titles] == ["image + mask", *methods]
    assert not any(title.get_parse_math() for title in titles)


@pytest.mark.parametrize("batch_size", [0, -1])
def test_sanity_refuses_a_batch_size_below_one(random_checkpoint, batch_size):
    """0 silently ran everything at once and -1 drew no batch at all, failing in torch.cat([])."""
    from vitroll.models import load_model

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    images = torch.stack([torch.from_numpy(i.image).permute(2, 0, 1).float() / 127.5 - 1 for i in shapes_images(2)])
    with pytest.raises(OptionValueError, match=f"batch_size must be ≥ 1 or None; got {batch_size}"):
        sanity_check(model, images, ["rollout"], batch_size=batch_size)


def test_one_image_is_counted_in_the_singular_and_its_table_has_no_nan_interval(tmp_path, capsys, random_checkpoint):
    assert main(["evaluate", "--testbed", "1", "--checkpoint", str(random_checkpoint), "--out", str(tmp_path),
                 "--methods", "rollout,center", "--steps", "2", "--disagreement", "rollout,center",
                 "--disagree-below", "2"]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 image below 2 (disagreement.csv)" in out
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert summary.startswith("1 image (shapes testbed, seed 3), model vitroll-shapes; mean ± 95 % CI (Student's t)")
    rollout = next(line for line in summary.splitlines() if line.startswith("| rollout |"))
    assert "nan" not in summary and "±" not in rollout and len(rollout.split("|")) == 8
    assert main(["sanity", "--testbed", "1", "--methods", "rollout", "--checkpoint", str(random_checkpoint),
                 "--out", str(tmp_path / "sanity")]) == 0
    assert ", 1 image, cascading randomisation" in (tmp_path / "sanity" / "sanity.md").read_text(encoding="utf-8")


def test_sanity_correlations_are_the_reference_spearman_of_each_stage_maps_with_the_trained_ones(random_checkpoint):
    from vitroll import grad_rollout, rollout
    from vitroll.models import load_model

    model = load_model("vitroll-shapes", checkpoint=random_checkpoint)
    images = torch.stack([torch.from_numpy(i.image).permute(2, 0, 1).float() / 127.5 - 1 for i in shapes_images(2)])
    result = sanity_check(model, images, ["rollout", "grad_rollout"])
    predicted = model(images).argmax(dim=-1)  # gradient methods keep explaining the trained model's prediction
    for method, explain in (("rollout", rollout), ("grad_rollout", grad_rollout)):
        options = {"target_class": predicted} if method == "grad_rollout" else {}
        trained = explain(model, images, **options).detach().numpy()
        expected = [[reference_spearman(trained[i], explain(randomized, images, **options).detach().numpy()[i])
                     for i in range(len(images))] for _, randomized in cascade(model)]
        np.testing.assert_allclose(result.correlations[method], expected, rtol=1e-9, atol=1e-12)
        table = next(row for row in result.table() if row["method"] == method)
        assert [table[stage] for stage in result.stages] == pytest.approx(np.mean(expected, axis=1))


def test_images_of_one_stem_and_other_suffixes_are_told_apart_in_per_image_csv(tmp_path, capsys, random_checkpoint):
    """``a.png`` and ``a.jpg`` beside ``a_mask.png`` were both the row ``a``: which score was whose could not be
    told."""
    item = shapes_images(1, seed=4)[0]
    Image.fromarray(item.image).save(tmp_path / "a.png")
    Image.fromarray(item.image).save(tmp_path / "a.jpg", quality=95)
    Image.fromarray(item.mask.astype(np.uint8) * 255).save(tmp_path / "a_mask.png")
    code = main(["evaluate", str(tmp_path), "--checkpoint", str(random_checkpoint), "--out", str(tmp_path / "out"),
                 "--methods", "rollout", "--steps", "2"])
    assert code == 0 and capsys.readouterr().out.startswith("2 images (")
    rows = list(csv.DictReader((tmp_path / "out" / "per_image.csv").open(encoding="utf-8")))
    assert [row["image"] for row in rows] == ["a.jpg", "a.png"]


@pytest.mark.parametrize("kind", ["pairs", "text", "captions"])
def test_a_generated_testbed_is_scored_by_its_own_evaluation_on_its_own_inputs(kind):
    """evaluate_testbed picks the testbed's inputs, evaluation and metrics (the choice was the command's); its rows
    are those of that testbed's own function called by hand."""
    pytest.importorskip("transformers")
    import vitroll
    from vitroll.adapters.tokenizers import registered_tokenizer
    from vitroll.pipelines.evaluate import evaluate_testbed
    from vitroll.pipelines.evaluate_captions import CAPTION_METRICS, evaluate_captions
    from vitroll.pipelines.evaluate_pairs import PAIR_METRICS, evaluate_pairs, pair_images
    from vitroll.pipelines.evaluate_text import TEXT_METRICS, evaluate_text, text_sentences

    name = {"pairs": "vitroll-clip-shapes", "text": "vitroll-text-keyword", "captions": "vitroll-caption-shapes"}[kind]
    model = vitroll.load_model(name)
    scores = evaluate_testbed(model, kind, 2, 5, ["rollout", "random"], batch_size=2)
    tokenizer = registered_tokenizer(model)
    expected, metrics, source = {
        "pairs": lambda: (evaluate_pairs(model, pair_images(2, 5), ["rollout", "random"], batch_size=2),
                          PAIR_METRICS, "2 two-shape images, seed 5"),
        "text": lambda: (evaluate_text(model, tokenizer, text_sentences(2, 5), ["rollout", "random"], batch_size=2),
                         TEXT_METRICS, "2 key-word sentences, seed 5"),
        "captions": lambda: (evaluate_captions(model, tokenizer, pair_images(2, 5), ["rollout", "random"],
                                               batch_size=2), CAPTION_METRICS, "2 captioned two-shape images, seed 5"),
    }[kind]()
    assert (scores.metrics, scores.source) == (metrics, source)
    assert len(scores.rows) == 4 and [row["method"] for row in scores.rows].count("rollout") == 2
    assert scores.rows == expected


def test_a_testbed_that_is_not_generated_is_refused_naming_the_ones_that_are():
    from vitroll.pipelines.evaluate import evaluate_testbed

    with pytest.raises(OptionValueError, match=r"^kind='shapes': the generated testbeds are pairs, text, captions$"):
        evaluate_testbed(build_testbed_model(), "shapes", 2, 3, ["rollout"])


FROM_THE_MODEL = ("the input is finite, the model's output is not: does the model hold NaN or inf in its weights, or "
                  "overflow at the precision it runs in?")


@pytest.fixture(scope="module")
def nan_checkpoint(tmp_path_factory):
    """The testbed's random weights with one NaN in its first attention: every rollout it gives is NaN."""
    torch.manual_seed(0)
    state = build_testbed_model().state_dict()
    state["blocks.0.attn.qkv.weight"][0, 0] = float("nan")
    path = tmp_path_factory.mktemp("nan") / "nan.safetensors"
    save_file(state, str(path))
    return path


def test_evaluate_and_sanity_refuse_maps_that_are_not_finite_in_one_line_naming_the_image_and_cause(
        nan_checkpoint, tmp_path, capsys):
    """evaluate scored a NaN map (pointing game 0, energy 0) into its means and wrote the table; sanity correlated it
    as 0 with every stage's and did not flag the method: a model with a NaN weight passed the check."""
    code = main(["evaluate", "--testbed", "3", "--checkpoint", str(nan_checkpoint), "--out", str(tmp_path / "e"),
                 "--methods", "center,rollout", "--steps", "2"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: shapes-3-0000: rollout's map holds no finite value: {FROM_THE_MODEL} (so do 2 other inputs "
        "of the 3 run with it); evaluate stops: its means are over every image, and this map has no score\n")
    assert not (tmp_path / "e" / "summary.csv").exists()
    code = main(["sanity", "--testbed", "2", "--checkpoint", str(nan_checkpoint), "--out", str(tmp_path / "s"),
                 "--methods", "rollout"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: shapes-3-0000: rollout's map holds no finite value: {FROM_THE_MODEL} (so does 1 other input "
        "of the 2 run with it); sanity stops: a map without values correlates with none, which would pass any method "
        "as one that follows the weights\n")
    assert not (tmp_path / "s" / "sanity.csv").exists()
    # on a folder, the image is named by its file (it was "input 1", which left the user to count the sorted names)
    folder = tmp_path / "images"
    folder.mkdir()
    for name, shade in (("b.png", 40), ("a.png", 200), ("a_mask.png", 255)):
        Image.new("RGB", (64, 64), (shade, 90, 30)).save(folder / name)
    assert main(["sanity", str(folder), "--checkpoint", str(nan_checkpoint), "--out", str(tmp_path / "f"),
                 "--methods", "rollout"]) == 2
    assert capsys.readouterr().err.startswith(
        f"vitroll: error: a.png: rollout's map holds no finite value: {FROM_THE_MODEL} (so does 1 other input of the "
        "2 run with it); sanity stops")


def test_sanity_names_the_stage_whose_maps_are_not_finite(random_checkpoint, monkeypatch):
    import vitroll.pipelines.sanity as sanity

    def poisoned(module, seed):
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.fill_(float("nan"))

    monkeypatch.setattr(sanity, "reinitialize", poisoned)
    model = build_testbed_model()
    model.load_state_dict(load_file(str(random_checkpoint)))
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(VitrollError) as caught:
        sanity_check(model, images, ["rollout"])
    assert str(caught.value) == (
        f"input 0 (once blocks.3 is random): rollout's map holds no finite value: {FROM_THE_MODEL} (so does 1 other "
        "input of the 2 run with it); sanity stops: a map without values correlates with none, which would pass any "
        "method as one that follows the weights")
    with pytest.raises(VitrollError, match=r"^b\.png \(once blocks\.3 is random\): rollout's map holds no finite"):
        sanity_check(model, images, ["rollout"], names=["b.png", "a.png"])
    with pytest.raises(OptionValueError, match=r"^names= has 1 name for 2 images: give one per image$"):
        sanity_check(model, images, ["rollout"], names=["b.png"])


def test_the_captioning_testbed_passes_rollouts_options_on_and_refuses_those_no_caption_method_takes(tmp_path,
                                                                                                   capsys):
    """``--testbed-kind captions`` took only ``window``: ``--head-fusion max`` and ``--discard-ratio 0.9`` were
    dropped without a word, and the table was the default rollout's. Rollout's options now reach it; one that no
    caption method takes is refused before the model is loaded and the folder made."""
    pytest.importorskip("transformers")
    import vitroll
    from vitroll.errors import MethodOptionError
    from vitroll.pipelines.evaluate import evaluate_testbed

    model = vitroll.load_model("vitroll-caption-shapes")
    fused = {fusion: evaluate_testbed(model, "captions", 4, 3, ["rollout"], method_options={"head_fusion": fusion})
             for fusion in ("mean", "max")}
    assert fused["mean"].rows == evaluate_testbed(model, "captions", 4, 3, ["rollout"]).rows
    assert fused["max"].rows != fused["mean"].rows
    with pytest.raises(MethodOptionError, match=r"^the caption methods take head_fusion \(rollout's\), "
                                                r"attention_weight \(rollout's\), window \(occlusion's\); not "
                                                r"discard_ratio=0\.9$"):
        evaluate_testbed(model, "captions", 2, 3, ["rollout"], method_options={"discard_ratio": 0.9})
    out = tmp_path / "out"
    assert main(["evaluate", "--testbed-kind", "captions", "--testbed", "2", "--methods", "rollout",
                 "--discard-ratio", "0.9", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "vitroll: error: the caption methods take --head-fusion (rollout's), --attention-weight (rollout's), "
        "--option window (occlusion's); not --discard-ratio 0.9\n")
    assert not out.exists()
