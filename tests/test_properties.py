"""Property-based tests (hypothesis) of the rollout engine on a tiny dynamic-size ViT."""

from __future__ import annotations

import pytest
import timm
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vitroll import attention, rollout

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
