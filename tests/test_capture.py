"""Capture must not change the model: same logits, flags and hooks restored, also after an exception."""

from __future__ import annotations

import pytest
import timm
import torch

from vitroll import AttentionRecorder, rollout
from vitroll import UnsupportedModelError


def hook_counts(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def fused_flags(model: torch.nn.Module) -> list[bool]:
    return [block.attn.fused_attn for block in model.blocks]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224").eval()


def test_logits_identical_with_and_without_capture(model):
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        plain = model(images)
        with AttentionRecorder(model) as recorder:
            captured = model(images)
        after = model(images)
    assert torch.equal(plain, captured), "the query/key path must leave the fused forward bit-identical"
    assert torch.equal(plain, after)
    assert len(recorder.attentions) == len(model.blocks)
    assert recorder.attentions[0].shape == (2, 197, 197)


@pytest.mark.parametrize("keep_graph", [False, True])
def test_flags_and_hooks_restored_after_exit_and_after_exception(model, keep_graph):
    flags, hooks = fused_flags(model), hook_counts(model)
    assert all(flags), "timm uses fused attention by default"
    with AttentionRecorder(model, keep_graph=keep_graph):
        assert hook_counts(model) > hooks
        if keep_graph:
            assert not any(fused_flags(model)), "the unfused path switches fused_attn off while recording"
        model(torch.randn(1, 3, 224, 224))
    assert fused_flags(model) == flags and hook_counts(model) == hooks

    def explode(*_):
        raise RuntimeError("boom in block 5")

    handle = model.blocks[5].register_forward_hook(explode)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            with AttentionRecorder(model, keep_graph=keep_graph):
                model(torch.randn(1, 3, 224, 224))
    finally:
        handle.remove()
    assert fused_flags(model) == flags and hook_counts(model) == hooks


def test_rollout_restores_training_mode_and_hooks():
    model = timm.create_model("vit_tiny_patch16_224").train()
    hooks = hook_counts(model)
    rollout(model, torch.randn(1, 3, 224, 224))
    assert model.training and all(m.training for m in model.modules())
    assert hook_counts(model) == hooks


def test_unfused_path_matches_query_key_path(model):
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad(), AttentionRecorder(model, head_fusion=None) as fast:
        model(images)
    with torch.no_grad(), AttentionRecorder(model, keep_graph=True) as slow:
        model(images)
    for a, b in zip(fast.attentions, slow.attentions):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_chunked_capture_equals_single_block(model):
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad(), AttentionRecorder(model) as whole:
        model(images)
    with torch.no_grad(), AttentionRecorder(model, chunk_bytes=2 * 3 * 197 * 4 * 7) as chunked:  # 7-row blocks
        model(images)
    for a, b in zip(whole.attentions, chunked.attentions):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)


def test_half_precision_storage_is_close(model):
    images = torch.randn(1, 3, 224, 224)
    full = rollout(model, images)
    half = rollout(model, images, dtype=torch.float16)
    torch.testing.assert_close(half, full, atol=1e-4, rtol=1e-2)


def test_unsupported_model_names_its_family_and_the_supported_ones():
    model = timm.create_model("resnet18").eval()
    with pytest.raises(UnsupportedModelError, match=r"ResNet has no token attention.*vit.*Grad-CAM"):
        rollout(model, torch.randn(1, 3, 64, 64))
