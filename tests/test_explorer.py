"""The interactive explorer: its pure functions against direct method calls and float64 references, the Gradio page
through ``gradio_client`` against a server on 127.0.0.1, once in a real browser, and ``vitroll app``'s refusals."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitroll
from browser import browser_page
from reference import reference_attention, reference_attention_gradients, reference_chefer
from vitroll.cli import main
from vitroll.io import load_image
from vitroll.models import class_names
from vitroll.pipelines.explain import ExplainSettings, render, top_classes
from vitroll.pipelines.explorer import (
    ExplorerControls, explore, head_grid, ignored_controls, method_options, model_outline,
)
from vitroll.preprocess import Preprocessing
from vitroll.testbed.model import load_testbed_model

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
    with pytest.raises(ValueError, match=r"^head 4 is out of range for a layer with 4 heads \(0…3\)$"):
        explore(model, image, ExplorerControls(method="attention", head=4))
    with pytest.raises(ValueError, match=r"^layer 4 is out of range for a model with 4 layers \(-4…3\)$"):
        explore(model, image, ExplorerControls(layer=4))
    with pytest.raises(ValueError, match=r"^start_layer 4 is out of range for a model with 4 layers \(0…3\)$"):
        explore(model, image, ExplorerControls(start_layer=4))
    with pytest.raises(ValueError, match=r"target_class \[7\] out of range for a model with 4 classes"):
        explore(model, image, ExplorerControls(method="chefer", target_class=7))
    with pytest.raises(ValueError, match=r"^image must be RGB uint8 of shape \(H, W, 3\); got float64 \(4, 4\)$"):
        explore(model, np.zeros((4, 4)), ExplorerControls())


def test_the_model_outline_gives_the_ranges_of_the_controls(model):
    outline = model_outline(model, class_names=class_names(model))
    assert (outline.layers, outline.heads, outline.class_names) == (4, 4, ["square", "disk", "triangle", "cross"])
    assert model_outline(model).class_names == ["class 0", "class 1", "class 2", "class 3"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def served(model):
    """The explorer page for the testbed model, served on 127.0.0.1 at a free port while the module's tests run."""
    pytest.importorskip("gradio")
    from vitroll.app import build_app, example_images, serve

    examples = example_images(ROOT / "sample_images")
    app = build_app(model, model_label="vitroll-shapes", class_names=class_names(model), examples=examples)
    url = serve(app, host="127.0.0.1", port=free_port(), examples=examples, block=False)
    yield url
    app.close()


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
    assert rollout_note.startswith("**rollout** does not use: layer, target class, head.")


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
            page.wait_for_function(f"document.querySelector('#note').innerText.includes({note!r})")
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
        page.screenshot(path=str(screenshot), full_page=True)
        assert not errors


def test_the_command_refuses_to_serve_beyond_localhost_without_the_flag(capsys):
    assert main(["app", "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err == (
        "vitroll: error: app: --host 0.0.0.0 would serve the explorer to other machines, without a password; pass "
        "--share-on-network to allow it, or leave --host at 127.0.0.1 (this machine only)\n")


def test_the_command_serves_the_shipped_model_and_warns_once_when_shared(monkeypatch, capsys):
    pytest.importorskip("gradio")
    import vitroll.commands.app as command

    served_at = []
    monkeypatch.setattr(command, "serve", lambda app, *, host, port, examples: served_at.append((host, port, examples)))
    assert main(["app", "--host", "0.0.0.0", "--port", "8123", "--share-on-network"]) == 0
    assert capsys.readouterr().err == ("vitroll: warning: --share-on-network: the explorer on 0.0.0.0 can be used by "
                                       "anyone who can reach this machine (no password)\n")
    assert served_at[0][:2] == ("0.0.0.0", 8123) and CROSS in served_at[0][2] and not any(
        path.stem.endswith("_mask") for path in served_at[0][2])


def test_an_examples_folder_that_is_not_one_is_refused(tmp_path, capsys):
    assert main(["app", "--examples", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"vitroll: error: app: --examples {tmp_path / 'nope'} is not a folder\n"


def test_without_gradio_the_command_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` now raises ImportError
    assert main(["app"]) == 2
    assert capsys.readouterr().err == 'vitroll: error: the explorer needs gradio: pip install "vitroll[app]"\n'
