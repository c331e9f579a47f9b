"""Factored attention (queries, keys, row log-normalisers): kernels against explicit softmax, and rollout from it
against the float64 reference, on the fused CPU kernel and on the portable blocked one."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import vitroll.capture.blocking as blocking_module
import vitroll.capture.factored as factored_module
import vitroll.capture.recorder as recorder_module
from vitroll import AttentionRecorder, UnsupportedModelError, rollout
from vitroll.errors import OptionValueError
from vitroll.capture import FactoredAttention, attention_with_log_normalizer
from vitroll.methods import record_attention, rollout_vector
from reference import both_prefix_rows, reference_case, reference_rollout

KERNELS = ["flash", "blocked"]


@pytest.fixture(params=KERNELS)
def kernel(request, monkeypatch):
    """Run on PyTorch's fused CPU kernel, or on the portable blocked one (what non-CPU devices use), with blocks
    small enough that every pass crosses several of them."""
    if request.param == "blocked":
        monkeypatch.setattr(factored_module, "_fused_kernel", lambda _tensor: None)
        monkeypatch.setattr(blocking_module, "CPU_BLOCK_BYTES", 4096)
    return request.param


@pytest.fixture
def long_sequence_path(monkeypatch):
    """A default budget below any dense record, so rollout records factored attention even at N = 17."""
    monkeypatch.setattr(recorder_module, "DEFAULT_CHUNK_BYTES", 4096)


def random_factors(batch=2, heads=3, tokens=37, dim=8, seed=0) -> tuple[FactoredAttention, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, tokens, dim, generator=generator) * 1.5 for _ in range(3))
    scale = dim ** -0.5
    _, log_normalizer = attention_with_log_normalizer(q, k, v, scale)
    probs = torch.softmax(q.double() @ k.double().transpose(-2, -1) * scale, dim=-1)
    return FactoredAttention(q, k, log_normalizer, scale), probs


def test_attention_and_log_normalizer_match_explicit_softmax(kernel):
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 37, 8, generator=generator) * 1.5 for _ in range(3))
    out, log_normalizer = attention_with_log_normalizer(q, k, v, 0.3)
    logits = q.double() @ k.double().transpose(-2, -1) * 0.3
    torch.testing.assert_close(out.double(), torch.softmax(logits, -1) @ v.double(), atol=1e-5, rtol=0)
    torch.testing.assert_close(log_normalizer.double(), logits.logsumexp(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("weights_kind", ["dense", "one_hot", "with_zeros"])
def test_left_multiply_matches_explicit_product(kernel, weights_kind):
    attention, probs = random_factors()
    weights = torch.rand(2, 37, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    if weights_kind == "one_hot":  # the class token's readout row: only that query row is read
        weights = torch.zeros_like(weights)
        weights[:, 0] = 1.0
    elif weights_kind == "with_zeros":
        weights[:, ::3] = 0.0
    expected = torch.einsum("bi,bhij->bj", weights, probs) / probs.shape[1]
    got = attention.left_multiply(weights.float())
    assert got.shape == (2, 37) and got.dtype == torch.float32
    relative = ((got.double() - expected).abs() / expected.abs().max()).max().item()
    assert relative < 1e-5, relative


def test_rows_are_the_softmax_probabilities():
    attention, probs = random_factors()
    torch.testing.assert_close(attention.rows(slice(5, 9)).double(), probs[:, :, 5:9], atol=1e-6, rtol=0)
    torch.testing.assert_close(attention.rows(torch.tensor([0, 36])).double(), probs[:, :, [0, 36]], atol=1e-6, rtol=0)
    assert attention.shape == (2, 37, 37)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), tokens=st.integers(2, 40), heads=st.integers(1, 4), spread=st.floats(0.1, 4.0))
def test_left_multiply_conserves_mass(seed, tokens, heads, spread):
    """Rows of a softmax sum to 1, so w · P carries exactly the mass of w, whatever the logits' spread."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, tokens, 8, generator=generator) * spread for _ in range(3))
    _, log_normalizer = attention_with_log_normalizer(q, k, v, 8 ** -0.5)
    weights = torch.rand(1, tokens, generator=generator)
    mass = FactoredAttention(q, k, log_normalizer, 8 ** -0.5).left_multiply(weights)
    assert (mass >= 0).all()
    torch.testing.assert_close(mass.sum(), weights.sum(), atol=1e-5, rtol=1e-5)


MODELS = {
    "vit_tiny": ("vit_tiny_patch16_224", {}, (224, 224)),  # class token: one-hot start row
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}, (224, 224)),
    "non_square": ("vit_tiny_patch16_224", {"img_size": (224, 160)}, (224, 160)),
    "gap_reg4": ("vit_little_patch16_reg4_gap_256", {"img_size": 128}, (128, 128)),  # dense start row
}


@pytest.fixture(scope="module", params=list(MODELS))
def case(request):
    return reference_case(*MODELS[request.param], batch=2)


@pytest.mark.parametrize("start_layer, attention_weight", [(0, 0.5), (4, 0.8)])
def test_rollout_from_factored_attention_matches_float64_reference(case, kernel, long_sequence_path, start_layer,
                                                                     attention_weight):
    model, images, per_image = case
    attentions, layout, _ = record_attention(model, images, factored=True)
    assert all(isinstance(a, FactoredAttention) for a in attentions), "no N×N map is stored on this path"
    maps = rollout(model, images, start_layer=start_layer, attention_weight=attention_weight)
    for i, per_layer in enumerate(per_image):
        expected = reference_rollout(per_layer, num_prefix=layout.num_prefix_tokens, grid=layout.grid,
                                     class_token=layout.readout == "class_token", readout=both_prefix_rows(layout),
                                     attention_weight=attention_weight, start_layer=start_layer)
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=1e-5, rtol=1e-4)


def test_factored_and_dense_recording_give_the_same_rollout_and_logits(case, long_sequence_path):
    model, images, _ = case
    dense, layout, dense_logits = record_attention(model, images)
    factors, _, factored_logits = record_attention(model, images, factored=True)
    torch.testing.assert_close(factored_logits, dense_logits, atol=1e-5, rtol=0)
    for a, b in zip(factors, dense):
        torch.testing.assert_close(a.rows(slice(None)).mean(dim=1), b, atol=1e-6, rtol=0)
    torch.testing.assert_close(rollout_vector(factors, layout), rollout_vector(dense, layout), atol=1e-6, rtol=1e-5)


def test_within_the_budget_the_records_stay_dense(case):
    model, images, _ = case
    attentions, _, _ = record_attention(model, images, factored=True)
    assert all(isinstance(a, torch.Tensor) for a in attentions)


def test_kernel_swap_is_undone_after_an_exception_inside_attention(long_sequence_path):
    model = timm.create_model("vit_tiny_patch16_224").eval()
    images = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        plain = model(images)
    handle = model.blocks[3].attn.proj.register_forward_hook(lambda *_: (_ for _ in ()).throw(RuntimeError("boom")))
    try:
        with pytest.raises(RuntimeError, match="boom"), torch.no_grad():
            with AttentionRecorder(model, factored=True):
                model(images)
    finally:
        handle.remove()
    assert torch._C._len_torch_function_stack() == 0, "the kernel swap must not outlive the recorder"
    with torch.no_grad():
        assert torch.equal(model(images), plain)


def test_factored_recording_refuses_or_falls_back_where_it_cannot_represent(long_sequence_path):
    model = timm.create_model("vit_tiny_patch16_224").eval()
    with pytest.raises(OptionValueError, match="head mean only"):
        AttentionRecorder(model, head_fusion="max", factored=True)
    attentions, layout, _ = record_attention(model, torch.randn(1, 3, 224, 224), factored=True)
    with pytest.raises(OptionValueError, match="discard_ratio needs the attention maps"):
        rollout_vector(attentions, layout, discard_ratio=0.5)
    block = model.blocks[0].attn
    tokens, mask = torch.randn(1, 197, 192), torch.randn(197, 197)
    with torch.no_grad(), AttentionRecorder(model, factored=True) as recorder:
        masked = block(tokens, attn_mask=mask)
    assert isinstance(recorder._records[0], torch.Tensor), "masked attention has no factors: recorded densely"
    with torch.no_grad():
        torch.testing.assert_close(masked, block(tokens, attn_mask=mask), atol=1e-5, rtol=0)
    dropout = timm.create_model("vit_tiny_patch16_224", attn_drop_rate=0.1).train()
    with AttentionRecorder(dropout, factored=True), pytest.raises(UnsupportedModelError, match="eval mode only"):
        dropout(torch.randn(1, 3, 224, 224))


def test_portable_log_normalizer_stays_float32_under_autocast(monkeypatch):
    """The portable kernel (what CUDA uses) inside the model's bf16 autocast: ℓ from float32 logits, as
    FactoredAttention recomputes them (bf16 logits would leave every row's mass off 1 by ~1e-2)."""
    monkeypatch.setattr(factored_module, "_fused_kernel", lambda _tensor: None)
    generator = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 37, 8, generator=generator).mul(3).bfloat16() for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, log_normalizer = attention_with_log_normalizer(q, k, v, 0.3)
    assert out.dtype == torch.bfloat16
    logits = q.float() @ k.float().transpose(-2, -1) * 0.3
    torch.testing.assert_close(log_normalizer, logits.logsumexp(-1), atol=1e-5, rtol=0)
    mass = FactoredAttention(q, k, log_normalizer, 0.3).rows(slice(None)).sum(-1)
    torch.testing.assert_close(mass, torch.ones_like(mass), atol=1e-5, rtol=0)
