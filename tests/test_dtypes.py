"""Half-precision model weights give maps close to float32, and the steps after an autocast forward stay float32
(CPU here; the same code runs on GPU)."""

from __future__ import annotations

import copy

import pytest
import timm
import torch

from vitroll import attention, chefer, gradient_shap, rollout
from vitroll.capture import FactoredAttention
from vitroll.methods import record_attention, rollout_matrix, rollout_vector
from vitroll.methods.baselines import random_map
from vitroll.methods.gradients import attention_gradients, positive_weighted_heads

# Measured on CPU (vit_tiny, 4 layers, 96 px, qkv std 0.06): max |Δ| = 7.7e-6 (fp16) and 4.4e-5 (bf16) on maps
# whose largest value is 0.029; the tolerances leave a ~6× margin.
TOLERANCE = {torch.float16: 5e-5, torch.bfloat16: 3e-4}
# gradient_shap, relative to the map's largest value: measured 5e-4 (fp16) and 3e-3 (bf16), same margin
SHAP_TOLERANCE = {torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    from reference import sharpen_attention

    return sharpen_attention(timm.create_model("vit_tiny_patch16_224", depth=4, img_size=96), std=0.06)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_weights_stay_close_to_float32(model, dtype):
    images = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(2))
    reference = rollout(model, images)
    low = rollout(copy.deepcopy(model).to(dtype), images)
    assert low.dtype == torch.float32, "maps are returned in float32 whatever the model's dtype"
    difference = (low - reference).abs().max().item()
    print(f"{dtype}: max abs diff {difference:.2e} (map max {reference.max().item():.3f})")
    assert difference < TOLERANCE[dtype]
    assert torch.equal(low, rollout(copy.deepcopy(model).to(dtype), images)), "deterministic"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_random_baseline_draws_the_same_map_for_a_half_precision_copy(model, dtype):
    images = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(2))
    reference = random_map(model, images, seed=3)
    # the stream was drawn from the pixels after their cast to the model's dtype: max |Δ| ≈ 0.9
    assert torch.equal(random_map(copy.deepcopy(model).to(dtype), images, seed=3).float(), reference)
    assert not torch.equal(random_map(model, images, seed=4), reference)


@pytest.mark.parametrize("factored", [False, True], ids=["dense", "factored"])
def test_rollout_chain_stays_float32_inside_an_autocast_region(model, factored):
    """Under ``torch.autocast`` the forward runs in bfloat16, but the chain after it must not: the same records
    give the same vector inside and outside the autocast region (on CPU, bmm under autocast moved it by 1e-4)."""
    images = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        attentions, layout, _ = record_attention(model, images, max_attention_memory=1, factored=factored)
        inside = rollout_vector(attentions, layout)
        matrix_inside = rollout_matrix(attentions[:2], layout) if not factored else None
    assert isinstance(attentions[0], FactoredAttention) == factored
    assert torch.equal(inside, rollout_vector(attentions, layout))
    if matrix_inside is not None:
        assert matrix_inside.dtype == torch.float32
        assert torch.equal(matrix_inside, rollout_matrix(attentions[:2], layout))


def test_chefer_and_attention_readouts_stay_float32_inside_an_autocast_region(model):
    images = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        relevance = chefer(model, images)
        recorded = attention_gradients(model, images)
        last = attention(model, images)
        attentions, layout, _ = record_attention(model, images)
    v = layout.readout_vector().expand(2, -1).clone()
    for weights, gradient in reversed(list(zip(recorded.attentions, recorded.gradients))):
        v = v + torch.bmm(v.unsqueeze(1), positive_weighted_heads(weights, gradient, "before_mean")).squeeze(1)
    assert torch.equal(relevance, layout.patch_values(v))
    assert last.dtype == torch.float32
    assert torch.equal(last, layout.patch_values(layout.readout_row(attentions[-1].float())))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gradient_shap_explains_half_precision_weights(model, dtype):
    """captum mixes the images with float32 draws: that mix reached a half model's first layer as float32 and failed
    ("Input type (float) and bias type (c10::Half) should be the same")."""
    images = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(2))
    reference = gradient_shap(model, images, samples=4, target_class=0)
    low = gradient_shap(copy.deepcopy(model).to(dtype), images, samples=4, target_class=0)
    assert low.dtype == torch.float32 and low.shape == (1, 6, 6)
    difference = (low - reference).abs().max().item()
    print(f"{dtype}: max abs diff {difference:.2e} (map max {reference.max().item():.3f})")
    assert difference < SHAP_TOLERANCE[dtype] * reference.max().item()
