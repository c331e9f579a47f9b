"""Capture must not change the model: same logits, flags and hooks restored, also after an exception."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import timm
import torch

from vitroll import AttentionRecorder, rollout
from vitroll.capture import FactoredAttention, fuse_heads
from vitroll import UnsupportedModelError
from vitroll.errors import OptionValueError


def hook_counts(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def fused_flags(model: torch.nn.Module) -> list[bool]:
    return [block.attn.fused_attn for block in model.blocks]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224").eval()


def test_capture_leaves_the_model_unchanged(model):
    """The blocked kernel's output is the model's within 1e-5; factored recording runs PyTorch's own fused CPU kernel,
    so the output is bit-identical; after either, the model is as it was."""
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        plain = model(images)
        with AttentionRecorder(model) as recorder:
            blocked = model(images)
        with AttentionRecorder(model, factored=True, chunk_bytes=1000):
            factored = model(images)
        after = model(images)
    torch.testing.assert_close(blocked, plain, atol=1e-5, rtol=0)
    assert torch.equal(factored, plain), "factored recording must leave the fused forward bit-identical"
    assert torch.equal(plain, after)
    assert len(recorder.attentions) == len(model.blocks)
    assert recorder.attentions[0].shape == (2, 197, 197)


def test_a_float64_model_keeps_float64_logits_on_every_capture_path():
    """PyTorch's fused CPU kernel takes no float64, so factored recording computes the attention itself: in float64
    for a float64 model (it ran in float32 and moved the logits by ~1e-7), as the blocked kernel does."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=5).double().eval()
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        plain = model(images)
        for options in (dict(), dict(factored=True, chunk_bytes=1)):
            with AttentionRecorder(model, **options) as recorder:
                captured = model(images)
            assert isinstance(recorder.attentions[0], FactoredAttention) == bool(options)
            torch.testing.assert_close(captured, plain, atol=1e-13, rtol=0)


@pytest.mark.parametrize("dtype, named", [(np.float16, "<class 'numpy.float16'> (type)"),
                                          (np.dtype("float16"), "dtype('float16') (Float16DType)"),
                                          ("float16", "'float16' (str)")])
def test_a_dtype_that_is_not_torchs_is_refused_by_name(model, dtype, named):
    with pytest.raises(OptionValueError) as refused:  # it was AttributeError: no attribute 'is_floating_point'
        AttentionRecorder(model, dtype=dtype)
    assert str(refused.value) == ("dtype must be a torch dtype (torch.float32, torch.float16, torch.bfloat16, "
                                  f"torch.float64); got {named}")


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


@contextlib.contextmanager
def unfused_model(model):
    """The model on its own unfused path, as when a user switched ``fused_attn`` off."""
    for block in model.blocks:
        block.attn.fused_attn = False
    try:
        yield model
    finally:
        for block in model.blocks:
            block.attn.fused_attn = True


PATHS = {  # name: (chunk_bytes, model on its unfused path)
    "blocked": (2**30, False),
    "blocked_5_rows": (2 * 3 * 197 * 4 * 5, False),
    "model_unfused": (2**30, True),
}


@pytest.mark.parametrize("head_fusion", ["mean", "max", "min", None])
def test_every_capture_path_gives_the_same_maps(model, head_fusion):
    """Blocked kernel (one block and 5-row blocks), the model's own unfused softmax, keep_graph: the same attention
    within 1e-5, the same logits, and the same rollout."""
    images = torch.randn(2, 3, 224, 224)
    recorded = {}
    for path, (budget, unfused) in PATHS.items():
        with unfused_model(model) if unfused else contextlib.nullcontext(), torch.no_grad():
            with AttentionRecorder(model, head_fusion=head_fusion, chunk_bytes=budget) as recorder:
                logits = model(images)
            recorded[path] = (recorder.attentions, logits, rollout(model, images, max_attention_memory=budget))
    with AttentionRecorder(model, keep_graph=True) as recorder:
        model(images)
    graph = [fuse_heads(a.detach(), head_fusion) for a in recorder.attentions]
    reference, reference_logits, reference_maps = recorded["model_unfused"]
    for path, (attentions, logits, maps) in recorded.items():
        torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=0)
        assert max((a - b).abs().max() for a, b in zip(attentions, reference)) < 1e-5, path
        assert (maps - reference_maps).abs().max() < 1e-5, path
    assert max((a - b).abs().max() for a, b in zip(graph, reference)) < 1e-5


def count_kernel_calls(monkeypatch) -> list[str]:
    """Names of the recorder's kernels as they run: "blocked" or "factored"."""
    calls: list[str] = []
    for name in ("blocked", "factored"):
        make = getattr(AttentionRecorder, f"_{name}_kernel")

        def counting(self, *where, make=make, name=name):
            kernel = make(self, *where)
            return lambda *args: calls.append(name) or kernel(*args)

        monkeypatch.setattr(AttentionRecorder, f"_{name}_kernel", counting)
    return calls


def test_the_path_is_chosen_per_call_by_budget(model, monkeypatch):
    """A model on its fused kernel goes to the blocked kernel (the flag stays on, attn_drop never runs); with
    factored recording, once the head-fused maps of all layers exceed the budget, to the factored kernel; a model
    already unfused is hooked on its own path and left so."""
    calls, unfused_calls = count_kernel_calls(monkeypatch), []
    probe = model.blocks[0].attn.attn_drop.register_forward_hook(lambda *_: unfused_calls.append(1))
    images = torch.randn(1, 3, 224, 224)
    try:
        with torch.no_grad():
            with AttentionRecorder(model):
                model(images)
            assert calls == ["blocked"] * 12 and not unfused_calls
            calls.clear()
            dense_bytes = 12 * 197 * 197 * 4
            with AttentionRecorder(model, factored=True, chunk_bytes=dense_bytes) as recorder:
                model(images)
                assert calls == ["blocked"] * 12
                recorder.chunk_bytes = dense_bytes - 1
                model(images)
                assert calls == ["blocked"] * 12 + ["factored"] * 12
                assert all(isinstance(a, FactoredAttention) for a in recorder.attentions)
            calls.clear()
            with AttentionRecorder(model, factored=True, chunk_bytes=dense_bytes // 2, dtype=torch.float16):
                model(images)
            assert calls == ["blocked"] * 12, "float16 records take half the bytes"
            calls.clear()
            with unfused_model(model), AttentionRecorder(model) as recorder:
                model(images)
                assert not any(fused_flags(model))
            assert not calls and unfused_calls == [1]
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
    with pytest.raises(UnsupportedModelError, match=r"ResNet has no token attention.*vit.*Grad-CAM") as raised:
        rollout(model, torch.randn(1, 3, 64, 64))
    # a built model may come from any source: every family is listed, one without name patterns by its name alone
    assert "supported families: vit (vit_*" in str(raised.value)
    assert ", image-text-prompted, hf-vit (ViTModel, " in str(raised.value)


def test_blocks_fit_the_device_and_the_budget():
    from vitroll.capture.blocking import ACCELERATOR_BLOCK_BYTES, CPU_BLOCK_BYTES, rows_per_block

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert rows_per_block(1000, 10**6, cpu) == CPU_BLOCK_BYTES // 1000
    assert rows_per_block(1000, 10**6, gpu) == ACCELERATOR_BLOCK_BYTES // 1000
    assert rows_per_block(1000, 10**6, gpu, limit=5000) == 5
    assert rows_per_block(10**9, 10, cpu) == 1, "at least one row, even over budget"
    assert rows_per_block(4, 10, cpu) == 10, "never more rows than there are"


def test_default_attention_budget_is_a_quarter_of_free_gpu_memory_but_never_below_the_cpu_default(monkeypatch):
    from vitroll.capture.recorder import DEFAULT_CHUNK_BYTES, default_attention_budget

    assert default_attention_budget(torch.device("cpu")) == DEFAULT_CHUNK_BYTES == 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (24 * 2**30, 141 * 2**30))
    assert default_attention_budget(torch.device("cuda", 0)) == 6 * 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (2 * 2**30, 141 * 2**30))
    assert default_attention_budget(torch.device("cuda", 0)) == DEFAULT_CHUNK_BYTES


class _Normalise(torch.nn.Module):
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (images - 0.5) / 0.5


@pytest.mark.parametrize("wrap, expected", [
    (torch.nn.DataParallel, "DataParallel: a data-parallel wrapper runs copies of the model in threads, one per "
     "device, which attention hooks do not follow; explain the model it wraps, model.module (the same weights)"),
    (lambda model: torch.nn.Sequential(_Normalise(), model),
     "Sequential is of no registered model family, but the VisionTransformer it holds is: explain model[1], whose "
     "own preprocessing vitroll applies to images (a tensor must be its input), or register the wrapper with "
     "vitroll.register_family"),
], ids=["DataParallel", "Sequential"])
def test_a_wrapped_model_is_refused_naming_the_model_inside(model, wrap, expected):
    """Both were refused with the list of every supported family (a thousand characters), or as a model whose
    preprocessing is unknown."""
    image = torch.zeros(8, 8, 3, dtype=torch.uint8).numpy()
    for images in (torch.randn(1, 3, 224, 224), image):
        with pytest.raises(UnsupportedModelError) as raised:
            rollout(wrap(model), images)
        assert str(raised.value) == expected


def test_a_compiled_model_is_refused_with_the_model_it_wraps_named(model):
    compiled = torch.compile(model)  # compiles lazily: nothing runs until it is called
    expected = ("OptimizedModule: a torch.compile'd model runs a compiled graph that attention hooks do not see; "
                "explain the model it wraps, model._orig_mod (the same weights)")
    image = torch.zeros(8, 8, 3, dtype=torch.uint8).numpy()
    for images in (torch.randn(1, 3, 224, 224), image):  # a tensor reaches the family; an image its preprocessing first
        with pytest.raises(UnsupportedModelError) as raised:
            rollout(compiled, images)
        assert str(raised.value) == expected


@pytest.mark.parametrize("name",
                         ["rollout", "attention", "grad_rollout", "chefer", "integrated_gradients", "occlusion"])
def test_a_model_in_training_mode_with_dropout_gives_its_eval_maps_and_keeps_its_mode(name):
    """As the README says: dropout would make every call's maps differ."""
    from vitroll import METHODS

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=5, drop_rate=0.5,
                              attn_drop_rate=0.5, proj_drop_rate=0.5).train()
    images = torch.randn(2, 3, 32, 32)
    options = {"steps": 2} if name == "integrated_gradients" else {}
    maps = METHODS[name](model, images, **options).maps
    assert model.training and all(module.training for module in model.modules())
    torch.testing.assert_close(maps, METHODS[name](model.eval(), images, **options).maps, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["rollout", "chefer", "integrated_gradients", "occlusion"])
def test_a_keyboard_interrupt_inside_a_verb_leaves_the_model_as_it_was(name):
    """Ctrl-C in a notebook cell while a method runs: no hook, switched-off fused attention, eval mode or gradient
    may stay behind on the model."""
    from vitroll import METHODS

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=5).train()
    flags, hooks = fused_flags(model), hook_counts(model)

    def interrupt(*_):
        raise KeyboardInterrupt

    handle = model.blocks[1].mlp.register_forward_hook(interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            METHODS[name](model, torch.randn(1, 3, 32, 32))
    finally:
        handle.remove()
    assert fused_flags(model) == flags and hook_counts(model) == hooks
    assert all(module.training for module in model.modules())
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
