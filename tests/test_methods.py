"""Gradient methods, attention flow and baselines against slow, explicit references."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import timm
import torch

from timm.models.cait import Cait

from vitroll import (METHODS, AttentionRecorder, VitrollError, chefer, center, flow, grad_rollout, random_map,
                     rollout)
from vitroll.errors import OptionValueError
from vitroll.methods import Method, record_attention
from vitroll.methods.flow import flow_values
from reference import (
    reference_attention, reference_attention_gradients, reference_cait_attention_gradients, reference_chefer,
    fuse, reference_flow, reference_grad_rollout, sharpen_attention,
)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(3)
    model = sharpen_attention(timm.create_model("vit_tiny_patch16_224", img_size=(48, 32), depth=3, num_classes=5))
    images = torch.randn(3, 3, 48, 32)
    return model, images


@pytest.fixture(scope="module")
def tiny_cait():
    """Two talking-heads layers and two class-attention layers, layer scale 1 and sharpened query/key weights, so
    every layer moves the logits and no attention is near uniform; same input size and classes as ``tiny``."""
    torch.manual_seed(5)
    model = Cait(img_size=(48, 32), patch_size=16, embed_dim=48, depth=2, num_heads=3, depth_token_only=2,
                 num_classes=5, init_values=1.0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("qkv.weight", "attn.q.weight", "attn.k.weight")):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model.eval(), torch.randn(3, 3, 48, 32)


# the model fixture and its float64 per-image reference for ∂ logit / ∂ attention
GRADIENT_CASES = {"vit": ("tiny", reference_attention_gradients),
                  "cait": ("tiny_cait", reference_cait_attention_gradients)}


@pytest.mark.parametrize("family", GRADIENT_CASES)
@pytest.mark.parametrize("target", [None, 2, [4, 0, 1]])
def test_chefer_matches_per_image_autograd(request, family, target):
    fixture, reference_gradients = GRADIENT_CASES[family]
    model, images = request.getfixturevalue(fixture)
    maps = chefer(model, images, target_class=target)
    predicted = model(images).argmax(-1).tolist()
    targets = predicted if target is None else (target if isinstance(target, list) else [target] * 3)
    for i, t in enumerate(targets):
        attentions, gradients = reference_gradients(model, images[i:i + 1], t)
        expected = reference_chefer(attentions, gradients, 1, (3, 2))
        assert np.abs(expected).max() > 1e-3
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("start_layer", [1, 2])
def test_chefer_start_layer_propagates_only_the_later_layers(tiny, start_layer):
    model, images = tiny
    maps = chefer(model, images[:2], target_class=1, start_layer=start_layer)
    for i in range(2):
        attentions, gradients = reference_attention_gradients(model, images[i:i + 1], 1)
        expected = reference_chefer(attentions[start_layer:], gradients[start_layer:], 1, (3, 2))
        assert np.abs(expected).max() > 1e-3
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("family", GRADIENT_CASES)
@pytest.mark.parametrize("discard_ratio", [0.0, 0.5])
def test_grad_rollout_matches_per_image_autograd(request, family, discard_ratio):
    fixture, reference_gradients = GRADIENT_CASES[family]
    model, images = request.getfixturevalue(fixture)
    maps = grad_rollout(model, images, target_class=1, discard_ratio=discard_ratio)
    for i in range(len(images)):
        attentions, gradients = reference_gradients(model, images[i:i + 1], 1)
        expected = reference_grad_rollout(attentions, gradients, 1, (3, 2), discard_ratio)
        assert np.abs(expected).max() > 1e-3
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)


def test_cait_gradients_are_zero_outside_each_stage(tiny_cait):
    model, images = tiny_cait
    with torch.enable_grad(), AttentionRecorder(model, keep_graph=True) as recorder:
        logits = model(images)
        gradients = recorder.gradients(logits[:, 0].sum())
    assert [tuple(g.shape) for g in gradients] == [(3, 3, 7, 7)] * 4
    for gradient in gradients[:2]:  # talking heads: the class token does not exist yet
        assert gradient[..., 0, :].abs().sum() == 0 and gradient[..., :, 0].abs().sum() == 0
        assert gradient[..., 1:, 1:].abs().sum() > 0
    for gradient in gradients[2:]:  # class attention: only the class token's row
        assert gradient[..., 1:, :].abs().sum() == 0 and gradient[..., 0, :].abs().sum() > 0


def test_attention_gradients_need_keep_graph(tiny):
    model, images = tiny
    with AttentionRecorder(model) as recorder, pytest.raises(RuntimeError, match="need AttentionRecorder"):
        recorder.gradients(model(images).sum())


def test_gradient_methods_are_class_specific(tiny):
    model, images = tiny
    assert not torch.allclose(chefer(model, images, target_class=0), chefer(model, images, target_class=3))


def test_gradient_methods_leave_the_model_as_they_found_it(tiny):
    model, images = tiny
    frozen = next(model.parameters())
    frozen.requires_grad_(False)
    try:
        chefer(model, images)
        with torch.no_grad():
            grad_rollout(model, images)
    finally:
        frozen.requires_grad_(True)
    assert all(p.grad is None for p in model.parameters())
    assert [p.requires_grad for p in model.parameters()][0] is True
    assert not any(getattr(b.attn, "fused_attn", True) is False for b in model.blocks)


@pytest.mark.parametrize("name", [name for name, method in METHODS.items() if method.needs_gradients])
def test_gradient_methods_refuse_inference_mode_clearly(tiny, name):
    """Integrated Gradients and GradientSHAP failed in captum's words ("element 0 of tensors does not require
    grad")."""
    model, images = tiny
    with torch.inference_mode(), pytest.raises(VitrollError) as raised:
        METHODS[name](model, images[:1])
    assert isinstance(raised.value, RuntimeError)  # as the README names it
    assert str(raised.value) == ("gradient methods cannot run inside torch.inference_mode(); use torch.no_grad() or "
                                 "nothing")


@pytest.mark.parametrize("name", [name for name, method in METHODS.items() if method.needs_gradients])
def test_gradient_methods_explain_a_batch_made_under_inference_mode(tiny, name):
    """A batch preprocessed under torch.inference_mode() is an inference tensor: chefer and grad_rollout failed on it
    ("Setting requires_grad=True on inference tensor outside InferenceMode is not allowed")."""
    model, images = tiny
    with torch.inference_mode():
        made_there = images[:1].clone()
    options = {"samples": 2} if name == "gradient_shap" else {"steps": 2} if name == "integrated_gradients" else {}
    torch.testing.assert_close(METHODS[name](model, made_there, **options).maps,
                               METHODS[name](model, images[:1], **options).maps)


def test_every_method_explains_images_that_require_grad_silently_and_leaves_their_grad_alone(tiny):
    """Checking the pixel range read a scalar off a tensor that requires grad: torch warned on every call."""
    model, images = tiny
    for name, method in METHODS.items():
        options = {"steps": 2} if name == "integrated_gradients" else {"samples": 2} if name == "gradient_shap" else {}
        tracked = images[:1].clone().requires_grad_(True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            maps = method(model, tracked, **options).maps
        torch.testing.assert_close(maps, method(model, images[:1], **options).maps, rtol=0, atol=0, msg=name)
        assert tracked.grad is None, name


@pytest.mark.parametrize("target, message", [
    (7, "target_class=7 is out of range for a model with 5 classes (0…4)"),
    ([4, 9, 0], "target_class=9 of input 1 is out of range for a model with 5 classes (0…4)"),
    ([-1, 9, 5], "target_class=-1 of input 0 is out of range for a model with 5 classes (0…4); so are those of 2 "
                 "other inputs"),
    ([-1, 9, 0], "target_class=-1 of input 0 is out of range for a model with 5 classes (0…4); so is that of 1 "
                 "other input"),
    ([0, 1], "target_class has 2 entries for a batch of 3: give one class for all, or one per input"),
    (torch.tensor([0.0, 1.5, 2.0]), "target_class holds 1.5, which is no class index"),
    (torch.tensor([True, False, True]),
     "target_class must hold class indices (integers); got Tensor of dtype torch.bool"),
    (np.array(["cat", "dog", "cat"]), "target_class must hold class indices (integers); got ndarray of dtype <U3"),
], ids=["one", "one-of-each", "several-of-each", "two-of-each", "length", "fraction", "bool-mask", "strings"])
@pytest.mark.parametrize("name", ["chefer", "grad_rollout", "integrated_gradients", "gradient_shap", "occlusion"])
def test_bad_target_class_is_one_clear_error(tiny, name, target, message):
    """A class given once is named once, not once per input of the batch; a class index that is no whole number is
    refused rather than rounded down to another class."""
    model, images = tiny
    with pytest.raises(OptionValueError) as error:
        METHODS[name](model, images, target_class=target)
    assert str(error.value) == message


@pytest.mark.parametrize("name", ["chefer", "grad_rollout", "integrated_gradients", "gradient_shap", "occlusion"])
def test_target_class_of_whole_numbers_in_any_form_explains_the_same_classes(tiny, name):
    model, images = tiny
    options = {"steps": 2} if name == "integrated_gradients" else {"samples": 2} if name == "gradient_shap" else {}
    expected = METHODS[name](model, images, target_class=[4, 0, 2], **options).maps
    for same in ((4, 0, 2), torch.tensor([4, 0, 2]), torch.tensor([4.0, 0.0, 2.0]), [np.int64(4), 0, 2],
                 np.array([4, 0, 2])):
        torch.testing.assert_close(METHODS[name](model, images, target_class=same, **options).maps, expected,
                                   rtol=0, atol=0)


def test_flow_matches_networkx_on_an_explicit_graph(tiny):
    model, images = tiny
    maps = flow(model, images[:2])
    for i in range(2):
        per_layer = [a.mean(axis=0) for a in reference_attention(model, images[i:i + 1])]
        expected = reference_flow(per_layer, 1, (3, 2))
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=2e-6)


@pytest.mark.parametrize("head_fusion, attention_weight", [("max", 0.3), ("min", 1.0)])
def test_flow_fuses_heads_and_weighs_the_residual_as_asked(tiny, head_fusion, attention_weight):
    """The networkx reference with the heads fused and ``α`` as given, not the defaults (mean, 0.5)."""
    model, images = tiny
    maps = flow(model, images[:2], head_fusion=head_fusion, attention_weight=attention_weight)
    for i in range(2):
        per_layer = [fuse(a, head_fusion) for a in reference_attention(model, images[i:i + 1])]
        expected = reference_flow(per_layer, 1, (3, 2), attention_weight=attention_weight)
        assert np.abs(expected - reference_flow(per_layer, 1, (3, 2))).max() > 1e-3  # α tells the maps apart
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=2e-6)


@pytest.mark.parametrize("attention_weight", [0.3, 0.8])
def test_grad_rollout_weighs_the_residual_as_asked(tiny, attention_weight):
    model, images = tiny
    maps = grad_rollout(model, images, target_class=1, discard_ratio=0.5, attention_weight=attention_weight)
    for i in range(len(images)):
        attentions, gradients = reference_attention_gradients(model, images[i:i + 1], 1)
        expected = reference_grad_rollout(attentions, gradients, 1, (3, 2), 0.5, attention_weight=attention_weight)
        assert np.abs(expected - reference_grad_rollout(attentions, gradients, 1, (3, 2), 0.5)).max() > 1e-3
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("discard_ratio", [0.5, 0.9])
def test_grad_rollout_with_attention_weight_1_passes_nothing_on_from_a_row_of_zeros(tiny, discard_ratio, monkeypatch,
                                                                                    capsys):
    """With α = 1 a row of (mean_h ∇A ⊙ A)⁺ that the clamp and the discard left all 0 was normalised as 0/0: the NaN
    reached every patch, and the warning blamed the model's weights. The row stays 0 (implementation and reference);
    where that leaves the map all 0 (discard 0.9 keeps only the class token's column of 7), the constant-map warning
    says so."""
    model, images = tiny
    maps = grad_rollout(model, images, target_class=1, discard_ratio=discard_ratio, attention_weight=1.0)
    for i in range(len(images)):
        attentions, gradients = reference_attention_gradients(model, images[i:i + 1], 1)
        expected = reference_grad_rollout(attentions, gradients, 1, (3, 2), discard_ratio, attention_weight=1.0)
        assert np.isfinite(expected).all() and (np.abs(expected).max() > 1e-3) == (discard_ratio == 0.5)
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)
    told = capsys.readouterr().err
    assert "not finite" not in told
    assert ("grad_rollout's map is constant (all 0) for 3 of the 3 inputs" in told) == (discard_ratio == 0.9)


@pytest.mark.parametrize("solver", ["scipy", "networkx"])
def test_flow_of_an_image_with_a_nan_is_nan_like_rollouts_and_leaves_the_others_alone(tiny, solver):
    """Both solvers skip an edge whose capacity is NaN, so an image whose attention held a NaN (a NaN pixel, a half-
    precision overflow) got a map of zeros: a finite map that says "no flow" where rollout says NaN."""
    model, images = tiny
    spoilt = images.clone()
    spoilt[1, 0, 5, 5] = float("nan")
    maps = flow(model, spoilt, solver=solver)
    assert torch.isnan(maps[1]).all() and torch.isnan(rollout(model, spoilt)[1]).all()
    torch.testing.assert_close(maps[[0, 2]], flow(model, images[[0, 2]], solver=solver), rtol=0, atol=1e-6)


@pytest.mark.parametrize("attention_weight", [0.0, 1.5, float("nan")])
def test_flow_refuses_an_attention_weight_that_rollout_refuses(tiny, attention_weight):
    """Unchecked, 0 gave a map of zeros, 1.5 negative capacities on the diagonal and NaN a NaN map."""
    model, images = tiny
    with pytest.raises(OptionValueError, match=rf"^attention_weight must be in \(0, 1\]; got {attention_weight}$"):
        flow(model, images[:1], attention_weight=attention_weight)


def test_flow_scipy_and_networkx_solvers_agree(tiny):
    model, images = tiny
    attentions, layout, _ = record_attention(model, images[:1])
    fast = flow_values(attentions, layout, solver="scipy")
    exact = flow_values(attentions, layout, solver="networkx")
    torch.testing.assert_close(fast, exact, atol=2e-6, rtol=0)


def test_flow_refuses_large_inputs_with_the_reason():
    model = timm.create_model("vit_tiny_patch16_224", img_size=288, depth=1).eval()
    with pytest.raises(OptionValueError, match="^attention flow on 325 tokens is impractical"):
        flow(model, torch.randn(1, 3, 288, 288))


def test_baselines_are_reproducible_and_shaped(tiny):
    model, images = tiny
    torch.testing.assert_close(random_map(model, images, seed=5), random_map(model, images, seed=5))
    assert not torch.equal(random_map(model, images, seed=5), random_map(model, images, seed=6))
    gaussian = center(model, images)
    assert gaussian.shape == (3, 3, 2)
    assert torch.equal(gaussian[0], gaussian[2])
    assert gaussian[0, 1].min() > gaussian[0, 0].max()  # the middle row beats the corners


def test_every_registered_method_returns_grid_maps_and_logits(tiny):
    model, images = tiny
    for name, method in METHODS.items():
        saliency = method(model, images[:2])
        assert saliency.maps.shape == (2, 3, 2), name
        assert torch.isfinite(saliency.maps).all(), name
        assert saliency.logits.shape == (2, 5), name


def test_random_baseline_gives_each_input_its_own_map_whatever_its_batch(tiny):
    """The map of an input depends on the input and the seed, not on where it sits in its batch: with the position
    as the stream, ``evaluate --batch-size 1`` gave every image the same map and the baseline's scores changed with
    the batch size."""
    model, images = tiny
    together = random_map(model, images, seed=5)
    alone = torch.cat([random_map(model, images[i:i + 1], seed=5) for i in range(3)])
    torch.testing.assert_close(alone, together, rtol=0, atol=0)
    torch.testing.assert_close(random_map(model, images[[2, 0, 1]], seed=5), together[[2, 0, 1]], rtol=0, atol=0)
    assert not torch.equal(alone[0], alone[1])


PREFIX_LAYOUTS = {  # timm ViTs whose decision row is not the class token's alone, or has more prefix tokens
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}),
    "registers": ("vit_tiny_patch16_224", {"reg_tokens": 2}),
    "average_pool": ("vit_tiny_patch16_224", {"class_token": False, "global_pool": "avg"}),
}


def decision_row(layout) -> np.ndarray | None:
    """The row (N,) that the head reads from the final tokens: None for the class token's own; DeiT's class and
    distillation tokens half each; an average pool each patch token 1 / (h·w)."""
    prefix, patches = layout.num_prefix_tokens, layout.num_tokens - layout.num_prefix_tokens
    if layout.readout == "class_token":
        return None
    if layout.readout == "prefix_mean":
        return np.r_[np.full(prefix, 1 / prefix), np.zeros(patches)]
    return np.r_[np.zeros(prefix), np.full(patches, 1 / patches)]


@pytest.mark.parametrize("kind", PREFIX_LAYOUTS)
def test_gradient_methods_match_per_image_autograd_on_every_prefix_layout(kind):
    """Each image of a batch, explained for its own class, equals its float64 reference read at the model's decision
    row: the distillation token, register tokens and an average pool each move that row."""
    torch.manual_seed(3)
    architecture, kwargs = PREFIX_LAYOUTS[kind]
    model = sharpen_attention(timm.create_model(architecture, img_size=(48, 32), depth=2, embed_dim=48, num_heads=3,
                                                num_classes=5, **kwargs))
    images, targets = torch.randn(3, 3, 48, 32), [4, 0, 2]
    relevance = chefer(model, images, target_class=targets)
    rolled = grad_rollout(model, images, target_class=targets, discard_ratio=0.5)
    _, layout, _ = record_attention(model, images[:1])
    prefix, readout = layout.num_prefix_tokens, decision_row(layout)
    for i, target in enumerate(targets):
        attentions, gradients = reference_attention_gradients(model, images[i:i + 1], target)
        for maps, expected in ((relevance, reference_chefer(attentions, gradients, prefix, (3, 2), readout)),
                               (rolled, reference_grad_rollout(attentions, gradients, prefix, (3, 2), 0.5, readout))):
            assert np.ptp(expected) > 1e-4, "the reference map must not be flat"
            np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", PREFIX_LAYOUTS)
def test_flow_matches_networkx_on_every_prefix_layout(kind):
    """The sink takes each final token's share of the decision row: DeiT's two prefix tokens, an average pool's
    patches; register tokens carry flow but are no sources."""
    torch.manual_seed(4)
    architecture, kwargs = PREFIX_LAYOUTS[kind]
    model = sharpen_attention(timm.create_model(architecture, img_size=(32, 32), depth=2, embed_dim=48, num_heads=3,
                                                num_classes=5, **kwargs))
    images = torch.randn(2, 3, 32, 32)
    maps = flow(model, images)
    _, layout, _ = record_attention(model, images[:1])
    for i in range(2):
        per_layer = [a.mean(axis=0) for a in reference_attention(model, images[i:i + 1])]
        expected = reference_flow(per_layer, layout.num_prefix_tokens, (2, 2), decision_row(layout))
        assert np.ptp(expected) > 1e-4, "the reference map must not be flat"
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=2e-6)


@pytest.mark.parametrize("targets", [[4, 0, 2], torch.tensor([4, 0, 2]), np.array([4, 0, 2])],
                         ids=["list", "tensor", "array"])
def test_a_batch_split_for_memory_splits_its_classes_with_it(tiny, targets, capsys):
    """A per-image target_class goes with its images into each half of a batch that ran out of memory."""
    model, images = tiny

    def runs_out_above_one(model, batch, **options):
        if len(batch) > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return METHODS["chefer"](model, batch, **options)

    split = Method("runs_out_above_one", runs_out_above_one)(model, images, target_class=targets)
    torch.testing.assert_close(split.maps, chefer(model, images, target_class=[4, 0, 2]), rtol=0, atol=1e-6)
    assert "a batch of 3 ran out of memory; retrying as 2 + 1" in capsys.readouterr().err


@pytest.mark.parametrize("targets, message", [
    ([4, 0, 9], "target_class=9 of input 2 is out of range for a model with 5 classes (0…4)"),
    (np.array([9, 0, -1]), "target_class=9 of input 0 is out of range for a model with 5 classes (0…4); so is that "
                           "of 1 other input"),
], ids=["in-the-second-half", "in-both-halves"])
def test_a_class_out_of_range_in_a_split_batch_is_named_by_its_input_in_the_whole_batch(tiny, targets, message):
    """It was named by its index in the half that raised it ("target_class 9 is out of range", as if given once),
    and counted the others of that half only."""
    model, images = tiny

    def runs_out_above_one(model, batch, **options):
        if len(batch) > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return METHODS["chefer"](model, batch, **options)

    with pytest.raises(OptionValueError) as raised:
        Method("runs_out_above_one", runs_out_above_one)(model, images, target_class=targets)
    assert str(raised.value) == message


def test_the_center_baseline_of_a_padded_grid_is_centred_on_the_image():
    """36 pixels in patches of 8, padded to 40 (timm's dynamic_img_pad): the cells' centres lie at pixels 4, 12, 20,
    28 and 36, the image's at 18; centred on the grid (at 20) the map was symmetric about cell 2."""
    model = timm.create_model("vit_tiny_patch16_224", img_size=36, patch_size=8, depth=1, embed_dim=32, num_heads=2,
                              num_classes=3, dynamic_img_size=True, dynamic_img_pad=True).eval()
    gaussian = center(model, torch.randn(1, 3, 36, 36), sigma=0.25)[0]
    offsets = (torch.tensor([4.0, 12.0, 20.0, 28.0, 36.0]) - 18.0) / 36.0
    expected = torch.exp(-(offsets[:, None] ** 2 + offsets[None, :] ** 2) / (2 * 0.25**2))
    torch.testing.assert_close(gaussian, expected)
