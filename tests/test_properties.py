"""Property-based tests (hypothesis) of the rollout engine: on a tiny dynamic-size ViT, and on attention matrices
drawn directly."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vitroll import METHODS, TokenLayout, attention, rollout
from vitroll.capture.fusion import fuse_heads
from vitroll.methods.gradients import positive_weighted_heads
from vitroll.methods.base import record_attention
from vitroll.methods.rollout import rollout_matrix, rollout_vector, with_residual

from reference import reference_rollout

PATCH = 8
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", patch_size=PATCH, img_size=32, depth=3, dynamic_img_size=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("qkv.weight"):
                p.normal_(0, 0.1)
    return model.eval()


def batch(seed: int, size: int, height: int, width: int) -> torch.Tensor:
    return torch.randn(size, 3, height, width, generator=torch.Generator().manual_seed(seed))


options = st.fixed_dictionaries({
    "head_fusion": st.sampled_from(["mean", "max", "min"]),
    "discard_ratio": st.floats(0.0, 0.99),
    "attention_weight": st.floats(0.01, 1.0),
})
sizes = st.tuples(st.integers(2, 6), st.integers(2, 6)).map(lambda hw: (hw[0] * PATCH, hw[1] * PATCH))


@SETTINGS
@given(seed=st.integers(0, 2**16), batch_size=st.integers(1, 5), size=sizes, opts=options)
def test_maps_are_finite_nonnegative_and_on_the_grid(model, seed, batch_size, size, opts):
    maps = rollout(model, batch(seed, batch_size, *size), **opts)
    assert maps.shape == (batch_size, size[0] // PATCH, size[1] // PATCH)
    assert torch.isfinite(maps).all() and (maps >= 0).all()
    assert (maps.sum(dim=(1, 2)) <= 1 + 1e-5).all(), "patch mass is a part of a probability vector"


@SETTINGS
@given(seed=st.integers(0, 2**16), batch_size=st.integers(2, 5), size=sizes, opts=options, data=st.data())
def test_maps_do_not_depend_on_batch_composition_or_order(model, seed, batch_size, size, opts, data):
    images = batch(seed, batch_size, *size)
    order = data.draw(st.permutations(range(batch_size)))
    subset = data.draw(st.lists(st.integers(0, batch_size - 1), min_size=1, max_size=batch_size, unique=True))
    full = rollout(model, images, **opts)
    torch.testing.assert_close(rollout(model, images[list(order)], **opts), full[list(order)], atol=1e-5, rtol=0)
    torch.testing.assert_close(rollout(model, images[subset], **opts), full[subset], atol=1e-5, rtol=0)


@SETTINGS
@given(seed=st.integers(0, 2**16), size=sizes, opts=options)
def test_maps_are_deterministic(model, seed, size, opts):
    images = batch(seed, 2, *size)
    assert torch.equal(rollout(model, images, **opts), rollout(model, images, **opts))
    fusion = opts["head_fusion"]
    assert torch.equal(attention(model, images, head_fusion=fusion), attention(model, images, head_fusion=fusion))


EXPLAINED = ["chefer", "grad_rollout", "integrated_gradients", "occlusion", "flow", "attention"]
"""Every method whose map could mix the images of a batch: one backward pass for the batch, batched hidden copies,
batched flow graphs (the random baseline and gradient_shap have their own tests)."""


@pytest.fixture(scope="module")
def classifier():
    """Two layers, ten classes: the gradient and occlusion methods run many passes per example."""
    torch.manual_seed(1)
    model = timm.create_model("vit_tiny_patch16_224", patch_size=PATCH, img_size=32, depth=2, embed_dim=48,
                              num_heads=3, num_classes=10, dynamic_img_size=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("qkv.weight"):
                p.normal_(0, 0.1)
    return model.eval()


SIGNS = ["absolute", "positive", "signed"]
small_sizes = st.tuples(st.integers(1, 4), st.integers(1, 4)).map(lambda hw: (hw[0] * PATCH, hw[1] * PATCH))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), batch_size=st.integers(2, 4), size=small_sizes, name=st.sampled_from(EXPLAINED),
       data=st.data())
def test_each_method_gives_an_image_its_own_map_and_class_in_any_batch_and_order(classifier, seed, batch_size, size,
                                                                                 name, data):
    """The map of image i for class t is the same alone, in a batch of other images with other classes, and
    wherever the batch puts it."""
    model, images, method = classifier, batch(seed, batch_size, *size), METHODS[name]
    options = {"steps": 3} if name == "integrated_gradients" else {}
    targets = data.draw(st.lists(st.integers(0, 9), min_size=batch_size, max_size=batch_size))
    if method.takes("target_class"):
        options["target_class"] = targets
    full = method(model, images, **options).maps
    tolerance = 1e-5 * full.abs().max().item()
    order = data.draw(st.permutations(range(batch_size)))
    permuted = {**options, "target_class": [targets[i] for i in order]} if "target_class" in options else options
    torch.testing.assert_close(method(model, images[list(order)], **permuted).maps, full[list(order)],
                               atol=tolerance, rtol=1e-5)
    alone = data.draw(st.integers(0, batch_size - 1))
    single = {**options, "target_class": targets[alone]} if "target_class" in options else options
    torch.testing.assert_close(method(model, images[alone:alone + 1], **single).maps, full[alone:alone + 1],
                               atol=tolerance, rtol=1e-5)


def hf_vit_classifier() -> torch.nn.Module:
    """transformers' ViTForImageClassification: 32 × 32 images, patch 8, two layers, ten classes."""
    torch.manual_seed(2)
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(image_size=32, patch_size=PATCH, hidden_size=48, num_hidden_layers=2,
                                    num_attention_heads=3, intermediate_size=96, num_labels=10)
    model = transformers.ViTForImageClassification(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("query.weight", "key.weight")):
                p.normal_(0, 0.3)
    return model.eval()


BATCH_OPTIONS = {
    "integrated_gradients": st.fixed_dictionaries({"steps": st.integers(1, 3), "sign": st.sampled_from(SIGNS)}),
    "gradient_shap": st.fixed_dictionaries({"samples": st.integers(1, 3), "noise": st.floats(0, 0.5),
                                            "seed": st.integers(0, 2**32 - 1), "sign": st.sampled_from(SIGNS)}),
    "occlusion": st.fixed_dictionaries({"window": st.integers(1, 2), "batch_size": st.integers(1, 9),
                                        "sign": st.sampled_from(SIGNS)}),
    "random": st.fixed_dictionaries({"seed": st.integers(0, 2**16)}),
    "center": st.fixed_dictionaries({"sigma": st.floats(0.1, 2.0)}),
    "rollout": options,
    "attention": st.fixed_dictionaries({"head_fusion": st.sampled_from(["mean", "max", "min"]),
                                        "layer": st.integers(-2, 1)}),
    "chefer": st.fixed_dictionaries({"start_layer": st.integers(0, 1)}),
    "flow": st.fixed_dictionaries({"head_fusion": st.sampled_from(["mean", "max", "min"]),
                                   "attention_weight": st.floats(0.01, 1.0)}),
    "grad_rollout": st.fixed_dictionaries({"discard_ratio": st.floats(0.0, 0.99),
                                           "attention_weight": st.floats(0.01, 1.0)}),
}
"""Options drawn for every registered image method (a method registered later fails the test until it has some)."""


@pytest.fixture(scope="module", params=["timm", "transformers"])
def two_families(request, classifier):
    return classifier if request.param == "timm" else hf_vit_classifier()


def test_every_registered_method_has_options_to_draw():
    assert sorted(BATCH_OPTIONS) == sorted(METHODS)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(BATCH_OPTIONS)), seed=st.integers(0, 2**16), position=st.integers(0, 4),
       data=st.data())
def test_an_image_alone_and_among_four_other_images_gets_the_same_map(two_families, name, seed, position, data):
    """Batch size 1 against a batch of 5 whose other images (and classes) are drawn afresh, for every registered
    method on a timm and a transformers ViT: whatever a method batches (one backward pass, hidden copies, flow
    graphs, random draws), one image's map must not see its neighbours."""
    model, method = two_families, METHODS[name]
    option_values = data.draw(BATCH_OPTIONS[name])
    images = batch(seed, 5, 32, 32)
    targets = data.draw(st.lists(st.integers(0, 9), min_size=5, max_size=5))
    among = {**option_values, "target_class": targets} if method.takes("target_class") else option_values
    alone = {**option_values, "target_class": targets[position]} if method.takes("target_class") else option_values
    in_batch = method(model, images, **among).maps[position]
    single = method(model, images[position:position + 1], **alone).maps[0]
    tolerance = 1e-5 * in_batch.abs().max().item()
    torch.testing.assert_close(single, in_batch, atol=tolerance, rtol=1e-5)


# The engine on attention matrices drawn directly: (B, N, N) row-stochastic, N = 1 class token + h·w patches.
grids = st.tuples(st.integers(1, 4), st.integers(1, 4))


def class_layout(grid: tuple[int, int]) -> TokenLayout:
    return TokenLayout(num_prefix_tokens=1, readout="class_token", grid=grid)


def stochastic(seed: int, shape: tuple[int, ...], levels: int = 0) -> torch.Tensor:
    """Random rows that sum to 1; with ``levels`` the entries take only that many values before normalising, so
    rows hold ties."""
    raw = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if levels:
        raw = (raw * levels).floor() + 1
    return raw / raw.sum(dim=-1, keepdim=True)


@SETTINGS
@given(seed=st.integers(0, 2**16), grid=grids, depth=st.integers(1, 4), alpha=st.floats(0.01, 1.0))
def test_rollout_of_row_stochastic_layers_is_a_probability_vector_and_each_layer_is_row_stochastic(
        seed, grid, depth, alpha):
    n = 1 + grid[0] * grid[1]
    layers = list(stochastic(seed, (depth, 2, n, n)).float())
    for layer in layers:
        torch.testing.assert_close(with_residual(layer, alpha).sum(dim=-1), torch.ones(2, n))
    vector = rollout_vector(layers, class_layout(grid), attention_weight=alpha)
    assert (vector >= 0).all()
    torch.testing.assert_close(vector.sum(dim=-1), torch.ones(2))


@SETTINGS
@given(grid=grids, depth=st.integers(1, 4), alpha=st.floats(0.01, 1.0))
def test_rollout_of_identity_attention_stays_on_the_class_token_and_of_uniform_attention_is_flat(grid, depth, alpha):
    n = 1 + grid[0] * grid[1]
    layout = class_layout(grid)
    identity = rollout_vector([torch.eye(n)[None]] * depth, layout, attention_weight=alpha)
    torch.testing.assert_close(identity, torch.eye(n)[:1])
    uniform = layout.patch_values(rollout_vector([torch.full((1, n, n), 1 / n)] * depth, layout,
                                                 attention_weight=alpha))
    torch.testing.assert_close(uniform, torch.full_like(uniform, uniform.mean().item()))
    # each layer keeps 1 − α of every token's mass and spreads α evenly: the class token's excess over 1/N decays
    # as (1 − α)^L, so the patches hold (1 − 1/N)·(1 − (1 − α)^L)
    patch_mass = (1 - 1 / n) * (1 - (1 - alpha) ** depth)
    assert uniform.sum().item() == pytest.approx(patch_mass, rel=1e-5, abs=1e-6)


@SETTINGS
@given(seed=st.integers(0, 2**16), grid=grids, depth=st.integers(1, 3), alpha=st.floats(0.05, 1.0),
       levels=st.sampled_from([0, 2, 3]), discard=st.floats(0.0, 0.99))
def test_rollout_vector_matches_the_float64_reference_with_ties_and_discarding(
        seed, grid, depth, alpha, levels, discard):
    n = 1 + grid[0] * grid[1]
    layers = stochastic(seed, (depth, 1, n, n), levels)
    got = class_layout(grid).patch_values(
        rollout_vector(list(layers.float()), class_layout(grid), discard_ratio=discard, attention_weight=alpha))
    expected = reference_rollout([layer.numpy() for layer in layers], num_prefix=1, grid=grid, class_token=True,
                                 discard_ratio=discard, attention_weight=alpha)
    np.testing.assert_allclose(got[0].numpy(), expected, rtol=1e-5, atol=1e-6)


@SETTINGS
@given(seed=st.integers(0, 2**16), grid=grids, depth=st.integers(1, 3), data=st.data())
def test_a_discard_ratio_that_drops_no_entry_is_plain_rollout(seed, grid, depth, data):
    n = 1 + grid[0] * grid[1]
    layers = list(stochastic(seed, (depth, 2, n, n)).float())
    ratio = data.draw(st.floats(0.0, 1 / n, exclude_max=True))  # ⌊n·ratio⌋ = 0
    assert torch.equal(rollout_vector(layers, class_layout(grid), discard_ratio=ratio),
                       rollout_vector(layers, class_layout(grid)))


@SETTINGS
@given(seed=st.integers(0, 2**16), heads=st.integers(1, 5), n=st.integers(2, 6), data=st.data())
def test_head_fusions_do_not_depend_on_the_order_of_the_heads(seed, heads, n, data):
    order = data.draw(st.permutations(range(heads)))
    attention = stochastic(seed, (2, heads, n, n)).float()
    gradient = torch.randn(2, heads, n, n, generator=torch.Generator().manual_seed(seed + 1))
    for fusion in ("mean", "max", "min"):
        torch.testing.assert_close(fuse_heads(attention[:, order], fusion), fuse_heads(attention, fusion),
                                   rtol=1e-6, atol=1e-7)
    for clamp in ("before_mean", "after_mean"):
        torch.testing.assert_close(positive_weighted_heads(attention[:, order], gradient[:, order], clamp),
                                   positive_weighted_heads(attention, gradient, clamp), rtol=1e-6, atol=1e-7)


@SETTINGS
@given(seed=st.integers(0, 2**16), size=sizes, opts=options)
def test_the_rollout_matrix_of_a_model_is_row_stochastic_and_its_readout_row_is_the_map(model, seed, size, opts):
    """Before the readout every row of R = Â_L ··· Â_1 is a probability vector (discarding included: each Â is
    renormalised), and the class token's row over the patches is what rollout returns."""
    images = batch(seed, 2, *size)
    attentions, layout, _ = record_attention(model, images, head_fusion=opts["head_fusion"])
    matrix = rollout_matrix(attentions, layout, discard_ratio=opts["discard_ratio"],
                            attention_weight=opts["attention_weight"])
    assert (matrix >= 0).all()
    torch.testing.assert_close(matrix.sum(dim=-1), torch.ones(matrix.shape[:2]))
    torch.testing.assert_close(layout.patch_values(matrix[:, 0]), rollout(model, images, **opts))
