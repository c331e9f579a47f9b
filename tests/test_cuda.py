"""The CUDA path (``pytest -m cuda``; ``scripts/gpu_check.py`` runs these): device placement, autocast, the
out-of-memory halving, capture leaving the logits unchanged, blocked records, annotate. Skipped without CUDA.

No GPU was available when these were written: each tolerance is the same quantity measured on CPU (under CPU
autocast where it applies) with a margin, and says so.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from vitroll import rollout
from vitroll.capture.blocking import ACCELERATOR_BLOCK_BYTES, rows_per_block
from vitroll.methods import METHODS, record_attention
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import AnnotateOptions, annotate

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

METHOD_OPTIONS = {"grad_rollout": {"discard_ratio": 0.0}, "integrated_gradients": {"steps": 8},
                  "gradient_shap": {"samples": 4}}
"""Cheap settings; no discarding, so a last-digit difference cannot move a map entry across the discard threshold."""
AUTOCAST_MAP_TOLERANCE = {torch.float16: 1e-4, torch.bfloat16: 6e-4}
"""Max |Δ| of rollout maps under autocast against float32; CPU autocast on this model and input: 1.7e-5 (fp16) and
1.2e-4 (bf16), maps up to 0.067."""
CAPTURE_LOGIT_FACTOR = 3.0
"""Under autocast the recording kernel rounds its logits like the model's unfused path, not like the fused kernel, so
its logits may differ from the plain autocast forward's, but by no more than this times the autocast forward's own
distance from float32 (CPU: 0.8×)."""


@pytest.fixture(autouse=True)
def _exact_float32():
    """No TF32 (cuDNN allows it by default for the patch-embedding convolution): float32 means float32 here."""
    flags = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


@pytest.fixture(scope="module")
def cpu_model():
    from reference import sharpen_attention

    torch.manual_seed(0)
    return sharpen_attention(timm.create_model("vit_tiny_patch16_224", depth=4, img_size=64), std=0.06)


@pytest.fixture(scope="module")
def cuda_model(cpu_model):
    return copy.deepcopy(cpu_model).cuda()


def _images(batch: int = 2, pixels: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, pixels, pixels, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_returns_maps_on_the_model_device_equal_to_the_cpu_maps(name, cpu_model, cuda_model):
    options = METHOD_OPTIONS.get(name, {})
    on_gpu = METHODS[name](cuda_model, _images(), **options)  # CPU images: the method moves them
    assert on_gpu.maps.device.type == "cuda" and on_gpu.maps.dtype == torch.float32
    assert on_gpu.logits.device.type == "cuda"
    assert torch.isfinite(on_gpu.maps).all()
    if name == "gradient_shap":  # its noise comes from the CUDA generator, not the CPU one
        return
    on_cpu = METHODS[name](cpu_model, _images(), **options)
    scale = on_cpu.maps.abs().max().item()
    torch.testing.assert_close(on_gpu.maps.cpu(), on_cpu.maps, atol=1e-4 * scale, rtol=1e-3)
    torch.testing.assert_close(on_gpu.logits.cpu(), on_cpu.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("budget", [None, 1], ids=["dense", "factored"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_autocast_maps_stay_within_the_stated_tolerance_of_float32(cuda_model, dtype, budget):
    images = _images().cuda()
    reference = rollout(cuda_model, images, max_attention_memory=budget)
    with torch.autocast("cuda", dtype=dtype):
        low = rollout(cuda_model, images, max_attention_memory=budget)
    assert low.dtype == torch.float32
    difference = (low - reference).abs().max().item()
    print(f"{dtype} {'factored' if budget else 'dense'}: max |Δ| {difference:.2e}, map max "
          f"{reference.max().item():.3f}")
    assert difference < AUTOCAST_MAP_TOLERANCE[dtype]


@pytest.mark.parametrize("path", ["fused", "factored", "unfused"])
def test_capture_leaves_the_float32_logits_unchanged(cuda_model, path):
    images = _images().cuda()
    with torch.no_grad():
        plain = cuda_model(images)
    model = copy.deepcopy(cuda_model)
    if path == "unfused":
        for block in model.blocks:
            block.attn.fused_attn = False
    saliency = METHODS["rollout"](model, images, max_attention_memory=1 if path == "factored" else None)
    torch.testing.assert_close(saliency.logits, plain, atol=1e-5, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(model(images), plain, atol=1e-5, rtol=0)  # and the model is itself again


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_capture_under_autocast_moves_the_logits_less_than_autocast_itself(cuda_model, dtype):
    images = _images().cuda()
    with torch.no_grad():
        exact = cuda_model(images)
        with torch.autocast("cuda", dtype=dtype):
            plain = cuda_model(images).float()
    with torch.autocast("cuda", dtype=dtype):
        captured = METHODS["rollout"](cuda_model, images).logits.float()
    autocast_error = (plain - exact).abs().max().item()
    assert (captured - plain).abs().max().item() <= CAPTURE_LOGIT_FACTOR * autocast_error


def test_records_in_accelerator_blocks_match_one_row_blocks(cuda_model):
    images = _images().cuda()
    device = torch.device("cuda")
    assert rows_per_block(1, 10**9, device) == ACCELERATOR_BLOCK_BYTES
    whole, _, _ = record_attention(cuda_model, images, head_fusion=None)
    row_bytes = 2 * 3 * 17 * 4  # batch · heads · tokens · float32: one query row per block
    rows, _, _ = record_attention(cuda_model, images, head_fusion=None, max_attention_memory=row_bytes)
    for a, b in zip(whole, rows):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_out_of_memory_halves_the_batch_and_gives_the_same_maps(capfd):
    """A memory fraction between the peak of half the batch and the whole batch's: one halving, same maps."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224").eval().cuda()
    images = torch.randn(256, 3, 224, 224, generator=torch.Generator().manual_seed(0)).cuda()
    # head max: dense records (12·B·197²·4 bytes, 477 MiB for 256 images) and small blocks, so memory scales with B
    options = {"head_fusion": "max", "max_attention_memory": 8 * 2**20}
    method = METHODS["rollout"]
    reference = torch.cat([method(model, chunk, **options).maps for chunk in images.split(32)])

    def peak(batch: int) -> int:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        method(model, images[:batch], **options)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    whole, half = peak(256), peak(128)
    assert whole > 1.5 * half, f"memory does not scale with the batch ({whole} vs {half} bytes)"
    torch.cuda.empty_cache()
    limit = torch.cuda.memory_reserved() + (whole + half) / 2
    torch.cuda.set_per_process_memory_fraction(limit / torch.cuda.get_device_properties(0).total_memory)
    try:
        saliency = method(model, images, **options)  # the registry halves the batch
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert "vitroll: note: a batch of 256 ran out of memory; retrying as 128 + 128" in capfd.readouterr().err
    torch.testing.assert_close(saliency.maps, reference, atol=1e-6, rtol=1e-5)
    assert all(not block.attn._forward_hooks and not block.attn._forward_pre_hooks for block in model.blocks)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_annotate_on_cuda_writes_the_maps_of_the_cpu_run(tmp_path, cpu_model, cuda_model, precision):
    source = tmp_path / "in"
    source.mkdir()
    rng = np.random.default_rng(0)
    for index in range(5):
        Image.fromarray(rng.integers(0, 256, (70 + 9 * index, 90, 3), dtype=np.uint8)).save(source / f"{index}.png")
    options = AnnotateOptions(batch_size=2, workers=0, resume=False, progress=False)
    on_cpu = annotate(source, tmp_path / "cpu", cpu_model, ExplainSettings(), identity={"model": "t"}, options=options)
    on_gpu = annotate(source, tmp_path / "gpu", cuda_model, ExplainSettings(), identity={"model": "t"},
                      options=AnnotateOptions(batch_size=2, workers=2, resume=False, progress=False,
                                              precision=precision))
    assert (on_cpu.ok, on_gpu.ok, on_gpu.failed) == (5, 5, 0)
    tolerance = {"fp32": 1e-4, "bf16": AUTOCAST_MAP_TOLERANCE[torch.bfloat16],
                 "fp16": AUTOCAST_MAP_TOLERANCE[torch.float16]}[precision]
    for index in range(5):
        cpu_map = np.load(tmp_path / "cpu" / "heatmaps" / f"{index}.png.npy").astype(np.float32)
        gpu_map = np.load(tmp_path / "gpu" / "heatmaps" / f"{index}.png.npy").astype(np.float32)
        # heatmaps are stored as float16: half a unit in the last place of the largest value on top of the tolerance
        assert np.abs(gpu_map - cpu_map).max() <= tolerance + float(np.spacing(np.float16(cpu_map.max())))


def test_rollout_records_dense_on_a_gpu_with_room_where_the_cpu_budget_would_factor(cuda_model, monkeypatch):
    from vitroll.capture import FactoredAttention
    from vitroll.capture import recorder as recorder_module

    monkeypatch.setattr(recorder_module, "DEFAULT_CHUNK_BYTES", 4096)  # below these records: the CPU would factor
    images = _images(batch=8).cuda()
    dense, _, _ = record_attention(cuda_model, images, factored=True)
    factored, _, _ = record_attention(cuda_model, images, factored=True, max_attention_memory=4096)
    assert not any(isinstance(layer, FactoredAttention) for layer in dense)
    assert all(isinstance(layer, FactoredAttention) for layer in factored)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_triton_head_mean_matches_the_torch_path(dtype):
    """Both paths take the same rounded q, k and accumulate in float32 (float32 products in IEEE float32), so they
    differ by summation order only: the interpreter on CPU shows ≤ 1.2e-8 at N = 70; 1e-6 leaves room for N = 197."""
    pytest.importorskip("triton")
    from test_head_mean import log_normalizer_of, strided_factors

    from vitroll.capture.head_mean import head_mean_attention

    q, k = (factor.cuda() for factor in strided_factors(2, 6, 197, 64, dtype, seed=4))
    lse = log_normalizer_of(q, k, 0.125)
    triton_maps = head_mean_attention(q, k, lse, 0.125, use_triton=True)
    torch_maps = head_mean_attention(q, k, lse, 0.125, use_triton=False)
    assert (triton_maps - torch_maps).abs().max().item() < 1e-6


@pytest.mark.parametrize("dtype", [None, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
def test_recording_from_the_fused_kernels_factors_gives_the_blocked_maps(cuda_model, dtype, monkeypatch):
    """The head-mean record from the fused kernel's log-sum-exp (each kernel passing its first-call check) against
    the blocked kernel's record; under autocast both within the autocast tolerance of float32."""
    from vitroll.capture import factored as factored_module
    from vitroll.capture import recorder as recorder_module

    monkeypatch.setattr(factored_module, "_checked_kernels", {})
    images = _images(batch=4).cuda()
    reference = rollout(cuda_model, images)
    with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
        from_factors = rollout(cuda_model, images)
        monkeypatch.setattr(recorder_module, "RECORD_FROM_FACTORS_ON", frozenset())
        blocked = rollout(cuda_model, images)
    assert factored_module._checked_kernels[("cuda", dtype or torch.float32, 64)] is True
    assert all(factored_module._checked_kernels.values())
    tolerance = AUTOCAST_MAP_TOLERANCE[dtype] if dtype else 1e-6
    assert (from_factors - reference).abs().max().item() < tolerance
    assert (blocked - reference).abs().max().item() < tolerance
