"""Occlusion against float64 references that hide each window by hand, per image and per text alone; the windows;
its refusals; and, on the two-shape image–text testbed, a map that follows the prompt."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from PIL import Image

import vitroll
from test_text import IDS, IDS_REAL, MASK, bert, gpt2
from test_text_attributions import TARGET, score64
from vitroll.errors import InputValueError
from vitroll.maps import to_original
from vitroll.methods.attributions import sliding_windows
from vitroll.metrics import peak_preference
from vitroll.pipelines.evaluate_pairs import pair_images
from vitroll.preprocess import Preprocessing
from vitroll.testbed.model import load_testbed_model

from reference import reference_image_occlusion

PATCH, GRID = 8, (8, 8)
"""The shapes testbed model's patch size in pixels and its grid on 64 px images."""


@pytest.fixture(scope="module")
def model():
    return load_testbed_model()


@pytest.mark.parametrize("window", [1, 2, 3])
def test_image_occlusion_equals_a_float64_reference_per_image_and_target(model, window):
    torch.manual_seed(0)
    images = torch.randn(2, 3, 64, 64)
    targets = [3, 0]
    maps = vitroll.occlusion(model, images, target_class=targets, window=window, sign="signed", batch_size=5)
    assert maps.shape == (2, *GRID) and maps.dtype == torch.float32
    for b, target in enumerate(targets):
        expected = reference_image_occlusion(model, images[b], target, window, PATCH)
        np.testing.assert_allclose(maps[b].numpy(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    torch.testing.assert_close(vitroll.occlusion(model, images, target_class=targets, window=window),
                               maps.clamp(min=0))
    torch.testing.assert_close(vitroll.occlusion(model, images, target_class=targets, window=window,
                                                 sign="absolute"), maps.abs())


def test_occlusion_explains_the_predicted_class_by_default_and_needs_no_gradients(model):
    images = torch.randn(2, 3, 64, 64)
    predicted = model(images).argmax(-1).tolist()
    saliency = vitroll.METHODS["occlusion"](model, images)
    torch.testing.assert_close(saliency.maps, vitroll.occlusion(model, images, target_class=predicted))
    assert not vitroll.METHODS["occlusion"].needs_gradients and all(p.grad is None for p in model.parameters())


def test_sliding_windows_by_hand():
    windows = sliding_windows((3, 4), 2)
    assert windows.shape == (6, 3, 4) and windows.sum(dim=(1, 2)).tolist() == [4] * 6
    assert windows[0].nonzero().tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert windows[-1].nonzero().tolist() == [[1, 2], [1, 3], [2, 2], [2, 3]]
    assert windows.sum(dim=0).tolist() == [[1, 2, 2, 1], [2, 4, 4, 2], [1, 2, 2, 1]]
    assert sliding_windows((5,), 3).int().tolist() == [[1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]


def reference_text_occlusion(model: torch.nn.Module, text: list[int], window: int) -> np.ndarray:
    """ONE unpadded text in float64 through ``inputs_embeds``: each ``window`` consecutive tokens' embeddings set to
    the padding token's (zeros without one), the explained score's drop averaged over the windows covering a
    token. (n,), signed."""
    reference = copy.deepcopy(model).double()
    table = reference.get_input_embeddings().weight.detach()
    words = table[torch.tensor(text)]
    pad = reference.config.pad_token_id
    baseline = table[pad] if pad is not None else torch.zeros(words.shape[-1], dtype=torch.float64)
    total, count = np.zeros(len(text)), np.zeros(len(text))
    with torch.no_grad():
        full = score64(reference, words)
        for start in range(len(text) - window + 1):
            hidden = words.clone()
            hidden[start:start + window] = baseline
            total[start:start + window] += float(full - score64(reference, hidden))
            count[start:start + window] += 1
    return total / count


@pytest.mark.parametrize("window", [1, 2])
@pytest.mark.parametrize("build", [bert, gpt2])
def test_text_occlusion_equals_a_float64_reference_per_text_alone(build, window):
    """Windows run over each text's real tokens only, so the padded batch gives each text's own scores."""
    model = build()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    scores = vitroll.occlusion(model, ids, attention_mask=mask, target_class=TARGET, window=window, sign="signed")
    assert scores.shape == ids.shape and (scores[~mask.bool()] == 0).all()
    for b, text in enumerate(IDS_REAL):
        np.testing.assert_allclose(scores[b][mask[b].bool()].numpy(), reference_text_occlusion(model, text, window),
                                   atol=1e-5)


def test_windows_that_do_not_fit_are_refused(model):
    images = torch.randn(1, 3, 64, 64)
    with pytest.raises(ValueError, match=r"window must be between 1 and 8 \(the grid is 8 × 8\); got 9"):
        vitroll.occlusion(model, images, window=9)
    with pytest.raises(ValueError, match="got 0"):
        vitroll.occlusion(model, images, window=0)
    with pytest.raises(ValueError, match="batch_size must be at least 1; got 0"):
        vitroll.occlusion(model, images, batch_size=0)
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    with pytest.raises(InputValueError, match=r"window 5 is longer than text 1 of the batch \(4 tokens\)"):
        vitroll.occlusion(bert(), ids, attention_mask=mask, window=5)
    with pytest.raises(ValueError, match=r"^window must be between 1 and 7 \(the texts have 7 positions\); got 0$"):
        vitroll.occlusion(bert(), ids, attention_mask=mask, window=0)


def test_the_cli_refuses_a_bad_window_in_one_line(tmp_path, capsys):
    from vitroll.cli import main

    image = str(vitroll.__path__[0] + "/../sample_images/shapes_cross.png")
    assert main(["overlay", image, "--method", "occlusion", "--option", "window=20", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "vitroll: error: --option window must be between 1 and 8 (the grid is 8 × 8); got 20\n")


def test_occlusion_follows_the_prompt_on_the_two_shape_testbed():
    """Hiding 3 × 3 patches: each prompt's map peaks higher on the shape it names than on the other for most
    images, where text-blind rollout scores one half by construction."""
    model = vitroll.load_model("vitroll-clip-shapes")
    images = pair_images(24)
    tensor, geometries = Preprocessing.from_model(model).batch([Image.fromarray(item.image) for item in images])
    preferences = []
    for i, (item, geometry) in enumerate(zip(images, geometries)):
        maps = vitroll.image_text_maps(model, tensor[i:i + 1], [item.prompt, item.other_prompt], method="occlusion",
                                       window=3)[0].numpy()
        preferences += [peak_preference(to_original(maps[t], geometry), item.masks[own], item.masks[1 - own])[0]
                        for t, own in enumerate((item.named, 1 - item.named))]
    assert np.mean(preferences) >= 0.75
