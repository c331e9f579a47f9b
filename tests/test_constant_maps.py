"""A (near-)constant map is drawn from its minimum to its maximum like any other, its rounding noise or a spread of a
few thousandths filling the whole colormap: every method but the baselines warns of it, in one line a call (a
command: one a run, counting every batch), naming arguments as the caller sets them (Python's words from Python)."""

from __future__ import annotations

import pytest
import timm
import torch

from vitroll import attention, center, chefer, flow, grad_rollout, occlusion, random_map, rollout
from vitroll.methods.map_checks import constancy, near_constant, shown_values, warn_constant_maps
from vitroll.testbed import load_testbed_model
from vitroll.wording import worded_for_the_command_line

UNTRAINED = ("drawn from its minimum to its maximum, a spread this small fills the whole colormap and shows nothing "
             "the model tells apart; a model with untrained (random) weights gives such maps")
PHOTOS = ["sample_images/cat.jpg", "sample_images/shapes_disk.png"]


@pytest.fixture(scope="module")
def untrained_eva02():
    """eva02_tiny as timm initialises it: attention all but uniform, gradients tiny."""
    torch.manual_seed(0)
    return timm.create_model("eva02_tiny_patch14_224", pretrained=False).eval()


@pytest.fixture(scope="module")
def uniform_attention():
    """The shapes testbed (65 tokens) with its queries and keys zeroed: every attention row is exactly 1/65."""
    model = load_testbed_model()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[: 2 * model.embed_dim] = 0
            block.attn.qkv.bias[: 2 * model.embed_dim] = 0
    return model


def relative_spread(maps: torch.Tensor) -> list[float]:
    flat = maps.flatten(1).double()
    return ((flat.amax(1) - flat.amin(1)) / flat.abs().amax(1)).tolist()


def test_near_constant_is_within_one_percent_of_the_largest_magnitude():
    assert near_constant(torch.tensor([1.0, 1.0099])) and not near_constant(torch.tensor([1.0, 1.0102]))
    assert near_constant(torch.zeros(4)) and near_constant(torch.tensor([-2.0, -2.01]))
    assert not near_constant(torch.tensor([-1e-9, 1e-9])) and not near_constant(torch.tensor([1.0, float("nan")]))


def test_chefer_on_an_untrained_eva02_warns_that_its_map_is_near_constant(untrained_eva02, capsys):
    maps = chefer(untrained_eva02, PHOTOS)
    assert all(spread < 0.01 for spread in relative_spread(maps)), relative_spread(maps)
    mean = float(maps[0].double().mean())
    spread = relative_spread(maps[:1])[0]
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: chefer's map is near-constant ({mean:.4g}, all within {spread * 100:.2g}% of it) for 2 of "
        f"the 2 inputs of the batch (0, 1): {UNTRAINED}"]
    chefer(untrained_eva02, PHOTOS[1:])
    assert capsys.readouterr().err.splitlines() == [  # a call tells its own batch
        f"vitroll: warning: chefer's map is near-constant ({float(maps[1].double().mean()):.4g}, all within "
        f"{relative_spread(maps[1:])[0] * 100:.2g}% of it) for input 0 of the batch: {UNTRAINED}"]


def test_grad_rollout_on_an_untrained_eva02_names_its_cause_in_the_callers_words(untrained_eva02, capsys):
    grad_rollout(untrained_eva02, PHOTOS[:1])
    err = capsys.readouterr().err
    assert err.startswith("vitroll: warning: grad_rollout's map is near-constant (") and err.endswith(
        "for input 0 of the batch: the attention it rolls out does not tell one patch from another; a lower "
        "discard_ratio than 0.9 keeps more of it\n")
    with worded_for_the_command_line():
        grad_rollout(untrained_eva02, PHOTOS[:1], discard_ratio=0.8)
    assert "a lower --discard-ratio than 0.8 keeps more of it" in capsys.readouterr().err


def test_attention_and_flow_of_uniform_attention_warn_that_the_map_is_constant(uniform_attention, capsys):
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(attention(uniform_attention, images), torch.full((2, 8, 8), 1 / 65), atol=1e-7, rtol=0)
    flow(uniform_attention, images)
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in err] == ["vitroll: warning: attention's map is constant",
                                                     "vitroll: warning: flow's map is constant"]
    assert err[0].startswith("vitroll: warning: attention's map is constant (all 0.01538) for 2 of the 2 inputs of "
                             "the batch (0, 1)")
    assert all(line.endswith(UNTRAINED) for line in err)


def test_occlusion_of_a_model_blind_to_its_input_warns_that_its_map_is_all_0(capsys):
    model = load_testbed_model()
    with torch.no_grad():
        model.head.weight.zero_()  # the logits are the head's bias whatever the image
    maps = occlusion(model, torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(maps, torch.zeros(1, 8, 8))
    assert capsys.readouterr().err == (f"vitroll: warning: occlusion's map is constant (all 0) for input 0 of the "
                                       f"batch: {UNTRAINED}\n")


def test_occlusion_whose_window_covers_the_whole_image_blames_the_window_not_the_model(capsys):
    """A window as large as the patch grid fits once: every patch is hidden with all others, so the map is one
    value whatever the model; the warning blamed untrained weights (a trained model here)."""
    maps = occlusion(load_testbed_model(), ["sample_images/shapes_disk.png"], window=8)
    assert maps.shape == (1, 8, 8) and torch.equal(maps, maps.flatten()[0].expand(1, 8, 8)) and float(maps[0, 0, 0]) > 0
    assert capsys.readouterr().err == (
        f"vitroll: warning: occlusion's map is constant (all {float(maps[0, 0, 0]):.4g}) for input 0 of the batch: "
        "window 8 covers the whole image, hiding every patch at once, so each gets the same score; a smaller window "
        "tells them apart\n")


def test_a_texts_scores_are_checked_at_its_real_tokens_not_its_padding(capsys):
    """A padded text's 0s counted as values its picture shows: 0.5 at every real token looked spread over 100 %."""
    scores = torch.tensor([[0.5, 0.5, 0.5, 0.0, 0.0], [0.1, 0.9, 0.4, 0.3, 0.2]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    shown = shown_values(scores, mask)
    assert [row.tolist() for row in shown] == [[0.5, 0.5, 0.5], [0.1, 0.9, 0.4, 0.3, 0.2]]
    warn_constant_maps("attention", shown, "a cause", key="padded")
    assert capsys.readouterr().err == ("vitroll: warning: attention's map is constant (all 0.5) for 1 of the 2 inputs "
                                       "of the batch (0): a cause\n")


def test_per_head_text_scores_are_read_at_each_heads_real_tokens():
    """``head_fusion=None`` gives a text's scores per head (B, H, L): the (B, L) mask indexed the flattened H·L
    values and raised an IndexError from every per-head call on padded texts."""
    scores = torch.tensor([[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]], [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert [row.tolist() for row in shown_values(scores, mask)] == [
        [0.5, 0.5, 0.5, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]
    assert near_constant(shown_values(scores, mask)[0]) and not near_constant(shown_values(scores, mask)[1])


def test_trained_maps_and_the_baselines_say_nothing(capsys):
    model = load_testbed_model()
    shapes = [f"sample_images/shapes_{name}.png" for name in ("disk", "square", "triangle", "cross")]
    for verb in (rollout, attention, chefer, grad_rollout, occlusion):
        verb(model, shapes)
    center(model, shapes, sigma=1e6)  # a Gaussian so wide it is flat: a baseline, not an explanation
    random_map(model, shapes)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("method", ["integrated_gradients", "gradient_shap"])
def test_captums_attributions_of_a_model_blind_to_its_input_warn_that_the_map_is_all_0(method, capsys):
    pytest.importorskip("captum")
    from vitroll.methods import METHODS

    model = load_testbed_model()
    with torch.no_grad():
        model.head.weight.zero_()
    maps = METHODS[method](model, torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))).maps
    assert torch.equal(maps, torch.zeros(1, 8, 8))
    assert capsys.readouterr().err == (f"vitroll: warning: {method}'s map is constant (all 0) for input 0 of the "
                                       f"batch: {UNTRAINED}\n")


def test_texts_of_several_padded_lengths_are_told_once_a_run(capsys):
    """The key held a text's padded length: a run of texts in batches of 5, 7 and 9 tokens was told thrice. Inside
    told_at_the_end (as a command runs) one line counts the three batches' nine inputs; a call alone tells its own."""
    from vitroll.wording import told_at_the_end

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        attn_implementation="eager")).eval()
    with torch.no_grad():
        for layer in model.bert.encoder.layer:
            for projection in (layer.attention.self.query, layer.attention.self.key):
                projection.weight.zero_()
                projection.bias.zero_()
    with told_at_the_end():
        for length in (5, 7, 9):
            ids = torch.tensor([[2, *range(5, 5 + length - 2), 3]] * 3)
            torch.testing.assert_close(attention(model, ids), torch.full((3, length), 1 / length), atol=1e-6, rtol=0)
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: attention's map is constant (all {1 / 5:.4g} for the first) for 9 inputs of the run, in 3 "
        f"of its batches: {UNTRAINED}"]
    attention(model, ids)
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: attention's map is constant (all {1 / 9:.4g}) for 3 of the 3 inputs of the batch (0, 1, "
        f"2): {UNTRAINED}"]


def test_a_tiny_spread_is_told_with_its_significant_digits():
    assert constancy(torch.tensor([2.0, 2.0 + 6e-7 * 2])) == ("near-constant", "2, all within 6e-05% of it")
    assert constancy(torch.tensor([1.0, 1.0012, 1.0])) == ("near-constant", "1, all within 0.12% of it")
