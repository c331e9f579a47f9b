"""Capture must not change the model: same logits, flags and hooks restored, also after an exception."""

from __future__ import annotations

import pytest
import timm
import torch

import vitroll.capture.recorder as recorder_module
from vitroll import AttentionRecorder, rollout
from vitroll.capture import fuse_heads
from vitroll import UnsupportedModelError


def hook_counts(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def fused_flags(model: torch.nn.Module) -> list[bool]:
    return [block.attn.fused_attn for block in model.blocks]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224").eval()


@pytest.fixture
def query_key_path(monkeypatch):
    """Force the query/key path (recomputation beside the fused kernel) at every size."""
    monkeypatch.setattr(recorder_module, "UNFUSED_MAX_TOKENS", 0)


def test_logits_identical_with_and_without_capture(model, query_key_path):
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


def test_chunked_capture_equals_single_block(model, query_key_path):
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad(), AttentionRecorder(model) as whole:
        model(images)
    with torch.no_grad(), AttentionRecorder(model, chunk_bytes=2 * 3 * 197 * 4 * 7) as chunked:  # 7-row blocks
        model(images)
    for a, b in zip(whole.attentions, chunked.attentions):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("head_fusion", ["mean", "max", None])
def test_every_capture_path_gives_the_same_maps(model, monkeypatch, head_fusion):
    """Unfused (the model's own softmax), query/key in one block, query/key in 5-row blocks, keep_graph: same
    attention within 1e-5, and the same rollout."""
    images = torch.randn(2, 3, 224, 224)
    recorded = {}
    for path, limit, budget in [("unfused", 10**6, 2**30), ("query_key", 0, 2**30), ("chunked", 0, 2 * 3 * 197 * 4 * 5)]:
        monkeypatch.setattr(recorder_module, "UNFUSED_MAX_TOKENS", limit)
        with torch.no_grad(), AttentionRecorder(model, head_fusion=head_fusion, chunk_bytes=budget) as recorder:
            logits = model(images)
        recorded[path] = (recorder.attentions, logits)
    with AttentionRecorder(model, keep_graph=True) as recorder:
        model(images)
    graph = [fuse_heads(a.detach(), head_fusion) for a in recorder.attentions]
    reference, reference_logits = recorded["query_key"]
    for path, (attentions, logits) in recorded.items():
        torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=0)
        for a, b in zip(attentions, reference):
            assert (a - b).abs().max() < 1e-5, path
    for a, b in zip(graph, reference):
        assert (a - b).abs().max() < 1e-5
    monkeypatch.setattr(recorder_module, "UNFUSED_MAX_TOKENS", 10**6)
    unfused_maps = rollout(model, images)
    monkeypatch.setattr(recorder_module, "UNFUSED_MAX_TOKENS", 0)
    assert (unfused_maps - rollout(model, images, max_attention_memory=2 * 3 * 197 * 4 * 5)).abs().max() < 1e-5


def test_the_cheaper_path_is_chosen_by_size(model, monkeypatch):
    """Short sequences within the memory budget run unfused (fused_attn off during the call, restored after);
    long ones, or over-budget batches, keep the fused kernel."""
    seen = []
    probe = model.blocks[0].attn.attn_drop.register_forward_hook(lambda *_: seen.append("unfused"))
    try:
        with torch.no_grad(), AttentionRecorder(model) as recorder:
            model(torch.randn(1, 3, 224, 224))
            assert seen == ["unfused"]
            recorder.chunk_bytes = 1000  # below one image's 3·197²·4 bytes
            model(torch.randn(1, 3, 224, 224))
            assert seen == ["unfused"]
            assert recorder.attentions[0].shape == (1, 197, 197)
        assert all(fused_flags(model))
    finally:
        probe.remove()


def test_half_precision_storage_is_close(model):
    images = torch.randn(1, 3, 224, 224)
    full = rollout(model, images)
    half = rollout(model, images, dtype=torch.float16)
    torch.testing.assert_close(half, full, atol=1e-4, rtol=1e-2)


def test_unsupported_model_names_its_family_and_the_supported_ones():
    model = timm.create_model("resnet18").eval()
    with pytest.raises(UnsupportedModelError, match=r"ResNet has no token attention.*vit.*Grad-CAM"):
        rollout(model, torch.randn(1, 3, 64, 64))


def test_blocks_fit_the_device_and_the_budget():
    from vitroll.capture.blocking import ACCELERATOR_BLOCK_BYTES, CPU_BLOCK_BYTES, rows_per_block

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert rows_per_block(1000, 10**6, cpu) == CPU_BLOCK_BYTES // 1000
    assert rows_per_block(1000, 10**6, gpu) == ACCELERATOR_BLOCK_BYTES // 1000
    assert rows_per_block(1000, 10**6, gpu, limit=5000) == 5
    assert rows_per_block(10**9, 10, cpu) == 1, "at least one row, even over budget"
    assert rows_per_block(4, 10, cpu) == 10, "never more rows than there are"
