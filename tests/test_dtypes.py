"""Half-precision model weights give maps close to float32 (CPU here; the same code runs on GPU)."""

from __future__ import annotations

import copy

import pytest
import timm
import torch

from vitroll import rollout

# Measured on CPU (vit_tiny, 4 layers, 96 px, qkv std 0.06): max |Δ| = 7.7e-6 (fp16) and 4.4e-5 (bf16) on maps
# whose largest value is 0.029; the tolerances leave a ~6× margin.
TOLERANCE = {torch.float16: 5e-5, torch.bfloat16: 3e-4}


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
