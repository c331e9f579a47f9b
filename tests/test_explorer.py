"""The interactive explorer: its pure functions against direct method calls and float64 references, the Gradio page
through ``gradio_client`` against a server on 127.0.0.1, once in a real browser, and ``vitroll app``'s refusals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitroll
import vitroll.app
from browser import browser_page, wait_for_exact_text, wait_for_text
from claimed_size import png_claiming_size
from image_text_models import clip_tokenizer, hf_model
from reference import reference_attention, reference_attention_gradients, reference_chefer
from vitroll.cli import main
from vitroll.errors import ImageReadError, MethodOptionError, OptionValueError
from vitroll.io import load_image
from vitroll.models import class_names
from vitroll.overlay import lookup_table
from vitroll.pipelines.explain import ExplainSettings, render, top_classes
from vitroll.pipelines.explorer import (
    ExplorerControls, explore, head_grid, ignored_controls, method_options, model_outline, scored_model,
)
from vitroll.preprocess import Preprocessing
from vitroll.testbed.model import load_testbed_model
from vitroll.wording import worded_for_the_command_line

ROOT = Path(__file__).resolve().parents[1]
CROSS = ROOT / "sample_images" / "shapes_cross.png"
GRID = (8, 8)
"""The testbed's patch grid (64 px, patch 8)."""


@pytest.fixture(scope="module")
def model():
    return load_testbed_model()


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return np.asarray(load_image(CROSS))


@pytest.fixture(scope="module")
def batch(model, image):
    tensor, (geometry,) = Preprocessing.from_model(model).batch([Image.fromarray(image)])
    return tensor, geometry


def close_to_reference(values: np.ndarray, reference: np.ndarray) -> bool:
    return values.shape == reference.shape and np.allclose(values, reference, rtol=1e-4,
                                                           atol=1e-6 * np.abs(reference).max())


def test_the_overlay_is_render_of_rollout_with_the_same_options_and_top_classes_are_the_models(model, image, batch):
    tensor, geometry = batch
    controls = ExplorerControls(method="rollout", head_fusion="max", discard_ratio=0.3, start_layer=1, layer=2)
    shown = explore(model, image, controls, class_names=class_names(model))
    maps = vitroll.rollout(model, tensor, head_fusion="max", discard_ratio=0.3, start_layer=1)
    _, expected = render(image, maps[0].numpy(), geometry, ExplainSettings())
    assert np.array_equal(shown.overlay, expected) and np.array_equal(shown.grid_map, maps[0].numpy())
    probabilities = model(tensor).softmax(-1)[0].detach().numpy()
    assert [(k, name) for k, name, _ in shown.top] == [(k, name) for k, name, _ in top_classes(
        probabilities, ["square", "disk", "triangle", "cross"])]
    assert shown.top[0][1] == "cross" and np.allclose([p for *_, p in shown.top], np.sort(probabilities)[::-1][:4])
    assert shown.ignored == ["layer", "target class", "head"]


def test_a_single_head_is_that_heads_attention_and_the_grid_shows_every_head_of_the_layer(model, image, batch):
    tensor, geometry = batch
    per_layer = reference_attention(model, tensor)  # float64, [(H, N, N)]
    shown = explore(model, image, ExplorerControls(method="attention", head=2, layer=1))
    assert close_to_reference(shown.grid_map, per_layer[1][2, 0, 1:].reshape(GRID))
    _, expected = render(image, per_layer[1][2, 0, 1:].reshape(GRID), geometry, ExplainSettings())
    assert np.abs(shown.overlay.astype(int) - expected).max() <= 1  # float32 against float64 colours
    heads = per_layer[1][:, 0, 1:].reshape(-1, *GRID)
    tiles = head_grid(image, heads, geometry, ExplainSettings(), chosen=2)
    assert shown.head_grid.shape == tiles.shape == (2 * (160 + 14 + 4) + 4, 2 * (160 + 4) + 4, 3)
    assert np.abs(shown.head_grid.astype(int) - tiles).max() <= 1
    assert not np.array_equal(tiles, head_grid(image, heads, geometry, ExplainSettings()))  # the frame
    assert shown.ignored == ["discard ratio", "start layer", "target class", "head fusion"]
    fused = explore(model, image, ExplorerControls(method="attention", head_fusion="max", layer=1))
    assert close_to_reference(fused.grid_map, per_layer[1][:, 0, 1:].max(axis=0).reshape(GRID))


def test_head_labels_of_a_tall_image_stay_in_their_own_cells():
    image = np.full((1200, 400, 3), 200, np.uint8)  # tiles 33 pixels wide under labels 38 pixels wide
    geometry = Preprocessing(input_size=(64, 64), mean=(0.5,) * 3, std=(0.5,) * 3).geometry(image.shape[:2])
    heads = np.random.default_rng(0).random((12, *GRID)).astype(np.float32)
    tiles = head_grid(image, heads, geometry, ExplainSettings(), tile_side=100)
    ink = tiles.min(axis=2) < 128
    cell = (tiles.shape[1] - 4) // 4  # 4 columns of cells, each its label's width and a 4-pixel gap
    assert cell >= 38 + 4 and tiles.shape[1] == 4 * cell + 4
    for row in range(3):
        band = ink[4 + row * (100 + 14 + 4):][:14]  # the labels' line of this row of tiles
        for column in range(4):
            left = 4 + column * cell
            assert band[:, left:left + cell - 4].any()  # "head k" is drawn in its cell
            assert not band[:, left + cell - 4:left + cell].any()  # and never reaches the gap to the next one

@pytest.mark.parametrize("crop_mode", ["center", "squash"])
@pytest.mark.parametrize("height, width", [(1200, 60), (400, 1), (1, 400)])
def test_the_head_tiles_of_a_strip_are_what_the_model_saw_at_full_size(height, width, crop_mode):
    """A thumbnail of all of a 1×400 strip is one pixel across: each tile shows the model's input instead, every
    pixel of it under its head's map."""
    image = np.full((height, width, 3), 128, np.uint8)
    geometry = Preprocessing(input_size=(64, 64), mean=(0.5,) * 3, std=(0.5,) * 3,
                             crop_mode=crop_mode).geometry(image.shape[:2])
    heads = np.zeros((4, *GRID), np.float32)
    heads[:, :, :4] = 1.0  # each head's left half high: red over the grey, the right half blue
    tiles = head_grid(image, heads, geometry, ExplainSettings(alpha=1.0))
    assert tiles.shape == (4 + 2 * (14 + 160 + 4), 4 + 2 * (160 + 4), 3)
    for top, left in ((4 + 14, 4), (4 + 14, 4 + 164), (4 + 178 + 14, 4), (4 + 178 + 14, 4 + 164)):
        tile = tiles[top:top + 160, left:left + 160].astype(int)
        red, blue = tile[:, :70], tile[:, 90:]
        assert (red[..., 0] > 100).all() and (red[..., 2] < 50).all(), (top, left)
        assert (blue[..., 2] > 100).all() and (blue[..., 0] < 50).all(), (top, left)


def test_the_head_tiles_of_a_strip_put_a_padded_models_last_patch_on_the_last_pixels_it_covers():
    """A model that pads its 36-pixel input to 40 (patches of 8): the last patch holds input rows 32–35, the last
    ninth of the tile drawn for a strip; the tile's geometry had no padding, so it was stretched over the last fifth."""
    image = np.full((1200, 60, 3), 128, np.uint8)
    geometry = Preprocessing(input_size=(36, 36), mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=1.0, crop_mode="squash",
                             patch_padding=(8, 8)).geometry(image.shape[:2])
    heads = np.zeros((1, 5, 5), np.float32)
    heads[0, 4] = 1.0
    tiles = head_grid(image, heads, geometry, ExplainSettings(alpha=1.0, interpolation="nearest"), tile_side=144)
    tile = tiles[4 + 14:4 + 14 + 144, 4:4 + 144].astype(int)
    hot = (tile[..., 0] > 100) & (tile[..., 2] < 50)  # red: the high patch; the rest is blue
    assert hot[128:].all() and not hot[:128].any()


def tiny_backbone() -> torch.nn.Module:
    """A transformers ViTModel without a classification head (2 layers, 2 heads, a 4×4 grid)."""
    from transformers import ViTConfig, ViTModel

    return ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                              image_size=32, patch_size=8), add_pooling_layer=False).eval()


def test_a_model_without_a_classification_head_shows_no_empty_top_classes_box(model):
    """The title line says "no classification head"; the top-classes box under the maps stayed, empty but for an
    icon."""
    backbone = tiny_backbone()
    for page_model, shown in ((backbone, False), (model, True)):
        page = vitroll.app.build_app(page_model, model_label="m")
        top, = [block for block in page.blocks.values() if getattr(block, "elem_id", None) == "top-classes"]
        title = next(block.value for block in page.blocks.values()
                     if str(getattr(block, "value", "")).startswith("###"))
        assert top.visible is shown and ("no classification head" in title) is not shown


def test_the_target_class_changes_a_gradient_methods_map_as_the_reference_says(model, image, batch):
    tensor, _ = batch
    maps = {}
    for target in (0, 3):
        attentions, gradients = reference_attention_gradients(model, tensor, target)
        maps[target] = explore(model, image, ExplorerControls(method="chefer", target_class=target)).grid_map
        assert close_to_reference(maps[target], reference_chefer(attentions, gradients, 1, GRID))
    assert not np.allclose(maps[0], maps[3], rtol=0.05)
    predicted = explore(model, image, ExplorerControls(method="chefer")).grid_map
    assert np.array_equal(predicted, maps[3])  # the cross is predicted


def test_a_method_gets_only_the_options_it_takes_and_the_rest_is_named_as_ignored(model, image):
    everything = ExplorerControls(method="attention", head_fusion="min", discard_ratio=0.5, start_layer=1, layer=2,
                                  target_class=1)
    assert method_options(everything) == {"head_fusion": "min", "layer": 2}
    assert method_options(replace(everything, method="grad_rollout")) == {"discard_ratio": 0.5, "target_class": 1}
    assert method_options(replace(everything, method="center")) == {}
    assert method_options(replace(everything, head=1)) == {"head_fusion": None, "layer": 2}
    assert method_options(replace(everything, method="rollout", head=1)) == {
        "head_fusion": "min", "discard_ratio": 0.5, "start_layer": 1}
    assert ignored_controls("grad_rollout") == ["head fusion", "start layer", "layer", "head"]
    assert ignored_controls("center", single_head=True) == [
        "head fusion", "discard ratio", "start layer", "layer", "target class", "head"]
    assert explore(model, image, replace(everything, method="center")).ignored == ignored_controls("center")


def test_bad_controls_and_images_are_refused_with_their_reason(model, image):
    with pytest.raises(OptionValueError, match=r"^head 4 is out of range for a layer with 4 heads \(0…3\)$"):
        explore(model, image, ExplorerControls(method="attention", head=4))
    with pytest.raises(ValueError, match=r"^layer 4 is out of range for a model with 4 layers \(-4…3\)$"):
        explore(model, image, ExplorerControls(layer=4))
    with pytest.raises(ValueError, match=r"^start layer 4 is out of range for a model with 4 layers \(0…3\)$"):
        explore(model, image, ExplorerControls(start_layer=4))
    with pytest.raises(ValueError, match=r"^target class 7 is out of range for a model with 4 classes \(0…3\)$"):
        explore(model, image, ExplorerControls(method="chefer", target_class=7))
    with pytest.raises(ValueError,
                       match=r"^image must be RGB uint8 of shape \(H, W, 3\), H and W ≥ 1; got float64 \(4, 4\)$"):
        explore(model, np.zeros((4, 4)), ExplorerControls())


def test_a_layer_that_is_not_a_whole_number_is_refused_not_rounded(model, image):
    """As a method's int option is from Python and the command line: the slider's 2.0 is layer 2, its 0.5 no layer."""
    assert vitroll.app.controls_from_widgets("rollout", "mean", 0.0, 2.0, 3.0, "all", "predicted") == ExplorerControls(
        method="rollout", head_fusion="mean", discard_ratio=0.0, start_layer=2, layer=3)
    with pytest.raises(MethodOptionError, match=r"^the explorer's start layer takes int \| None; got 0\.5 \(float\)$"):
        vitroll.app.controls_from_widgets("chefer", "mean", 0.0, 0.5, 3.0, "all", "predicted")
    with pytest.raises(MethodOptionError, match=r"^the explorer's layer takes int \| None; got 1\.5 \(float\)$"):
        explore(model, image, ExplorerControls(layer=1.5))
    with pytest.raises(MethodOptionError, match=r"^option 'start_layer' of method 'chefer' takes int; got 0\.5"):
        vitroll.METHODS["chefer"](model, image, start_layer=0.5)


def test_the_model_outline_gives_the_ranges_of_the_controls(model):
    outline = model_outline(model, class_names=class_names(model))
    assert (outline.layers, outline.heads, outline.class_names) == (4, 4, ["square", "disk", "triangle", "cross"])
    assert model_outline(model).class_names == ["class 0", "class 1", "class 2", "class 3"]


PROMPTS = ("a dog", "a photo of a cat")
JET_STEP = int(np.ceil(np.abs(np.diff(lookup_table("jet").astype(int), axis=0)).max() * 0.5))
"""Most that one step of the colormap moves a colour of the overlay (jet's largest step between neighbouring rows, 5,
at opacity 0.5, rounded up): a map equal within float32 rounding may land one step away."""


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A small-config transformers CLIPModel that reads strings through a tiny tokenizer."""
    model, tokenizer = hf_model("clip"), clip_tokenizer(tmp_path_factory.mktemp("tokenizer"))
    vitroll.use_tokenizer(model, tokenizer)
    return model, tokenizer


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    return np.asarray(load_image(ROOT / "sample_images" / "cat.jpg"))


def prompt_probabilities(clip, tensor: torch.Tensor, prompts: tuple[str, ...]) -> np.ndarray:
    """softmax of the model's own ``logits_per_image`` (1, T) over ``prompts``, tokenised as CLIP's processor does."""
    model, tokenizer = clip
    with torch.no_grad():
        logits = model(pixel_values=tensor, **tokenizer(list(prompts), padding="longest", return_tensors="pt"))
    return logits.logits_per_image.softmax(-1)[0].numpy()


def test_an_image_text_models_prompts_are_its_classes_and_chefer_explains_the_chosen_ones_score(clip, photo):
    model, _ = clip
    tensor, (geometry,) = Preprocessing.from_model(model).batch([Image.fromarray(photo)])
    maps = vitroll.image_text_maps(model, tensor, list(PROMPTS)).numpy()  # (1, T, h, w)
    probabilities = prompt_probabilities(clip, tensor, PROMPTS)
    shown = [explore(model, photo, ExplorerControls(method="chefer", prompts=PROMPTS, target_class=t)) for t in (0, 1)]
    for t, each in enumerate(shown):
        assert np.allclose(each.grid_map, maps[0, t], rtol=1e-5, atol=1e-6 * np.abs(maps).max())
        _, expected = render(photo, maps[0, t], geometry, ExplainSettings())
        assert np.abs(each.overlay.astype(int) - expected).max() <= JET_STEP
        assert [(k, name) for k, name, _ in each.top] == [(k, PROMPTS[k]) for k in np.argsort(probabilities)[::-1]]
        assert np.allclose([p for *_, p in each.top], np.sort(probabilities)[::-1], atol=1e-6)
        assert each.ignored == ["head fusion", "discard ratio", "layer", "head"]
    assert np.abs(shown[0].grid_map - shown[1].grid_map).max() > 0.05 * np.abs(maps).max()  # two prompts, two maps
    best = explore(model, photo, ExplorerControls(method="chefer", prompts=PROMPTS))
    assert np.array_equal(best.grid_map, shown[int(np.argmax(probabilities))].grid_map)


def test_rollout_on_an_image_text_model_is_its_vision_towers_whatever_the_prompts(clip, photo):
    model, _ = clip
    tensor, _ = Preprocessing.from_model(model).batch([Image.fromarray(photo)])
    shown = explore(model, photo, ExplorerControls(method="rollout", prompts=PROMPTS))
    other = explore(model, photo, ExplorerControls(method="rollout", prompts=("a bird", "a car", "a tree")))
    assert np.array_equal(shown.grid_map, vitroll.rollout(model, tensor)[0].numpy())
    assert np.array_equal(shown.overlay, other.overlay)
    assert shown.ignored == ["layer", "target class", "head", "prompts"]
    assert [name for _, name, _ in other.top] == [("a bird", "a car", "a tree")[k] for k in np.argsort(
        prompt_probabilities(clip, tensor, ("a bird", "a car", "a tree")))[::-1]]
    outline = model_outline(model)
    assert (outline.layers, outline.heads, outline.class_names, outline.image_text) == (2, 2, [], True)
    assert ignored_controls("grad_rollout", image_text=True) == ["head fusion", "start layer", "layer", "head"]


def test_prompts_that_do_not_fit_the_model_are_refused_with_their_reason(clip, photo, model, image):
    with pytest.raises(OptionValueError, match="^CLIPModel is an image–text model: give at least one prompt"):
        explore(clip[0], photo, ExplorerControls())
    with pytest.raises(OptionValueError, match=r"^prompts need an image–text model \(CLIP, SigLIP, open_clip\); "
                                               "VisionTransformer scores classes, not texts$"):
        explore(model, image, ExplorerControls(prompts=("a cross",)))
    with pytest.raises(ValueError, match="is blank: a blank text has nothing to explain"):
        scored_model(clip[0], ("a dog", " "))
    with pytest.raises(ValueError, match=r"^target class 2 is out of range for a model with 2 classes \(0…1\)$"):
        explore(clip[0], photo, ExplorerControls(method="chefer", prompts=PROMPTS, target_class=2))
    without_tokenizer = hf_model("clip")
    with pytest.raises(ValueError, match="CLIPModel reads strings through its tokenizer"):
        explore(without_tokenizer, photo, ExplorerControls(prompts=PROMPTS))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def served_page(model):
    """The explorer page for the testbed model and its address: served on 127.0.0.1 at a free port while the module's
    tests run."""
    from vitroll.app import build_app, example_images, serve

    examples = example_images(ROOT / "sample_images")
    app = build_app(model, model_label="vitroll-shapes", class_names=class_names(model), examples=examples)
    url = serve(app, host="127.0.0.1", port=free_port(), examples=examples, block=False)
    yield app, url
    app.close()


@pytest.fixture(scope="module")
def served(served_page):
    """The address of :func:`served_page`."""
    return served_page[1]


def session_state(app, client) -> list:
    """The values the page keeps in its ``gr.State`` for ``client``'s session."""
    return [value for _, value, _ in app.state_holder.session_data[client.session_hash].state_components]


def test_the_page_answers_gradio_client_with_the_pure_functions_pixels(served, model, image):
    from gradio_client import Client, handle_file

    client = Client(served, verbose=False)
    overlay_path, grid_path, top, note = client.predict(
        handle_file(CROSS), "attention", "mean", 0.0, 0, 1, "2", "predicted", api_name="/explain")
    expected = explore(model, image, ExplorerControls(method="attention", head_fusion="mean", discard_ratio=0.0,
                                                      start_layer=0, layer=1, head=2), class_names=class_names(model))
    assert np.array_equal(np.asarray(Image.open(overlay_path)), expected.overlay)
    assert np.array_equal(np.asarray(Image.open(grid_path)), expected.head_grid)
    assert top["label"] == "cross" and [entry["label"] for entry in top["confidences"]] == [
        name for _, name, _ in expected.top]
    assert note == ("**attention** does not use: discard ratio, start layer, target class, head fusion. "
                    "The per-head grid shows layer 1.")
    _, _, _, rollout_note = client.predict(handle_file(CROSS), "rollout", "mean", 0.9, 1, 3, "all", "predicted",
                                           api_name="/explain")
    in_viridis, _, _, _ = client.predict(handle_file(CROSS), "rollout", "mean", 0.0, 0, 3, "all", "predicted",
                                         "viridis", api_name="/explain")
    expected = explore(model, image, ExplorerControls(method="rollout", head_fusion="mean", discard_ratio=0.0,
                                                      start_layer=0, layer=3), settings=ExplainSettings(cmap="viridis"))
    assert np.array_equal(np.asarray(Image.open(in_viridis)), expected.overlay)
    assert rollout_note.startswith("**rollout** does not use: layer, target class, head.")


def test_an_upload_that_is_not_an_image_or_a_layer_not_whole_is_refused_with_its_reason(served, tmp_path, capfd):
    """In one line, also on the server's terminal: a user's mistake, not a bug to trace back."""
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    client = Client(served, verbose=False)
    truncated, text = tmp_path / "scan.png", tmp_path / "notes.png"
    truncated.write_bytes(CROSS.read_bytes()[:200])
    text.write_text("not pixels")
    huge = png_claiming_size(tmp_path / "pano.png", 30_000, 20_000)  # Gradio's own open raised Pillow's bomb error
    for upload, reason in ((truncated, "corrupt or truncated image data ("), (text, "not an image Pillow can read"),
                           (huge, "image too large: 600 MP (30000×20000), over the limit of 500 MP; max_pixels=")):
        with pytest.raises(ImageReadError) as unreadable:
            load_image(upload)
        with pytest.raises(AppError) as refused:
            client.predict(handle_file(upload), "rollout", "mean", 0.0, 0, 3, "all", "predicted", api_name="/explain")
        assert str(refused.value) == f"{upload.name}: {unreadable.value.reason}"  # not the server's copy of it
        assert unreadable.value.reason.startswith(reason)
    with pytest.raises(AppError) as refused:  # not rounded to start layer 0
        client.predict(handle_file(CROSS), "rollout", "mean", 0.0, 0.5, 3, "all", "predicted", api_name="/explain")
    assert str(refused.value) == "the explorer's start layer takes int | None; got 0.5 (float)"
    assert "Traceback" not in capfd.readouterr().err
    assert not Path(vitroll.app.__file__).with_suffix(".pyi").exists()  # Gradio's stub for a component subclass


def test_the_page_gets_a_display_copy_of_a_large_overlay_and_the_full_size_one_on_demand(served_page, model, tmp_path):
    """A 24 MP photo's overlay went to the page at full size: a 37 MB PNG, encoded for seconds on every slider move.
    The page now gets at most DISPLAY_SIDE pixels a side; the full-size button writes the overlay as explored, drawn
    again from the map: the session kept the overlay itself (72 MB at 24 MP) until it ended."""
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    app, served = served_page
    client = Client(served, verbose=False)
    with pytest.raises(AppError) as refused:
        client.predict(api_name="/full_size_overlay")
    assert str(refused.value) == "Explain an image first: its overlay at full size is then written here."
    wide = np.asarray(Image.open(CROSS).convert("RGB").resize((3000, 2000), Image.Resampling.NEAREST))
    Image.fromarray(wide).save(tmp_path / "wide cross.png")
    shown, _, _, _ = client.predict(handle_file(tmp_path / "wide cross.png"), "rollout", "mean", 0.0, 0, 1, "all",
                                    "predicted", api_name="/explain")
    expected = explore(model, wide, ExplorerControls(method="rollout", head_fusion="mean", discard_ratio=0.0,
                                                     start_layer=0, layer=1), class_names=class_names(model)).overlay
    assert Image.open(shown).size == (2048, 1365)
    assert np.array_equal(np.asarray(Image.open(shown)), vitroll.app.display_copy(expected))
    kept, = session_state(app, client)
    assert kept.grid_map.shape == GRID and kept.grid_map.nbytes + len(kept.image) < 1000
    assert not any(isinstance(value, np.ndarray) and value.size > 64 for value in vars(kept).values())
    viridis = explore(model, wide, ExplorerControls(method="rollout", head_fusion="mean", discard_ratio=0.0,
                                                    start_layer=0, layer=1), settings=ExplainSettings(cmap="viridis"))
    client.predict(handle_file(tmp_path / "wide cross.png"), "rollout", "mean", 0.0, 0, 1, "all", "predicted",
                   "viridis", api_name="/explain")
    full = Path(client.predict(api_name="/full_size_overlay")["value"])
    assert full.name == "wide cross_overlay.png" and np.array_equal(np.asarray(Image.open(full)), viridis.overlay)
    client.predict(handle_file(tmp_path / "wide cross.png"), "rollout", "mean", 0.0, 0, 1, "all", "predicted",
                   api_name="/explain")
    full = Path(client.predict(api_name="/full_size_overlay")["value"])
    assert np.array_equal(np.asarray(Image.open(full)), expected)
    client.predict(handle_file(tmp_path / "wide cross.png"), "rollout", "mean", 0.0, 0, 1, "all", "predicted",
                   "magma", api_name="/explain")  # an overlay not yet written
    kept, = session_state(app, client)
    Path(kept.image).unlink()  # the server's copy of the upload, gone
    with pytest.raises(AppError) as refused:
        client.predict(api_name="/full_size_overlay")
    assert str(refused.value) == "no such file: upload the image again"


def test_without_an_image_the_page_asks_for_one_and_forgets_the_last_overlay(served, tmp_path, capfd):
    """Removing the image (its box's x) gave 4 values for the 5 outputs: "Error" on the page and a traceback on the
    server's terminal."""
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))
    client.predict(handle_file(CROSS), "rollout", "mean", 0.0, 0, 1, "all", "predicted", api_name="/explain")
    overlay, heads, _, note = client.predict(None, "rollout", "mean", 0.0, 0, 1, "all", "predicted",
                                             api_name="/explain")
    assert (overlay, heads, note) == (None, None, "Upload an image or pick an example.")
    with pytest.raises(AppError, match="^Explain an image first"):  # not the overlay of the image removed
        client.predict(api_name="/full_size_overlay")
    assert "Traceback" not in capfd.readouterr().err


def test_an_images_unusable_colour_profile_is_warned_of_once_a_session_not_on_every_request(served, tmp_path, capfd):
    """Each slider moved, and the full-size download, read the image again and printed its warning again; then it was
    told once a server: a second session of the same image was never told."""
    from gradio_client import Client, handle_file

    upload = tmp_path / "broken profile.png"
    Image.open(CROSS).convert("RGB").save(upload, icc_profile=b"not a profile at all")
    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))
    for layer in (1, 0, 1):
        client.predict(handle_file(upload), "rollout", "mean", 0.0, 0, layer, "all", "predicted", api_name="/explain")
    client.predict(api_name="/full_size_overlay")
    warnings = [line for line in capfd.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith(
        "vitroll: warning: broken profile.png: its embedded ICC colour profile cannot be used ("), warnings
    other = tmp_path / "another.png"  # another image: warned of in its turn
    Image.open(CROSS).convert("RGB").transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(
        other, icc_profile=b"not a profile at all")
    client.predict(handle_file(other), "rollout", "mean", 0.0, 0, 1, "all", "predicted", api_name="/explain")
    warnings = [line for line in capfd.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("vitroll: warning: another.png: its embedded ICC colour")
    # another session (a second user, a second tab) is told too: Gradio's copy of the same file is the same file
    second = Client(served, verbose=False, download_files=str(tmp_path / "second client"))
    for layer in (1, 0):
        second.predict(handle_file(upload), "rollout", "mean", 0.0, 0, layer, "all", "predicted", api_name="/explain")
    warnings = [line for line in capfd.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and warnings[0].startswith("vitroll: warning: broken profile.png: its embedded ICC")


def test_the_warnings_a_page_remembers_giving_are_bounded_and_forgotten_when_their_session_ends(served_page, tmp_path,
                                                                                                capfd, monkeypatch):
    """The page remembered every (session, image, warning) it had warned of, for the life of the server: now the
    least recently given beyond WARNINGS_KEPT are forgotten (and given again when they come again), and a session's
    when its tab is closed (Gradio's unload event)."""
    from types import SimpleNamespace

    from gradio_client import Client, handle_file

    app, served = served_page
    monkeypatch.setattr(vitroll.app, "WARNINGS_KEPT", 2, raising=False)
    uploads = []
    for k in range(3):
        upload = tmp_path / f"profile {k}.png"
        picture = np.asarray(Image.open(CROSS).convert("RGB")).copy()
        picture[0, 0] = k  # another file, so another copy on the server
        Image.fromarray(picture).save(upload, icc_profile=b"not a profile at all")
        uploads.append(upload)
    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))

    def warned_of(*names: str) -> list[str]:
        for name in names:
            client.predict(handle_file(tmp_path / name), "rollout", "mean", 0.0, 0, 3, "all", "predicted",
                           api_name="/explain")
        return [line.split(":")[2].strip() for line in capfd.readouterr().err.splitlines() if "ICC" in line]

    capfd.readouterr()
    assert warned_of("profile 0.png", "profile 1.png", "profile 2.png") == [
        "profile 0.png", "profile 1.png", "profile 2.png"]
    assert warned_of("profile 2.png", "profile 1.png") == []  # the last two are remembered
    assert warned_of("profile 0.png") == ["profile 0.png"]  # the first was forgotten: told again
    unload, = [block.fn for block in app.fns.values() if block.targets == [(None, "unload")]]
    unload(SimpleNamespace(session_hash=client.session_hash))  # the tab closed
    assert warned_of("profile 0.png") == ["profile 0.png"]


def test_the_servers_copies_of_an_upload_and_its_overlays_are_in_a_folder_only_its_user_can_enter(served_page,
                                                                                                    tmp_path):
    """Gradio copied every upload (named as the user named it) and every file the page served into the shared
    /tmp/gradio, readable by every user of the machine and never removed."""
    from gradio_client import Client, handle_file

    app, served = served_page
    token = f"{os.getpid()}-{id(tmp_path)}"  # /tmp/gradio is shared with other processes
    name = f"scan of patient {token}.png"
    (tmp_path / name).write_bytes(CROSS.read_bytes())
    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))  # the client's own copies
    client.predict(handle_file(tmp_path / name), "rollout", "mean", 0.0, 0, 1, "all", "predicted", api_name="/explain")
    client.predict(api_name="/full_size_overlay")
    private = vitroll.app.PRIVATE_CACHE.folder
    kept, = session_state(app, client)
    assert Path(kept.image).name == name and Path(kept.image).is_relative_to(private)
    assert (private.stat().st_mode & 0o777) == 0o700
    assert sorted(path.name for path in private.rglob(f"*{token}*")) == [name, f"scan of patient {token}_overlay.png"]
    assert not [*(Path(tempfile.gettempdir()) / "gradio").rglob(f"*{token}*")]


def test_closing_a_page_removes_its_full_size_overlays_each_written_once(model, tmp_path, monkeypatch):
    """The full-size overlays a page wrote for its downloads stayed on disk until the Python process ended; each
    request wrote another file of the same overlay."""
    from gradio_client import Client, handle_file
    from vitroll.app import build_app, serve

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    app = build_app(model, model_label="vitroll-shapes", class_names=class_names(model))
    try:
        client = Client(serve(app, host="127.0.0.1", port=free_port(), block=False), verbose=False,
                        download_files=str(tmp_path / "client"))
        explain = ("rollout", "mean", 0.0, 0, 1, "all", "predicted")
        client.predict(handle_file(CROSS), *explain, api_name="/explain")
        client.predict(api_name="/full_size_overlay")
        downloads, = [path for path in tmp_path.glob("vitroll-explorer-*")
                      if not path.name.startswith("vitroll-explorer-cache-")]
        assert [path.name for path in downloads.rglob("*.png")] == ["shapes_cross_overlay.png"]
        first, = downloads.rglob("*.png")
        written = first.stat().st_mtime_ns
        # asked for again, and explained again: each wrote another copy of the same overlay
        client.predict(api_name="/full_size_overlay")
        client.predict(handle_file(CROSS), *explain, api_name="/explain")
        client.predict(api_name="/full_size_overlay")
        assert [*downloads.rglob("*.png")] == [first] and first.stat().st_mtime_ns == written
        client.predict(handle_file(CROSS), *explain, "viridis", api_name="/explain")
        other = Path(client.predict(api_name="/full_size_overlay")["value"])
        assert len([*downloads.rglob("*.png")]) == 2
        assert np.array_equal(np.asarray(Image.open(other)), explore(
            model, np.asarray(load_image(CROSS)), ExplorerControls(head_fusion="mean", discard_ratio=0.0, start_layer=0,
                                                                  layer=1), settings=ExplainSettings(cmap="viridis"),
            class_names=class_names(model)).overlay)
    finally:
        app.close()
    assert not downloads.exists()

PAGE_FROM_PYTHON = """
import sys
from vitroll.app import build_app, example_images, serve
from vitroll.commands.app import SAMPLE_IMAGES
from vitroll.testbed.model import load_testbed_model

examples = example_images(SAMPLE_IMAGES)
page = build_app(load_testbed_model(), model_label="vitroll-shapes", examples=examples)
serve(page, host="127.0.0.1", port=int(sys.argv[-1]), examples=examples)
"""
"""A page built and served from Python, not through ``vitroll app``, until Ctrl-C."""


def test_the_command_removes_its_copies_when_ctrl_c_stops_it_and_uses_a_gradio_temp_dir_set_outside(tmp_path):
    """Nothing the page was sent or served outlives the explorer, stopped by Ctrl-C or by SIGTERM (``kill``, a service
    manager; that left the copies on disk); a GRADIO_TEMP_DIR of the user's is theirs: used, and left as it is. A page
    built from Python imported Gradio before taking its private folder: Gradio named /tmp/gradio then, and made a
    folder there; so did a page whose caller had imported Gradio before ``build_app``."""
    from gradio_client import Client, handle_file

    upload = tmp_path / "scan of a patient.png"
    upload.write_bytes(CROSS.read_bytes())
    cases = ((None, signal.SIGINT, ["-m", "vitroll", "app", "--port"]),
             (None, signal.SIGTERM, ["-m", "vitroll", "app", "--port"]),
             (tmp_path / "the user's gradio cache", signal.SIGINT, ["-m", "vitroll", "app", "--port"]),
             (None, signal.SIGINT, ["-c", PAGE_FROM_PYTHON]),
             (None, signal.SIGINT, ["-c", "import gradio\n" + PAGE_FROM_PYTHON]))
    for case, (own_folder, stop, program) in enumerate(cases):
        temporary = tmp_path / f"tmp for case {case}"
        temporary.mkdir()
        environment = {key: value for key, value in os.environ.items() if key != "GRADIO_TEMP_DIR"}
        environment.update(TMPDIR=str(temporary), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
        if own_folder is not None:
            environment["GRADIO_TEMP_DIR"] = str(own_folder)
        server = subprocess.Popen([sys.executable, *program, str(free_port())],
                                  env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = server.stdout.readline()
            assert line.startswith("vitroll: the explorer is at "), line + server.stderr.read()
            client = Client(line.split()[5], verbose=False, download_files=str(tmp_path / "client"))
            client.predict(handle_file(upload), "rollout", "mean", 0.0, 0, 1, "all", "predicted", api_name="/explain")
            client.predict(api_name="/full_size_overlay")
            cache = own_folder or next(temporary.glob("vitroll-explorer-cache-*"))
            assert own_folder is not None or (cache.stat().st_mode & 0o777) == 0o700
            assert [copy.name for copy in cache.rglob("scan of a patient*")] and not (temporary / "gradio").exists()
            assert own_folder is not None or [copy.name for copy in cache.rglob(CROSS.name)] == [CROSS.name]
        finally:
            server.send_signal(stop)
            _, errors = server.communicate(timeout=120)
        assert server.returncode == 0 and "Traceback" not in errors, errors
        assert [path.name for path in temporary.iterdir() if not path.name.startswith("torchinductor")] == []
        assert own_folder is None or [copy.name for copy in own_folder.rglob("scan of a patient*")]


def test_gradio_modules_imported_before_a_page_name_its_private_folder_while_held_and_gradios_own_after(monkeypatch):
    """Gradio's modules that read GRADIO_TEMP_DIR once, at import, kept /tmp/gradio when imported before the page
    (a launch made /tmp/gradio/vibe_edit_history), or the folder of an earlier page, removed with it (and made
    again)."""
    import gradio.route_utils
    import gradio.routes

    for name in vitroll.app.GRADIO_FOLDER_READERS:  # as they were, for the other tests' pages
        if hasattr(sys.modules.get(name), "DEFAULT_TEMP_DIR"):
            monkeypatch.setattr(sys.modules[name], "DEFAULT_TEMP_DIR", sys.modules[name].DEFAULT_TEMP_DIR)
    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    cache = vitroll.app.PrivateCache()
    for _ in range(2):  # a second page after the first was closed
        with cache as folder:
            assert gradio.routes.DEFAULT_TEMP_DIR == gradio.route_utils.DEFAULT_TEMP_DIR == folder
            assert Path(folder).is_dir()
        assert gradio.routes.DEFAULT_TEMP_DIR == gradio.route_utils.DEFAULT_TEMP_DIR == str(
            Path(tempfile.gettempdir()) / "gradio")
        assert not Path(folder).exists()


def test_a_display_copy_keeps_the_aspect_and_a_picture_that_fits_is_itself():
    tall = np.zeros((5000, 1000, 3), np.uint8)
    assert vitroll.app.display_copy(tall).shape == (2048, 410, 3)
    fits = tall[:2048]
    assert vitroll.app.display_copy(fits) is fits


def test_a_value_the_page_does_not_offer_sent_through_the_api_is_refused_in_one_line(served, capfd):
    """A method, head, colormap, … that is not on the page's menus, or a slider beyond its ends, sent through
    ``gradio_client``: Gradio's refusal named no widget ("Value: nonsense is not in the list of choices: [...]") and
    printed a traceback on the server's terminal; a menu left empty (None) got as far as ``int(None)``."""
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    client = Client(served, verbose=False)
    good = dict(method="rollout", head_fusion="mean", discard_ratio=0.0, start_layer=0, layer=3, head="all",
                target_class="predicted", cmap="jet")
    methods = ", ".join(sorted(vitroll.METHODS))
    for widget, value, message in (
            ("method", "nonsense", f"method: 'nonsense' is not offered; choose one of {methods}"),
            ("method", None, f"method: None is not offered; choose one of {methods}"),
            ("head_fusion", "median", "head fusion: 'median' is not offered; choose one of mean, max, min"),
            ("head", "head 9", "head: 'head 9' is not offered; choose one of all, 0, 1, 2, 3"),
            ("head", None, "head: None is not offered; choose one of all, 0, 1, 2, 3"),
            ("target_class", "cross", "target class: 'cross' is not offered; choose one of predicted, 0, 1, 2, 3"),
            ("cmap", "nocmap", "colormap: 'nocmap' is not offered; choose one of jet, turbo, viridis, inferno, "
                               "magma, cividis, gray"),
            ("discard_ratio", 5.0, "discard ratio: 5.0 is not offered; choose a number from 0 to 0.99"),
            ("start_layer", -1, "start layer: -1 is not offered; choose a number from 0 to 3"),
            ("layer", "abc", "layer (per-head grid, single head): 'abc' is not offered; choose a number from 0 to 3")):
        with pytest.raises(AppError) as refused:
            client.predict(handle_file(CROSS), *{**good, widget: value}.values(), api_name="/explain")
        assert str(refused.value) == message
    assert "Traceback" not in capfd.readouterr().err


@pytest.fixture(scope="module")
def served_clip(clip):
    """The explorer page for the small CLIP model, served on 127.0.0.1 at a free port."""
    from vitroll.app import build_app, serve

    app = build_app(clip[0], model_label="tiny CLIP")
    url = serve(app, host="127.0.0.1", port=free_port(), block=False)
    yield url
    app.close()


def test_an_image_text_models_page_takes_prompts_as_the_last_input_of_explain(served_clip, clip, photo):
    from gradio_client import Client, handle_file
    from gradio_client.exceptions import AppError

    client = Client(served_clip, verbose=False)
    parameters = client.view_api(return_format="dict")["named_endpoints"]["/explain"]["parameters"]
    assert parameters[-1]["parameter_name"] == "prompts" and parameters[-1]["parameter_default"] == (
        "a photo of a cat\na photo of a dog")
    cat = handle_file(ROOT / "sample_images" / "cat.jpg")
    three = ("a bird", "a dog", "a photo of a cat")
    overlay_path, _, top, note = client.predict(cat, "chefer", "mean", 0.0, 0, 1, "all", "2", "jet",
                                                " a bird\n\na dog \na photo of a cat\n", api_name="/explain")
    expected = explore(clip[0], photo, ExplorerControls(method="chefer", head_fusion="mean", discard_ratio=0.0,
                                                        start_layer=0, layer=1, target_class=2, prompts=three))
    assert np.array_equal(np.asarray(Image.open(overlay_path)), expected.overlay)
    assert [(entry["label"], round(entry["confidence"], 6)) for entry in top["confidences"]] == [
        (name, round(probability, 6)) for _, name, probability in expected.top] and len(expected.top) == 3
    assert note == "**chefer** does not use: head fusion, discard ratio, layer, head. The per-head grid shows layer 1."
    _, _, _, rollout_note = client.predict(cat, "rollout", "mean", 0.0, 0, 1, "all", "predicted", "jet", "a dog",
                                           api_name="/explain")
    assert rollout_note.startswith("**rollout** does not use: layer, target class, head, prompts.")
    with pytest.raises(AppError, match="CLIPModel is an image–text model: give at least one prompt"):
        client.predict(cat, "chefer", "mean", 0.0, 0, 1, "all", "predicted", "jet", " \n ", api_name="/explain")
    with pytest.raises(AppError) as refused:  # the menu takes typed values: a prompt's text is not its number
        client.predict(cat, "chefer", "mean", 0.0, 0, 1, "all", "a dog", "jet", "a dog\na cat", api_name="/explain")
    assert str(refused.value) == ("target class: 'a dog' is not offered; choose 'predicted' or a prompt's number from "
                                  "the menu (0 for the first prompt)")  # was: invalid literal for int() …


def test_the_note_on_a_backbones_page_names_no_target_class():
    """A backbone's page has no target-class menu, but its note said "rollout does not use: layer, target class,
    head"."""
    from gradio_client import Client, handle_file

    from vitroll.app import build_app, serve

    app = build_app(tiny_backbone(), model_label="backbone")
    note, = [block for block in app.blocks.values() if getattr(block, "elem_id", None) == "note"]
    assert note.value == "**rollout** does not use: layer, head. The per-head grid shows layer 1."
    url = serve(app, host="127.0.0.1", port=free_port(), block=False)
    try:
        client = Client(url, verbose=False)
        notes = [client.predict(handle_file(CROSS), method, "mean", 0.0, 0, 1, head, "predicted",
                                api_name="/explain")[3] for method, head in (("rollout", "all"), ("attention", "1"))]
    finally:
        app.close()
    # the random backbone's rollout is near-constant too: a second paragraph says so (800bb9c), not this test's concern
    assert not any("target class" in note for note in notes)
    assert [note.split("\n\n")[0] for note in notes] == [
        "**rollout** does not use: layer, head. The per-head grid shows layer 1.",
        "**attention** does not use: discard ratio, start layer, head fusion. The per-head grid shows layer 1."]


def test_no_picture_on_the_page_offers_to_send_it_to_a_third_party(model):
    """Gradio's pictures have a "Share" button by default, which uploads the picture to huggingface.co: one click sent
    a (perhaps a patient's) image and its overlay off the machine, from a page that refuses to be served beyond it."""
    import gradio

    from vitroll.app import build_app

    app = build_app(model, model_label="shapes")
    pictures = {block.elem_id: block for block in app.blocks.values() if isinstance(block, gradio.Image)}
    assert sorted(pictures) == ["heads", "image", "overlay", "preview"]
    assert all("share" not in picture.buttons for picture in pictures.values())
    assert "download" in pictures["heads"].buttons  # the heads' grid can still be saved, and the overlay at full size:
    assert "download" not in pictures["overlay"].buttons and "overlay at full size (PNG)" in [
        block.value for block in app.blocks.values() if isinstance(block, gradio.Button)]


def test_the_target_menu_follows_the_prompts():
    from vitroll.app import prompt_lines, target_menu_update

    assert prompt_lines(" a dog \n\n\ta cat\n") == ("a dog", "a cat")
    update = target_menu_update("a dog\na cat\na bird", "2")
    assert update["choices"] == [("best-scoring prompt", "predicted"), ("0: a dog", "0"), ("1: a cat", "1"),
                                 ("2: a bird", "2")] and update["value"] == "2"
    assert target_menu_update("a dog\na cat", "2")["value"] == "predicted"  # that prompt is gone
    assert target_menu_update("a dog", "a dog")["value"] == "predicted"  # typed into the menu: not an index


def test_the_page_runs_in_a_real_browser(served, tmp_path):
    """Picks an example, then a single head of ``attention``, then ``rollout``, each time waiting for a new overlay;
    saves the screenshot under $VITROLL_SCREENSHOT_DIR (the README's docs/app.png:
    ``VITROLL_SCREENSHOT_DIR=docs pytest tests/test_explorer.py -k browser``), else in tmp_path."""
    screenshot = Path(os.environ.get("VITROLL_SCREENSHOT_DIR", tmp_path)) / "app.png"
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        overlay = page.locator("#overlay img")
        sources = []

        def choose(label: str, option: str, note: str) -> None:
            page.get_by_label(label, exact=True).click()
            page.get_by_role("option", name=option, exact=True).click()
            wait_for_text(page, "#note", note)
            sources.append(overlay.get_attribute("src"))

        page.locator(f"img[src*='{CROSS.name}']").first.click()
        overlay.wait_for(timeout=30_000)
        sources.append(overlay.get_attribute("src"))
        choose("method", "attention", "attention does not use: discard ratio, start layer, target class.")
        choose("head", "head 1", "attention does not use: discard ratio, start layer, target class, head fusion.")
        choose("method", "rollout", "rollout does not use: layer, target class, head.")
        # Gradio names a file by its content: rollout's overlay is back, the two attention ones are new
        assert sources[3] == sources[0] and len(set(sources)) == 3
        page.wait_for_function("[...document.images].every(image => image.complete && image.naturalWidth > 0)")
        assert overlay.evaluate("image => image.naturalWidth") == 256
        assert page.locator("#heads img").evaluate("image => image.naturalWidth") == 2 * (160 + 4) + 4
        assert "cross" in page.locator("#top-classes").inner_text()
        legend = page.locator("#legend .vitroll-legend")  # the overlay's colours: jet, each map scaled min to max
        assert legend.inner_text().startswith("low\nhigh\ncolormap jet; each map scaled on its own: its lowest value")
        assert legend.locator(".vitroll-legend-bar").evaluate("bar => getComputedStyle(bar).backgroundImage"
                                                              ).startswith("linear-gradient(to right, rgb(0, 0, 128) "
                                                                           "0%")
        page.screenshot(path=str(screenshot), full_page=True)
        choose_colormap = page.get_by_label("colormap", exact=True)
        choose_colormap.click()
        page.get_by_role("option", name="viridis", exact=True).click()
        wait_for_text(page, "#legend", "colormap viridis; each map scaled on its own")
        page.wait_for_function("source => document.querySelector('#overlay img')?.src !== source", arg=sources[-1])
        assert legend.locator(".vitroll-legend-bar").evaluate("bar => getComputedStyle(bar).backgroundImage"
                                                              ).startswith("linear-gradient(to right, rgb(68, 1, 84) "
                                                                           "0%")
        assert not errors


def test_the_full_size_button_offers_the_overlay_shown_and_a_new_overlay_withdraws_it(served):
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        page.locator(f"img[src*='{CROSS.name}']").first.click()
        page.locator("#overlay img").wait_for(timeout=30_000)
        page.locator("#full-size").click()
        offered = page.locator("#full-size-file")
        offered.wait_for(state="visible", timeout=30_000)
        wait_for_text(page, "#full-size-file", "shapes_cross_overlay")  # its name, then ".png" and its size
        link = page.locator("#full-size-file a[download]")  # a screen reader said its text only: "35.0 KB ⇣"
        size = link.inner_text().replace("\xa0", " ").rstrip(" ⇣")
        assert link.get_attribute("aria-label") == f"download shapes_cross_overlay.png ({size})" and "KB" in size
        page.get_by_label("method", exact=True).click()
        page.get_by_role("option", name="attention", exact=True).click()
        wait_for_text(page, "#note", "attention does not use")
        offered.wait_for(state="hidden", timeout=30_000)  # it was rollout's overlay
        assert not errors

def test_each_example_is_named_by_its_files_name_for_a_screen_reader(served):
    """Gradio draws an example's thumbnail with an empty ``alt``: its button had no name ("button", "image")."""
    from vitroll.app import example_images

    names = [path.name for path in example_images(ROOT / "sample_images")]
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        page.get_by_role("button", name=names[0], exact=True).wait_for(timeout=30_000)
        buttons = page.locator("#examples button")
        assert buttons.evaluate_all("buttons => buttons.map(button => button.querySelector('img').alt)") == names
        for name in names:
            assert page.get_by_role("button", name=name, exact=True).count() == 1, name
        assert not errors


def test_every_button_has_a_name_for_a_screen_reader_once_the_maps_are_shown(served):
    """Gradio puts the overlay and the head grid each in a button (a Tab stop) around a picture with an empty ``alt``:
    a screen reader said "button" for both."""
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        page.get_by_role("button", name=CROSS.name, exact=True).click()
        page.locator("#heads img").wait_for(timeout=30_000)
        wait_for_text(page, "#top-classes", "cross")
        for name in ("overlay", "heads of the chosen layer", f"image: {CROSS.name}"):
            page.get_by_role("img", name=name, exact=True).wait_for(timeout=30_000)
        unnamed = page.eval_on_selector_all("button, a[href], input, [tabindex='0']", """controls => controls.filter(
            control => !control.matches('[aria-label], :has([aria-label])') && !control.labels?.length && !/\\w/.test(
            control.textContent) && ![...control.querySelectorAll('img')].some(image => image.alt)).map(
            control => control.closest('[id]')?.id + ' ' + control.outerHTML.slice(0, 80))""")
        assert unnamed == [] and not errors


def test_the_keyboard_alone_picks_an_example_and_moves_a_slider_and_the_maps_follow(served):
    """A slider moved with its arrow keys, or its number box typed into and left with Enter, changed the value and
    not the maps: Gradio says a slider was let go only when a pointer lets go of it."""
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        example = page.get_by_role("button", name=CROSS.name, exact=True)
        example.focus()
        page.keyboard.press("Enter")
        overlay = page.locator("#overlay img")
        overlay.wait_for(timeout=30_000)
        wait_for_text(page, "#top-classes", "cross")
        page.get_by_label("range slider for layer (per-head grid, single head)").focus()
        page.keyboard.press("ArrowLeft")
        wait_for_text(page, "#note", "The per-head grid shows layer 2.")
        before = overlay.get_attribute("src")
        start_layer = page.get_by_label("number input for start layer")
        start_layer.focus()
        page.keyboard.press("Control+a")
        page.keyboard.type("2")
        page.keyboard.press("Enter")
        page.wait_for_function("source => document.querySelector('#overlay img')?.src !== source", arg=before,
                               timeout=30_000)
        assert not errors


def test_a_slider_value_typed_and_left_with_enter_or_the_mouse_is_explained_once(served):
    """Enter in a number box explained, and leaving the box explained the same value again; clicking into the box
    explained the value it already had: each change of a slider is one request."""
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        requests = []
        page.on("request", lambda request: requests.append(json.loads(request.post_data)["data"][1:6])
                if "/queue/join" in request.url else None)
        overlay = page.locator("#overlay img")

        def new_overlay(action) -> None:
            before = overlay.get_attribute("src")
            action()
            page.wait_for_function("source => document.querySelector('#overlay img')?.src !== source", arg=before,
                                   timeout=30_000)

        page.get_by_role("button", name=CROSS.name, exact=True).click()
        wait_for_text(page, "#top-classes", "cross")
        start_layer = page.get_by_label("number input for start layer")
        start_layer.focus()
        page.keyboard.press("Control+a")
        page.keyboard.type("2")
        new_overlay(lambda: page.keyboard.press("Enter"))
        page.keyboard.press("Enter")  # the same value again
        page.keyboard.press("Tab")  # leaves the box
        page.get_by_label("range slider for layer (per-head grid, single head)").focus()
        page.keyboard.press("ArrowLeft")  # rollout's overlay does not use the layer, the note names it
        wait_for_text(page, "#note", "The per-head grid shows layer 2.")
        discard = page.get_by_label("number input for discard ratio")
        discard.click()  # into the box: nothing changed yet
        page.keyboard.press("Control+a")
        page.keyboard.type("0.5")
        new_overlay(lambda: page.locator("#note").click())  # leaves the box
        # method, head fusion, discard ratio, start layer, layer
        assert requests == [["rollout", "mean", 0, 0, 3], ["rollout", "mean", 0, 2, 3], ["rollout", "mean", 0, 2, 2],
                            ["rollout", "mean", 0.5, 2, 2]]
        assert not errors


def test_an_example_and_an_upload_after_it_are_each_explained_and_named_once(served, tmp_path):
    """Once an example was picked, Gradio's image box told a change twice for every upload: the upload was explained
    twice and its name sent twice for the line under it."""
    upload = tmp_path / "upload after an example.png"
    upload.write_bytes((ROOT / "sample_images" / "two_shapes.png").read_bytes())
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        sent = []  # the names of the files in each request that carries the image box's value
        page.on("request", lambda request: sent.append(("explain" if "/queue/join" in request.url else "caption",
                                                        json.loads(request.post_data)["data"][0]["orig_name"])) if (
            "/queue/join" in request.url or "/run/predict" in request.url) and '"orig_name"' in (
            request.post_data or "") else None)
        page.get_by_role("button", name=CROSS.name, exact=True).click()
        wait_for_text(page, "#top-classes", "cross")
        before = page.locator("#overlay img").get_attribute("src")
        page.locator("input[type=file]").first.set_input_files(str(upload))
        wait_for_exact_text(page, "#file-name", f"file: {upload.name}")
        page.wait_for_function("source => document.querySelector('#overlay img')?.src !== source", arg=before,
                               timeout=30_000)
        page.get_by_label("range slider for layer (per-head grid, single head)").focus()
        page.keyboard.press("ArrowLeft")  # one more request, after any the upload sent
        wait_for_text(page, "#note", "The per-head grid shows layer 2.")
        assert sorted(sent) == sorted([("caption", CROSS.name), ("explain", CROSS.name), ("caption", upload.name),
                                       ("explain", upload.name), ("explain", upload.name)])
        assert sent[-1] == ("explain", upload.name) and not errors


def test_the_loaded_files_name_is_shown_under_the_image_as_text(served, tmp_path):
    """The page never said which file its maps were of: an example or an upload is now named (its name, not the
    server's path to its copy), as text, and nothing is named before one is loaded. Gradio's copy drops ``*<>|?``:
    a file named with them was named without them, under the image and to a screen reader."""
    upload, stripped = tmp_path / "scan 07 R&amp;D (1) é.png", tmp_path / "scan 08 <left>*|?.png"
    upload.write_bytes(CROSS.read_bytes())
    stripped.write_bytes(CROSS.read_bytes())
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        page.get_by_role("button", name=CROSS.name, exact=True).wait_for(timeout=30_000)
        assert page.locator("#file-name").inner_text().strip() == ""
        page.get_by_role("button", name=CROSS.name, exact=True).click()
        wait_for_text(page, "#file-name", CROSS.name)
        assert page.locator("#file-name").inner_text().strip() == f"file: {CROSS.name}"
        page.locator("input[type=file]").first.set_input_files(str(upload))
        wait_for_exact_text(page, "#file-name", f"file: {upload.name}")  # not also Gradio's timer, "0.1s"
        image, caption = (page.locator(selector).bounding_box() for selector in ("#image", "#file-name"))
        assert 0 <= caption["y"] - (image["y"] + image["height"]) < 40  # right under the image
        page.locator("input[type=file]").first.set_input_files(str(stripped))
        wait_for_exact_text(page, "#file-name", f"file: {stripped.name}")
        page.get_by_role("img", name=f"image: {stripped.name}", exact=True).wait_for(timeout=30_000)
        assert not errors


def test_an_8_pixel_image_in_a_narrow_window_is_shown_as_wide_as_its_box_and_the_heads_below_it(served, tmp_path):
    """Gradio shows a picture at most at its own size: an 8×8 upload and its overlay were 8-pixel strips under their
    boxes' buttons, and in a 400-pixel window the head grid beside the overlay had labels a few pixels high."""
    upload = tmp_path / "tiny.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), np.uint8)).save(upload)
    with browser_page(served, {"width": 400, "height": 900}) as (page, errors):
        page.locator("input[type=file]").first.set_input_files(str(upload))
        page.locator("#overlay img").wait_for(timeout=30_000)
        page.locator("#heads img").wait_for(timeout=30_000)
        page.wait_for_function("[...document.images].every(image => image.complete && image.naturalWidth > 0)")
        boxes = {name: page.locator(f"#{name} img").bounding_box() for name in ("image", "overlay", "heads")}
        for name, box in boxes.items():
            assert box["width"] >= 300 and box["height"] >= 250, (name, box)
        assert boxes["heads"]["y"] >= boxes["overlay"]["y"] + boxes["overlay"]["height"]
        assert not errors


@pytest.mark.parametrize("width, stacked", [(320, True), (768, True), (1280, False)])
def test_the_top_classes_and_the_note_stack_in_a_narrow_window(served, width, stacked):
    """At 320 pixels the note beside the top classes was 80 pixels wide, four words a line."""
    with browser_page(served, {"width": width, "height": 900}) as (page, errors):
        page.get_by_role("button", name=CROSS.name, exact=True).click()
        wait_for_text(page, "#top-classes", "cross")
        top, note = (page.locator(selector).bounding_box() for selector in ("#top-classes", "#note"))
        side_by_side = note["x"] >= top["x"] + top["width"]
        assert side_by_side is not stacked, (top, note)
        assert not stacked or note["y"] >= top["y"] + top["height"], (top, note)
        assert min(top["width"], note["width"]) >= (256 if stacked else 300), (top, note)
        assert not errors


def test_a_panorama_and_its_overlay_are_drawn_clear_of_their_boxes_labels_and_buttons(served, tmp_path):
    """A 2000×200 picture as wide as a 400-pixel window's box is 34 pixels high: its box's label and buttons, drawn
    over the top of the picture, hid all of it."""
    upload = tmp_path / "panorama.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (200, 2000, 3), np.uint8)).save(upload)
    with browser_page(served, {"width": 400, "height": 900}) as (page, errors):
        page.locator("input[type=file]").first.set_input_files(str(upload))
        page.locator("#overlay img").wait_for(timeout=30_000)
        page.wait_for_function("[...document.images].every(image => image.complete && image.naturalWidth > 0)")
        for box in ("image", "overlay"):
            picture = page.locator(f"#{box} img").bounding_box()
            drawn_height = picture["width"] * 200 / 2000  # object-fit: contain, in the middle of the box
            drawn_top = picture["y"] + (picture["height"] - drawn_height) / 2
            covers = [page.locator(f"#{box} {selector}").first.bounding_box()
                      for selector in ("[data-testid=block-label]", ".icon-button-wrapper button")]
            assert all(cover["y"] + cover["height"] <= drawn_top for cover in covers), (box, picture, covers)
        assert not errors


def test_an_unreadable_upload_named_like_markup_shows_its_name_as_text_in_the_browser(served, tmp_path):
    """Gradio shows an error's message as HTML: the name must come out as text, and run nothing."""
    upload = tmp_path / "<img src=x onerror=alert(1)> R&amp;D.png"
    upload.write_bytes(CROSS.read_bytes()[:200])
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        dialogs = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.locator("input[type=file]").first.set_input_files(str(upload))
        wait_for_text(page, ".toast-body", "corrupt or truncated image data")
        assert page.locator(".toast-body").inner_text().splitlines()[-1].startswith(
            "<img src=x onerror=alert(1)> R&amp;D.png: corrupt or truncated image data (")
        assert not dialogs and not errors


def test_after_an_example_an_upload_that_is_not_an_image_is_refused_in_one_line_and_named(served, tmp_path, capfd):
    """Picking an example updates the image box, and Gradio then used a copy of it built anew, without the explorer's
    refusal: a text file uploaded next got Gradio's message (its event handler, the server's path) and a traceback on
    the server's terminal, and the line under the image still named the example. The full-size button then offered
    the example's overlay, no longer shown, as if it were the refused file's."""
    upload = tmp_path / "notes*.png"
    upload.write_text("not pixels")
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        page.get_by_role("button", name=CROSS.name, exact=True).click()
        wait_for_text(page, "#top-classes", "cross")
        page.locator("input[type=file]").first.set_input_files(str(upload))
        wait_for_text(page, ".toast-body", "not an image")
        assert set(page.locator(".toast-body").inner_text().splitlines()[-1:]) == {
            "notes*.png: not an image Pillow can read"}
        wait_for_exact_text(page, "#file-name", "file: notes*.png")
        page.locator(".toast-close").first.click()
        page.locator("#full-size").click()
        wait_for_text(page, ".toast-body", "Explain an image first")
        assert page.locator("#full-size-file").is_hidden() and not errors
    assert "Traceback" not in capfd.readouterr().err


def test_new_prompts_in_the_browser_rescore_the_image_and_become_the_target_menu(served_clip):
    """Upload the cat, choose chefer, type three prompts, leave the box: the top classes are the new prompts' and the
    target menu lists them after the best-scoring one."""
    with browser_page(served_clip, {"width": 1400, "height": 1000}) as (page, errors):
        page.locator("input[type=file]").first.set_input_files(str(ROOT / "sample_images" / "cat.jpg"))
        wait_for_text(page, "#top-classes", "a photo of a dog")
        page.get_by_label("method", exact=True).click()
        page.get_by_role("option", name="chefer", exact=True).click()
        wait_for_text(page, "#note", "chefer does not use")
        page.locator("#prompts textarea").fill("a bird\na dog\na photo of a cat")
        page.locator("#note").click()  # leaves the box
        wait_for_text(page, "#top-classes", "a bird")
        assert "a photo of a dog" not in page.locator("#top-classes").inner_text()
        page.get_by_label("target class", exact=True).click()
        assert [option.strip("✓\n") for option in page.get_by_role("option").all_inner_texts()] == [
            "best-scoring prompt", "0: a bird", "1: a dog", "2: a photo of a cat"]
        assert not errors


def test_the_command_refuses_to_serve_beyond_localhost_without_the_flag(capsys):
    assert main(["app", "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err == (
        "vitroll: error: app: --host 0.0.0.0 would serve the explorer to other machines, without a password; pass "
        "--share-on-network to allow it, or leave --host at 127.0.0.1 (this machine only)\n")


def test_the_command_serves_the_shipped_model_and_warns_once_when_shared(monkeypatch, capsys):
    import vitroll.app as command

    served_at = []
    monkeypatch.setattr(command, "serve", lambda app, *, host, port, examples: served_at.append((host, port, examples)))
    assert main(["app", "--host", "0.0.0.0", "--port", "8123", "--share-on-network"]) == 0
    assert capsys.readouterr().err == ("vitroll: warning: --share-on-network: the explorer on 0.0.0.0 can be used by "
                                       "anyone who can reach this machine (no password)\n")
    assert served_at[0][:2] == ("0.0.0.0", 8123) and CROSS in served_at[0][2] and not any(
        path.stem.endswith("_mask") for path in served_at[0][2])


def test_the_command_serves_a_saved_clip_folder_with_a_prompts_box(monkeypatch, tmp_path, capsys):
    import vitroll.app as command

    hf_model("clip").save_pretrained(tmp_path)
    clip_tokenizer(tmp_path).save_pretrained(tmp_path)
    served_pages = []
    monkeypatch.setattr(command, "serve", lambda app, **_: served_pages.append(app))
    assert main(["app", "--model", str(tmp_path)]) == 0, capsys.readouterr().err
    boxes = [block for block in served_pages[0].blocks.values() if getattr(block, "elem_id", None) == "prompts"]
    assert len(boxes) == 1 and boxes[0].value == "a photo of a cat\na photo of a dog"


def test_the_command_starts_the_colormap_menu_at_cmap(monkeypatch, capsys):
    import vitroll.app as command

    served_pages = []
    monkeypatch.setattr(command, "serve", lambda app, **_: served_pages.append(app))
    assert main(["app", "--cmap", "coolwarm"]) == 0, capsys.readouterr().err
    menu, = [block for block in served_pages[0].blocks.values() if getattr(block, "label", None) == "colormap"]
    legend, = [block for block in served_pages[0].blocks.values() if getattr(block, "elem_id", None) == "legend"]
    assert menu.value == "coolwarm" and ("coolwarm", "coolwarm") in menu.choices and "colormap <b>coolwarm</b>" in (
        legend.value)  # an unknown --cmap: tests/test_mistakes.py


def test_the_command_draws_with_alpha_upsample_and_normalize_as_overlay_does(monkeypatch, capsys):
    import vitroll.app as command

    drawn_with = []
    monkeypatch.setattr(command, "build_app", lambda model, **options: drawn_with.append(options["settings"]))
    monkeypatch.setattr(command, "serve", lambda app, **_: None)
    assert main(["app", "--alpha", "0.2", "--upsample", "nearest", "--normalize", "percentile"]) == 0
    assert drawn_with == [ExplainSettings(alpha=0.2, interpolation="nearest", normalization="percentile")]
    assert main(["app"]) == 0 and drawn_with[1] == ExplainSettings()  # overlay's defaults
    capsys.readouterr()
    for mistake in (["--alpha", "2"], ["--upsample", "cubic"], ["--normalize", "robust"]):
        for command_line in (["app", *mistake], ["overlay", str(CROSS), *mistake]):
            with pytest.raises(SystemExit) as usage_error:
                main(command_line)
            assert usage_error.value.code == 2
        in_app, in_overlay = capsys.readouterr().err.splitlines()
        assert in_app == in_overlay.replace("overlay", "app"), mistake


def test_an_examples_folder_that_is_not_one_is_refused(tmp_path, capsys):
    assert main(["app", "--examples", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"vitroll: error: app: --examples {tmp_path / 'nope'} is not a folder\n"


def test_without_gradio_the_command_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` now raises ImportError
    assert main(["app"]) == 2
    assert capsys.readouterr().err == 'vitroll: error: the explorer needs gradio: pip install "vitroll[app]"\n'


def test_a_port_in_use_is_refused_in_one_line_before_the_model_is_loaded(monkeypatch, capsys):
    import vitroll.commands.common as command

    monkeypatch.setattr(command, "model_from_args", lambda args: pytest.fail("the model was loaded"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["app", "--port", str(port)]) == 2
    assert capsys.readouterr().err == (
        f"vitroll: error: app: port {port} on 127.0.0.1 is in use (another server, or an explorer still running); "
        "pass another --port, or leave it out for the first free one from 7860\n")
    assert main(["app", "--host", "192.0.2.7", "--share-on-network", "--port", "8000"]) == 2  # TEST-NET-1: not ours
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "vitroll: error: app: cannot serve on 192.0.2.7 port 8000 (")


def test_serving_until_ctrl_c_prints_one_line_with_the_address_and_no_advice_to_share(model, monkeypatch, capsys):
    from vitroll.app import build_app, serve

    app = build_app(model, model_label="vitroll-shapes")
    monkeypatch.setattr(app, "block_thread", lambda: None)  # as if Ctrl-C came at once
    port = free_port()
    try:
        url = serve(app, host="127.0.0.1", port=port)
        assert capsys.readouterr().out == f"vitroll: the explorer is at {url} (Ctrl-C stops it)\n"
    finally:
        app.close()
    assert url == f"http://127.0.0.1:{port}/"


def test_a_saved_backbone_is_offered_only_the_methods_that_need_no_class_scores_and_no_target_menu(
        monkeypatch, tmp_path, capsys):
    """A bare ViTModel's page offered every method and a target-class menu of "predicted class" alone; choosing
    chefer, grad_rollout, occlusion, … was refused on each click (the model has no class scores)."""
    import transformers

    import vitroll.app as command

    transformers.ViTModel(transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                 intermediate_size=64, image_size=32, patch_size=8)).save_pretrained(
        tmp_path)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    served_pages = []
    monkeypatch.setattr(command, "serve", lambda app, **_: served_pages.append(app))
    scoreless = ["attention", "center", "flow", "random", "rollout"]
    for model, methods, target_shown in ((str(tmp_path), scoreless, False),
                                         ("vitroll-shapes", sorted(vitroll.METHODS), True)):
        assert main(["app", "--model", model]) == 0, capsys.readouterr().err
        widgets = {block.label: block for block in served_pages[-1].blocks.values()
                   if getattr(block, "label", None) in ("method", "target class")}
        assert [value for _, value in widgets["method"].choices] == methods
        assert widgets["target class"].visible is target_shown
    backbone, picture = vitroll.load_model(str(tmp_path)), np.asarray(load_image(CROSS))
    for name in sorted(vitroll.METHODS):  # what is left out is exactly what cannot run
        try:
            explore(backbone, picture, ExplorerControls(method=name))
            ran = True
        except vitroll.errors.UnsupportedModelError as refused:
            ran = False
            assert "has no classification head" in str(refused)
        assert ran is (name in scoreless), name


def test_a_constant_map_is_said_so_on_the_page_naming_its_slider_not_a_flag(served, tmp_path):
    """Rollout with the discard ratio at 0.99 drops 64 of the 65 weights in each row of the testbed's attention: its
    map is 0 everywhere. The page showed a flat overlay without a word; the server's terminal named --discard-ratio,
    a flag the page does not have."""
    from gradio_client import Client, handle_file

    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))
    _, _, _, note = client.predict(handle_file(CROSS), "rollout", "mean", 0.99, 0, 3, "all", "predicted",
                                   api_name="/explain")
    assert note.splitlines()[-1] == (
        "**The map is constant** (all 0): the overlay is one colour and shows nothing. A discard ratio of 0.99 drops "
        "that share of each row's weakest attention; with this model's few tokens it can leave none but the class "
        "token's: a lower **discard ratio** (its slider) keeps more.")
    assert "--discard-ratio" not in note
    _, _, _, note = client.predict(handle_file(CROSS), "rollout", "mean", 0.9, 0, 3, "all", "predicted",
                                   api_name="/explain")
    assert "constant" not in note
    uniform = tmp_path / "grey.png"
    Image.new("RGB", (64, 64), (128, 128, 128)).save(uniform)  # occluding a patch of it changes nothing
    _, _, _, note = client.predict(handle_file(uniform), "occlusion", "mean", 0.0, 0, 3, "all", "predicted",
                                   api_name="/explain")
    assert note.splitlines()[-1] == ("**The map is constant** (all 0): the overlay is one colour and shows nothing. "
                                     "**occlusion** finds no patch different from another.")


def test_a_near_constant_map_is_said_so_on_the_page_as_on_the_terminal():
    """The page's note took a map for constant within 1e-5 of its values, the terminal's warning (map_checks) within
    1 % of its largest magnitude: chefer's map of an untrained model, within 0.1 %, was told of on the server's
    terminal and not on the page; and a map within 1e-6, stretched over the whole colormap, was said to be one
    colour."""
    from vitroll.app import constant_map_note

    grid_map = np.full((8, 8), 0.5)
    grid_map[0, 0] = 0.5005
    stretched = ("the overlay stretches that spread over the whole colormap and shows nothing the model tells apart. "
                 "**chefer** finds no patch different from another.")
    assert constant_map_note(grid_map, "chefer", None) == (
        f"**The map is near-constant** ({grid_map.mean():.4g}, all within 0.1% of it): {stretched}")
    grid_map[0, 0] = 0.500001
    assert constant_map_note(grid_map, "chefer", None).startswith("**The map is near-constant** (0.5, all within")
    grid_map[0, 0] = 0.6  # a spread of 17 % of the largest value: a map
    assert constant_map_note(grid_map, "chefer", None) == ""
    grid_map[:] = 0.25
    assert constant_map_note(grid_map, "occlusion", None) == (
        "**The map is constant** (all 0.25): the overlay is one colour and shows nothing. **occlusion** finds no "
        "patch different from another.")


def test_the_constant_map_warning_on_the_servers_terminal_names_the_slider_not_the_flag(served, tmp_path, capsys):
    """The terminal of `vitroll app` (worded for the command line) told of a constant map at the page's discard ratio
    0.99 with '--discard-ratio 0.99 drops …; --discard-ratio 0.9846 or lower keeps some': the page has no such flag,
    its user moves a slider."""
    from gradio_client import Client, handle_file

    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))
    capsys.readouterr()
    with worded_for_the_command_line():  # as `vitroll app` serves it
        client.predict(handle_file(CROSS), "rollout", "mean", 0.99, 0, 3, "all", "predicted", api_name="/explain")
    lines = [line for line in capsys.readouterr().err.splitlines() if "constant" in line]
    assert lines == [
        "vitroll: warning: rollout's map is constant (all 0) for input 0 of the batch: discard ratio 0.99 (the page's "
        "slider) drops 64 of the 65 attention weights in each row, all but the class token's, which leaves no patch "
        "any: too high for this model's 65 tokens, discard ratio 0.98 (the page's slider) or lower keeps some"]


def test_the_discard_ratio_the_page_advises_is_one_its_slider_can_be_set_to_and_keeps_some_attention(model, batch,
                                                                                                     capsys):
    """The page's advice for a constant rollout was 'discard ratio 0.9846 (the page's slider) or lower' (65 tokens),
    a value its slider (step 0.01) cannot be set to: now the slider's highest value that still keeps a column besides
    the class token's, for any number of tokens; and for the testbed the map at that value is no longer constant."""
    import re

    from vitroll.app import PAGE_CONTROLS
    from vitroll.methods.rollout import _ratios_keeping, discarded_count
    from vitroll.wording import worded_for_a_page

    advised = re.compile(r"discard ratio (\S+) \(the page's slider\) or lower")
    for tokens in range(2, 400):
        with worded_for_a_page(PAGE_CONTROLS):
            ratio = float(advised.fullmatch(_ratios_keeping(tokens)).group(1))
        hundredths = round(ratio * 100)
        assert ratio == hundredths / 100 and 0 <= hundredths <= 99, (tokens, ratio)
        assert discarded_count(tokens, ratio) < tokens - 1, (tokens, ratio)  # it keeps some
        assert hundredths == 99 or discarded_count(tokens, (hundredths + 1) / 100) >= tokens - 1, (tokens, ratio)
    assert advised.search(_ratios_keeping(65)) is None  # from Python: the exact bound, as before
    assert _ratios_keeping(65) == "discard_ratio=0.9846 or lower"
    tensor, _ = batch
    capsys.readouterr()
    with worded_for_a_page(PAGE_CONTROLS):
        vitroll.rollout(model, tensor, discard_ratio=0.99)
        ratio = float(advised.search(capsys.readouterr().err).group(1))
        assert ratio == 0.98
        maps = vitroll.rollout(model, tensor, discard_ratio=ratio)
    assert "constant" not in capsys.readouterr().err
    assert maps.max() > maps.min()


@pytest.mark.parametrize("side", [1, 2, 8])
def test_an_image_smaller_than_the_patch_grid_is_said_to_say_nothing_on_the_page_as_by_overlay(served, side, tmp_path,
                                                                                              capsys):
    """A 1×1 image got a confident class and a map, on the page and from ``vitroll overlay``, without a word that each
    of the testbed's 8×8 patches saw 1/8 of its one pixel. Both now say so, in the same words; an 8×8 image (a pixel
    a patch) is not warned of."""
    from gradio_client import Client, handle_file

    upload = tmp_path / f"tiny {side}.png"
    Image.fromarray(np.random.default_rng(side).integers(0, 256, (side, side, 3), np.uint8)).save(upload)
    warning = (f"the image is smaller than the model's patch grid: enlarged to fit, each patch covers {side / 8:.2g} "
               "of its pixels a side, so its map and classes say next to nothing about it")
    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))
    _, _, _, note = client.predict(handle_file(upload), "rollout", "mean", 0.0, 0, 3, "all", "predicted",
                                   api_name="/explain")
    assert main(["overlay", str(upload), "--out", str(tmp_path / "out")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    if side == 8:
        assert "patch grid" not in note and lines == []
    else:
        assert note.splitlines()[-1] == f"**T{warning[1:]}**."
        assert lines == [f"vitroll: warning: {upload}: {warning}"]


def test_a_file_the_image_box_does_not_show_as_explained_gets_a_preview_of_the_decoded_picture(tmp_path):
    """The image box shows the uploaded file itself: a TIFF was a broken picture. Its preview is the picture the maps
    are drawn on; a PNG or JPEG, which the box draws, and a file that is no image get none."""
    from vitroll.app import preview_picture, preview_reason

    picture = np.asarray(Image.open(CROSS).convert("RGB"))
    Image.fromarray(picture).save(tmp_path / "scan.tif")
    Image.fromarray(picture).save(tmp_path / "scan.jpg")
    Image.fromarray(picture).save(tmp_path / "one.gif")
    frames = [Image.fromarray(picture).quantize(), Image.fromarray(picture[::-1]).quantize()]
    frames[0].save(tmp_path / "cine.gif", save_all=True, append_images=frames[1:])  # the box plays it
    (tmp_path / "notes.tif").write_text("not pixels")
    assert preview_reason(tmp_path / "scan.tif") == "TIFF: browsers cannot draw it; as decoded:"
    assert np.array_equal(preview_picture(tmp_path / "scan.tif", max_pixels=None), picture)
    assert preview_reason(tmp_path / "cine.gif") == "GIF of 2 frames: the first is explained:"
    assert np.array_equal(preview_picture(tmp_path / "cine.gif", max_pixels=None), load_image(tmp_path / "cine.gif"))
    for drawn in (CROSS, tmp_path / "scan.jpg", tmp_path / "one.gif", tmp_path / "notes.tif"):
        assert preview_reason(drawn) is None and preview_picture(drawn, max_pixels=None) is None, drawn


def test_a_palette_png_with_a_transparent_index_is_explained_on_white_from_the_file_uploaded_and_previewed_so(
        served, model, tmp_path, monkeypatch):
    """A palette PNG whose index 0 (red) is transparent: Gradio hands the run the uploaded bytes unchanged, and the
    maps are load_image's picture of them, the hidden red composited on white. The image box shows the page's
    background through those pixels (dark in a dark theme): the preview now shows them as explained."""
    from gradio_client import Client, handle_file

    from vitroll.app import preview_picture, preview_reason

    upload = tmp_path / "palette.png"
    picture = Image.new("P", (64, 64), 0)
    picture.putpalette([255, 0, 0, 0, 255, 0] + [0] * 762)
    picture.paste(1, (28, 20, 36, 44))
    picture.save(upload, transparency=0)
    small = tmp_path / "small.png"  # the brief's 4 × 4 check
    Image.new("P", (4, 4), 0).save(small, transparency=0)
    assert np.asarray(load_image(small)).tolist() == [[[255, 255, 255]] * 4] * 4
    white = np.asarray(load_image(upload))
    assert white[0, 0].tolist() == [255, 255, 255] and white[30, 30].tolist() == [0, 255, 0]
    assert preview_reason(upload) == "PNG with transparent pixels: explained on white:"
    assert np.array_equal(preview_picture(upload, max_pixels=None), white)
    handed = []
    loader = vitroll.app.load_image_with_display
    monkeypatch.setattr(vitroll.app, "load_image_with_display",
                        lambda path, **options: handed.append(Path(path).read_bytes()) or loader(path, **options))
    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))
    shown, *_ = client.predict(handle_file(upload), "rollout", "mean", 0.0, 0, 3, "all", "predicted",
                               api_name="/explain")
    assert handed == [upload.read_bytes()]
    expected = explore(model, white, ExplorerControls(method="rollout", layer=3), class_names=class_names(model))
    assert np.array_equal(np.asarray(Image.open(shown).convert("RGB")), expected.overlay)


def test_an_avif_which_browsers_draw_gets_no_preview_saying_they_cannot(tmp_path):
    """Pillow reads AVIF, and every current browser draws it: its preview said 'AVIF: browsers cannot draw it'."""
    from PIL import features

    from vitroll.app import preview_picture, preview_reason

    if not features.check("avif"):
        pytest.skip("this Pillow has no AVIF codec")
    Image.open(CROSS).convert("RGB").save(tmp_path / "scan.avif")
    assert preview_reason(tmp_path / "scan.avif") is None
    assert preview_picture(tmp_path / "scan.avif", max_pixels=None) is None


def test_a_tiff_upload_is_shown_by_its_preview_in_the_browser_and_explained_from_the_original(served, model, tmp_path):
    """The image box drew an uploaded TIFF as a broken picture: it is hidden, and the preview under it shows the
    decoded picture; the maps are the TIFF's own."""
    upload = tmp_path / "scan.tif"
    Image.open(CROSS).convert("RGB").save(upload)
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        page.locator("input[type=file]").first.set_input_files(str(upload))
        wait_for_text(page, "#top-classes", "cross")
        page.locator("#preview img").wait_for(timeout=30_000)
        page.wait_for_function("width => document.querySelector('#preview img')?.naturalWidth === width",
                               arg=Image.open(CROSS).width)
        page.wait_for_function("document.querySelector('#image img')?.style.visibility === 'hidden'")
        assert page.locator("#preview").inner_text().startswith("TIFF: browsers cannot draw it")
        page.get_by_role("button", name=CROSS.name, exact=True).click()  # a PNG: its box draws it
        page.locator("#preview").wait_for(state="hidden", timeout=30_000)
        page.wait_for_function("document.querySelector('#image img')?.style.visibility === ''")
        assert not errors


@pytest.mark.parametrize("name", ["scan.tif", "cine.gif"])
def test_an_upload_with_a_preview_is_decoded_once_for_the_preview_and_the_explanation(served, tmp_path, monkeypatch,
                                                                                       name):
    """A TIFF's (an animated GIF's) preview and its maps each decoded the file: now once for both, and the page's
    warnings of the file are still given."""
    decoded = []
    loader = vitroll.app.load_image_with_display
    monkeypatch.setattr(vitroll.app, "load_image_with_display",
                        lambda path, **options: decoded.append(Path(path).name) or loader(path, **options))
    picture = Image.open(CROSS).convert("RGB")
    picture.putpixel((0, 0), (7, 7, 7))  # not a file uploaded before: Gradio's copy is named by its content
    upload = tmp_path / name
    if name.endswith(".gif"):
        picture.save(upload, save_all=True, append_images=[picture.transpose(Image.Transpose.FLIP_TOP_BOTTOM)])
    else:
        picture.save(upload)
    with browser_page(served, {"width": 1400, "height": 1000}) as (page, errors):
        page.locator("input[type=file]").first.set_input_files(str(upload))
        wait_for_text(page, "#top-classes", "cross")
        page.locator("#preview img").wait_for(timeout=30_000)
        assert not errors
    assert decoded == [name]


def test_a_strip_the_model_saw_little_of_is_said_so_on_the_page_as_by_overlay(served, tmp_path, capsys):
    """Of a 6000×200 strip the centre crop keeps the middle 200×200 pixels, 1/30 of it: ``vitroll overlay`` said so,
    the page showed a map over a speck of the strip without a word."""
    from gradio_client import Client, handle_file

    upload = tmp_path / "strip.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (200, 6000, 3), np.uint8)).save(upload)
    client = Client(served, verbose=False, download_files=str(tmp_path / "client"))
    _, _, _, note = client.predict(handle_file(upload), "rollout", "mean", 0.0, 0, 3, "all", "predicted",
                                   api_name="/explain")
    seen = "**The model saw only 3 % of the image (the middle of its long side) and its map covers only that**: "
    # a page built from Python: its maker passed build_app a preprocessing, and `vitroll app` flags would not fit
    assert note.splitlines()[-1] == (f"{seen}`build_app(..., preprocessing=Preprocessing.from_model(model, "
                                     "crop_mode='border', crop_pct=1.0))` shows the model all of it, padded.")
    with worded_for_the_command_line():  # as `vitroll app` serves it
        _, _, _, note = client.predict(handle_file(upload), "rollout", "mean", 0.0, 0, 3, "all", "predicted",
                                       api_name="/explain")
    assert note.splitlines()[-1] == (f"{seen}`vitroll app --crop-mode border --crop-pct 1` shows the model all of it, "
                                     "padded.")
    assert main(["overlay", str(upload), "--out", str(tmp_path / "out")]) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if "warning" in line] == [
        f"vitroll: warning: {upload}: the model saw only 3 % of the image (the middle of its long side) and its map "
        "covers only that; --crop-mode border --crop-pct 1 shows the model all of it, padded (--crop-mode squash "
        "--crop-pct 1: stretched)"]


def test_decoded_images_decode_a_file_once_while_kept_and_tell_its_warnings_to_each_caller(tmp_path, monkeypatch):
    """DecodedImages keeps the last DECODED_KEPT decoded by the file and max_pixels: the warnings their decoding gave
    are told again to each caller (a session that asks again is told, one that had them is not: the page's
    warn_once); a file that cannot be read is not kept."""
    calls = []
    loader = vitroll.app.load_image_with_display
    monkeypatch.setattr(vitroll.app, "load_image_with_display",
                        lambda path, **options: calls.append((Path(path).name, options["max_pixels"]))
                        or loader(path, **options))
    names = []
    for k in range(3):
        picture = np.asarray(Image.open(CROSS).convert("RGB")).copy()
        picture[0, 0] = k
        Image.fromarray(picture).save(tmp_path / f"p{k}.png", icc_profile=b"not a profile at all")
        names.append(tmp_path / f"p{k}.png")
    (tmp_path / "bad.png").write_bytes(b"not a png")
    decoded = vitroll.app.DecodedImages()
    first, second = [], []
    one, _ = decoded.load(names[0], max_pixels=None, warn=first.append)
    again, _ = decoded.load(names[0], max_pixels=None, warn=second.append)
    assert again is one and calls == [("p0.png", None)]
    assert len(first) == 1 and "ICC" in first[0] and second == first
    decoded.load(names[0], max_pixels=100_000, warn=lambda message: None)  # another limit: decoded again
    decoded.load(names[1], max_pixels=None, warn=lambda message: None)  # p0 at max_pixels=None is the oldest now
    decoded.load(names[0], max_pixels=None, warn=lambda message: None)
    assert calls == [("p0.png", None), ("p0.png", 100_000), ("p1.png", None), ("p0.png", None)]
    for _ in range(2):
        with pytest.raises(ImageReadError):
            decoded.load(tmp_path / "bad.png", max_pixels=None, warn=lambda message: None)
    assert calls[-2:] == [("bad.png", None)] * 2
