"""One test per failure mode seen in existing ViT rollout tools; each is named after the bug it guards.

tests/REGRESSIONS.md lists, for each, how the bug was injected and how the test failed.
"""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from vitroll import AttentionRecorder, attention, rollout, rollout_matrix
from vitroll.io import encode_png
from vitroll.methods import record_attention
from vitroll.overlay import overlay
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.single import explain_files
from vitroll.wording import worded_for_the_command_line
from reference import sharpen_attention


def hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return sharpen_attention(timm.create_model("vit_tiny_patch16_224", depth=4, img_size=96))


@pytest.fixture(scope="module")
def images():
    return torch.randn(4, 3, 96, 96, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("method", [rollout, attention])
def test_batch_does_not_return_the_first_images_map_for_every_image(model, images, method):
    batched = method(model, images)
    for i in range(len(images)):
        alone = method(model, images[i:i + 1])[0]
        torch.testing.assert_close(batched[i], alone, atol=1e-5, rtol=0)
    for i in range(1, len(images)):
        assert (batched[i] - batched[0]).abs().max() > 1e-4, f"map {i} equals map 0"


def test_capture_works_under_fused_attention(model, images):
    assert all(block.attn.fused_attn for block in model.blocks)
    with torch.no_grad(), AttentionRecorder(model) as recorder:
        model(images)
        assert all(block.attn.fused_attn for block in model.blocks), "query/key path keeps the fused kernel"
    assert len(recorder.attentions) == len(model.blocks)
    assert all(torch.isfinite(a).all() and a.abs().sum() > 0 for a in recorder.attentions)
    torch.testing.assert_close(recorder.attentions[0].sum(-1), torch.ones(4, 37), atol=1e-5, rtol=0)


def test_second_explainer_does_not_leave_hooks_or_mix_maps(model, images):
    before = hook_count(model)
    with torch.no_grad(), AttentionRecorder(model) as first, AttentionRecorder(model, head_fusion="max") as second:
        model(images)
    assert hook_count(model) == before
    expected_mean = record_attention(model, images, head_fusion="mean")[0]
    expected_max = record_attention(model, images, head_fusion="max")[0]
    for got, want in zip(first.attentions, expected_mean):
        torch.testing.assert_close(got, want)
    for got, want in zip(second.attentions, expected_max):
        torch.testing.assert_close(got, want)
    for _ in range(5):
        rollout(model, images[:1])
        with pytest.raises(RuntimeError):
            with AttentionRecorder(model, keep_graph=True):
                raise RuntimeError("user code failed inside the context")
    assert hook_count(model) == before
    assert all(block.attn.fused_attn for block in model.blocks)


def test_overlay_colors_are_rgb_not_opencv_bgr():
    image = np.full((64, 64, 3), 255, np.uint8)
    heat = np.zeros((4, 4), np.float32)
    heat[0, 0] = 1.0
    encoded = encode_png(overlay(image, heat, cmap="jet", alpha=0.8))
    import io

    saved = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB")).astype(int)
    corner, far = saved[1, 1], saved[-2, -2]
    assert corner[0] > corner[2] + 60, f"corner should be red, got {corner}"
    assert far[2] > far[0] + 60, f"far corner should be blue, got {far}"


def test_discard_normalises_rows_not_columns(model, images):
    attentions, layout, _ = record_attention(model, images)
    matrix = rollout_matrix(attentions, layout, discard_ratio=0.9)
    torch.testing.assert_close(matrix.sum(-1), torch.ones(matrix.shape[:2]), atol=1e-5, rtol=0)
    assert (matrix.sum(-2) - 1).abs().max() > 1e-3, "columns are not normalised (that was the bug)"


def test_failed_image_is_reported_not_a_blank_success(model, tmp_path):
    good = tmp_path / "good.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (80, 90, 3), dtype=np.uint8)).save(good)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n broken")
    results = {r.path.name: r for r in explain_files([bad, good], model, out_dir=tmp_path / "out",
                                                         settings=ExplainSettings())}
    assert results["bad.png"].error and results["bad.png"].overlay_path is None
    assert not (tmp_path / "out" / "bad_rollout.png").exists()
    assert results["good.png"].error is None and results["good.png"].overlay_path.exists()


def test_uses_the_real_model_not_a_reimplementation(images):
    model = timm.create_model("vit_tiny_patch16_224", depth=2, img_size=96).eval()
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.eps = 1e-2  # a re-implementation with timm's default eps would drift from this model
    with torch.no_grad():
        expected = model(images)
    _, _, logits = record_attention(model, images)
    # the unfused softmax path may differ from the fused kernel in the last bits; a re-implementation with
    # eps 1e-6 differs by far more (REGRESSIONS.md)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_non_gradient_methods_work_without_autograd(model, images, context):
    with context():
        maps = [rollout(model, images), attention(model, images)]
    for m in maps:
        assert m.grad_fn is None and not m.requires_grad and torch.isfinite(m).all()
    # and without a context, no graph is built either
    assert rollout(model, images).grad_fn is None


def test_out_of_memory_batch_is_split_not_fatal(capsys):
    """A batch too large for memory is retried in halves with a note; the maps equal the unsplit ones."""
    from vitroll.errors import VitrollError
    from vitroll.methods import METHODS, Method

    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2).eval()
    images = torch.randn(5, 3, 32, 32)
    expected = METHODS["rollout"](model, images)
    sizes = []

    def runs_out_above_two(model, batch, **options):
        sizes.append(len(batch))
        if len(batch) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return METHODS["rollout"](model, batch, **options)

    result = Method("runs_out_above_two", runs_out_above_two)(model, images)
    torch.testing.assert_close(result.maps, expected.maps)
    torch.testing.assert_close(result.logits, expected.logits)
    assert sizes == [5, 3, 2, 1, 2]
    assert "a batch of 5 ran out of memory; retrying as 3 + 2" in capsys.readouterr().err

    def always_out(model, batch, **options):
        raise MemoryError()

    with pytest.raises(VitrollError) as raised:
        Method("always_out", always_out)(model, images[:1])
    assert str(raised.value) == ("out of memory on a single input of shape (3, 32, 32); lower max_attention_memory or "
                                 "the input size")
    with worded_for_the_command_line(), pytest.raises(VitrollError) as raised:
        Method("always_out", always_out)(model, images[:1])
    assert str(raised.value).endswith("lower --max-attention-memory or the input size")

    def a_bug(model, batch, **options):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        Method("a_bug", a_bug)(model, images)


def test_max_attention_memory_bounds_chunks_without_changing_maps():
    model = timm.create_model("vit_tiny_patch16_224", img_size=64, depth=2).eval()
    images = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(rollout(model, images, max_attention_memory=2048), rollout(model, images), atol=1e-7,
                               rtol=0)


def test_out_of_memory_halving_splits_a_list_of_paths_as_images_not_a_path_as_characters(tmp_path):
    from vitroll.methods import METHODS, Method

    model = timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2).eval()
    paths = []
    for index in range(3):
        paths.append(str(tmp_path / f"{index}.png"))
        Image.fromarray(np.full((40, 30, 3), 60 * index, dtype=np.uint8)).save(paths[-1])
    sizes = []

    def runs_out_above_one(model, batch, **options):
        sizes.append(len(batch))
        if len(batch) > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return METHODS["rollout"](model, batch, **options)

    method = Method("runs_out_above_one", runs_out_above_one)
    assert method(model, paths).maps.shape[0] == 3 and sizes == [3, 2, 1, 1, 1]
    sizes.clear()
    assert method(model, paths[0]).maps.shape[0] == 1 and sizes == [1]
