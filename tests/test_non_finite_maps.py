"""A map that holds NaN or inf is drawn as the bare image, which reads as "the model looked nowhere": the methods warn
(naming how many maps, which inputs and why) and return the maps as they are; the pipelines fail that one image with
a line that says why and keep the rest of the batch."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from reference import reference_attention, reference_rollout
from vitroll import chefer, random_map, rollout
from vitroll.cli import main
from vitroll.methods import METHODS
from vitroll.methods.map_checks import non_finite_words
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.stream import Explained, Failed, explain_stream, read_image
from vitroll.preprocess import Preprocessing
from vitroll.testbed import load_testbed_model

FROM_THE_MODEL = ("the input is finite, the model's output is not: does the model hold NaN or inf in its weights, or "
                  "overflow at the precision it runs in?")
FROM_THE_INPUT = "the input holds NaN or inf, which every method carries into the whole map"


@pytest.fixture(scope="module")
def model():
    return load_testbed_model()


@pytest.fixture(scope="module")
def nan_checkpoint(tmp_path_factory, model):
    """The testbed's weights with one NaN in its first attention: every map it gives is NaN."""
    state = {name: value.clone() for name, value in model.state_dict().items()}
    state["blocks.0.attn.qkv.weight"][0, 0] = float("nan")
    path = tmp_path_factory.mktemp("nan") / "nan.pth"
    torch.save(state, path)
    return path


def batch_with_nan_and_inf(seed: int = 0) -> torch.Tensor:
    """Four preprocessed testbed inputs (4, 3, 64, 64): one NaN pixel in input 1, one inf in input 3."""
    batch = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(seed))
    batch[1, 0, 10, 20] = float("nan")
    batch[3, 2, 60, 1] = float("inf")
    return batch


def test_the_words_count_what_is_not_finite():
    maps = torch.zeros(3, 2, 7)
    maps[1] = float("nan")
    maps[2, 0, :3] = float("inf")
    assert non_finite_words(maps) == [None, "no finite value", "NaN or inf at 3 of its 14 values"]


@pytest.mark.parametrize("verb", [rollout, chefer])
def test_a_method_warns_naming_the_inputs_whose_input_holds_nan_and_keeps_the_others_exact(model, verb):
    batch = batch_with_nan_and_inf()
    with pytest.warns(UserWarning) as caught:
        maps = verb(model, batch)
    assert [str(w.message) for w in caught] == [
        f"{verb.__name__}: 2 of 4 maps are not finite, which a picture of them shows as no map at all: inputs 1, 3: "
        f"no finite value — {FROM_THE_INPUT}"]
    assert caught[0].filename == __file__  # points at the caller's line
    assert torch.isnan(maps[[1, 3]]).all()
    for index in (0, 2):
        alone = METHODS[verb.__name__](model, batch[index:index + 1]).maps[0]
        torch.testing.assert_close(maps[index], alone, atol=1e-6, rtol=0)
    expected = reference_rollout(reference_attention(model, batch[0:1]), num_prefix=1, grid=(8, 8), class_token=True)
    if verb is rollout:
        np.testing.assert_allclose(maps[0].numpy(), expected, atol=1e-5, rtol=0)


def test_a_model_with_nan_weights_is_named_as_the_cause_and_finite_maps_warn_nothing(model, nan_checkpoint):
    broken = load_testbed_model()
    broken.load_state_dict(torch.load(nan_checkpoint))
    batch = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with pytest.warns(UserWarning, match="rollout: 2 of 2 maps are not finite") as caught:
        rollout(broken, batch)
    assert str(caught[0].message).endswith(f"inputs 0, 1: no finite value — {FROM_THE_MODEL}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.isfinite(rollout(model, batch)).all()


def poisoning(preprocessing: Preprocessing, width: int):
    """``preprocessing``, but the frame of ``width`` pixels gets one NaN in its tensor."""
    def preprocess(image):
        tensor, geometry = preprocessing(image)
        if image.width == width:
            tensor = tensor.clone()
            tensor[0, 3, 3] = float("nan")
        return tensor, geometry
    return preprocess


def test_the_stream_fails_only_the_frame_whose_map_is_not_finite_and_keeps_the_rest_of_its_batch(model, tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for name, (height, width) in {"wide.png": (48, 80), "tall.png": (90, 40), "square.png": (64, 64)}.items():
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(tmp_path / name)
        paths.append(tmp_path / name)
    preprocessing = Preprocessing.from_model(model)
    settings = ExplainSettings("rollout")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the pipelines fail the image; they do not warn besides
        records = list(explain_stream(model, paths, read_image, poisoning(preprocessing, 40), settings,
                                      compare_with=[settings.for_method("attention")], batch_size=3))
    assert [type(record) for record in records] == [Explained, Failed, Explained]
    assert records[1].message == f"{paths[1]}: rollout's map holds no finite value: {FROM_THE_INPUT}"
    for record in (records[0], records[2]):
        tensor, _ = preprocessing(Image.open(record.item).convert("RGB"))
        expected = reference_rollout(reference_attention(model, tensor[None]), num_prefix=1, grid=(8, 8),
                                     class_token=True)
        np.testing.assert_allclose(record.grid_map, expected, atol=1e-5, rtol=0)


def test_overlay_fails_each_image_of_a_model_with_nan_weights_in_one_line_and_writes_no_picture(
        nan_checkpoint, tmp_path, capsys):
    image = tmp_path / "disk.png"
    Image.open("sample_images/shapes_disk.png").save(image)
    code = main(["overlay", str(image), "--checkpoint", str(nan_checkpoint), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 3
    assert err.splitlines() == [f"vitroll: failed: {image}: rollout's map holds no finite value: {FROM_THE_MODEL}"]
    assert not list((tmp_path / "out").iterdir())


def test_annotate_gives_the_image_whose_map_is_not_finite_a_failed_row_and_the_others_their_outputs(
        model, tmp_path, monkeypatch, capsys):
    root = tmp_path / "in"
    root.mkdir()
    rng = np.random.default_rng(3)
    for name, width in {"a.png": 64, "b.png": 40, "c.png": 72}.items():
        Image.fromarray(rng.integers(0, 255, (48, width, 3), dtype=np.uint8)).save(root / name)
    real = Preprocessing.__call__
    monkeypatch.setattr(Preprocessing, "__call__", lambda self, image: poisoning(lambda i: real(self, i), 40)(image))
    code = main(["annotate", str(root), "--out", str(tmp_path / "out"), "--batch-size", "3", "--workers", "0",
                 "--no-progress"])
    assert code == 3
    rows = {row["path"]: row for row in map(json.loads, (tmp_path / "out" / "manifest.jsonl").read_text().splitlines())}
    assert (rows["a.png"]["status"], rows["c.png"]["status"], rows["b.png"]["status"]) == ("ok", "ok", "error")
    assert rows["b.png"]["error"] == f"{root / 'b.png'}: rollout's map holds no finite value: {FROM_THE_INPUT}"
    assert sorted(p.name for p in (tmp_path / "out" / "overlays").iterdir()) == ["a.png.png", "c.png.png"]
    assert "2 ok, 1 failed" in capsys.readouterr().out


def test_an_option_given_positionally_is_refused_naming_the_keywords(model):
    """rollout(model, images, "max") raised Python's bare TypeError, which names no option."""
    from vitroll.errors import MethodOptionError

    images = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(MethodOptionError) as caught:
        rollout(model, images, "max")
    assert str(caught.value) == (
        "rollout takes the model and the inputs positionally and every option by keyword; got 1 more positional "
        "argument ('max'): name it, as rollout(model, inputs, head_fusion=…) (its options: head_fusion, "
        "discard_ratio, attention_weight, start_layer, dtype, max_attention_memory)")
    with pytest.raises(TypeError, match=r"chefer takes the model .* got 2 more positional arguments \(3, 0\): name "
                                        r"each, as chefer\(model, inputs, target_class=…\)"):
        chefer(model, images, 3, 0)
    # named by its Python name: method "random" is the verb random_map (the message named random(model, …))
    with pytest.raises(MethodOptionError, match=r"^random_map takes .* as random_map\(model, inputs, seed=…\) \(its "
                                                r"options: seed\)$"):
        random_map(model, images, 3)


def test_a_method_without_options_given_one_positionally_says_it_takes_none(model):
    from vitroll.errors import MethodOptionError
    from vitroll.methods.base import Saliency
    from vitroll.methods.registry import register_method

    @register_method("plain_test_method", checks_constant_maps=False)
    def plain(model, batch):
        return Saliency(torch.zeros(len(batch), 4, 4), None)

    try:
        with pytest.raises(MethodOptionError) as caught:
            plain(model, torch.zeros(1, 3, 64, 64), 0.5)
        assert str(caught.value) == ("plain takes the model and the inputs, and no option; got 1 more positional "
                                     "argument (0.5)")
    finally:
        del METHODS["plain_test_method"]
