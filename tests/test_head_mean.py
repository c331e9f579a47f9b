"""The head-mean record from a layer's factors (vitroll.capture.head_mean) and the recorder path that uses it on
GPUs: the PyTorch path against float64 per-head softmax, the Triton kernel (in Triton's CPU interpreter) against the
PyTorch path, the clean fall-back, the check of a fused kernel's log-sum-exp, and rollout maps equal to the blocked
kernel's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import timm
import torch

from vitroll import rollout
from vitroll.capture import factored as factored_module
from vitroll.capture import head_mean as head_mean_module
from vitroll.capture import recorder as recorder_module
from vitroll.capture.head_mean import head_mean_attention


def strided_factors(batch: int, heads: int, tokens: int, dim: int, dtype: torch.dtype, seed: int = 0):
    """q, k as timm makes them: (B, H, N, D) views into one (B, N, 3, H, D) projection, logits of a few units."""
    generator = torch.Generator().manual_seed(seed)
    qkv = torch.randn(batch, tokens, 3, heads, dim, generator=generator).mul(0.7).to(dtype)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    return q, k


def reference_head_mean(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """mean over heads of softmax(q kᵀ·scale), float64, one head and one image at a time."""
    batch, heads = q.shape[:2]
    out = torch.zeros(batch, q.shape[2], k.shape[2], dtype=torch.float64)
    for image in range(batch):
        for head in range(heads):
            logits = q[image, head].double() @ k[image, head].double().T * scale
            out[image] += torch.softmax(logits, dim=-1) / heads
    return out


def log_normalizer_of(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    return (q.float() @ k.float().transpose(-2, -1) * scale).logsumexp(dim=-1)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-6)])
def test_torch_path_is_the_head_mean_of_the_softmax(dtype, tolerance, monkeypatch):
    monkeypatch.setattr(head_mean_module, "rows_per_block", lambda *_: 7)
    q, k = strided_factors(2, 3, 29, 16, dtype)
    scale = 16 ** -0.5
    maps = head_mean_attention(q, k, log_normalizer_of(q, k, scale), scale, use_triton=False)
    assert maps.shape == (2, 29, 29) and maps.dtype == torch.float32
    reference = reference_head_mean(q, k, scale)  # from the same (rounded) q, k
    assert (maps.double() - reference).abs().max() < tolerance
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 29), atol=1e-5, rtol=0)


def test_torch_path_ignores_autocast():
    q, k = strided_factors(1, 2, 20, 8, torch.float32)
    scale = 0.5
    log_normalizer = log_normalizer_of(q, k, scale)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        maps = head_mean_attention(q, k, log_normalizer, scale, use_triton=False)
    assert (maps.double() - reference_head_mean(q, k, scale)).abs().max() < 1e-6


TRITON_SCRIPT = textwrap.dedent("""
    import torch, sys
    sys.path.insert(0, {tests!r})
    from test_head_mean import strided_factors, log_normalizer_of
    from vitroll.capture.head_mean import head_mean_attention
    worst = {{}}
    for dtype in (torch.float32, torch.float16):
        q, k = strided_factors(2, 3, 70, 24, dtype, seed=3)  # tokens and head size not multiples of the tiles
        scale = 24 ** -0.5
        lse = log_normalizer_of(q, k, scale)
        triton_maps = head_mean_attention(q, k, lse, scale, use_triton=True)
        torch_maps = head_mean_attention(q, k, lse, scale, use_triton=False)
        worst[str(dtype)] = float((triton_maps - torch_maps).abs().max())
    print(worst)
""")


def test_triton_kernel_matches_the_torch_path_in_the_interpreter():
    pytest.importorskip("triton")
    environment = dict(os.environ, TRITON_INTERPRET="1")
    script = TRITON_SCRIPT.format(tests=os.path.dirname(__file__))
    result = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    worst = eval(result.stdout.strip().splitlines()[-1])  # a dict of floats printed by the script above
    # float32: IEEE products, both paths float32 → rounding only; float16 inputs: products of the same half values
    # accumulated in float32 by both, so the same bound.
    assert worst == {"torch.float32": pytest.approx(0, abs=1e-6), "torch.float16": pytest.approx(0, abs=1e-6)}


def test_a_triton_failure_warns_once_and_falls_back(monkeypatch):
    def broken(*_args):
        raise RuntimeError("no kernel image for this device\nmore detail")

    monkeypatch.setattr(head_mean_module, "_head_mean_triton", broken)
    monkeypatch.setattr(head_mean_module, "_triton_failed", False)
    monkeypatch.setattr(head_mean_module, "triton_applies", lambda _q: not head_mean_module._triton_failed)
    q, k = strided_factors(1, 2, 9, 8, torch.float32)
    lse = log_normalizer_of(q, k, 1.0)
    with pytest.warns(RuntimeWarning, match=r"Triton attention-record kernel failed \(RuntimeError: no kernel "
                                            r"image for this device\); using the PyTorch path"):
        maps = head_mean_attention(q, k, lse, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = head_mean_attention(q, k, lse, 1.0)
    torch.testing.assert_close(maps, again)
    assert (maps.double() - reference_head_mean(q, k, 1.0)).abs().max() < 1e-6
    with pytest.raises(RuntimeError, match="no kernel image"):
        head_mean_attention(q, k, lse, 1.0, use_triton=True)


@pytest.fixture
def unchecked_kernels(monkeypatch):
    monkeypatch.setattr(factored_module, "_checked_kernels", {})


def test_a_fused_kernel_whose_log_normalizer_is_off_is_not_used(unchecked_kernels, monkeypatch):
    """A kernel returning log₂-sum-exp (or any ℓ off by more than the tolerance) fails the first-call check: None
    now and on every later call, without calling it again."""
    calls = []

    def base_two(q, k, v, scale):
        calls.append(1)
        logits = q.float() @ k.float().transpose(-2, -1) * scale
        return torch.softmax(logits, -1).to(q.dtype) @ v, logits.logsumexp(-1) / torch.log(torch.tensor(2.0))

    monkeypatch.setattr(factored_module, "_fused_kernel", lambda _q: base_two)
    q, k = strided_factors(1, 2, 12, 8, torch.float32)
    assert factored_module.fused_attention_with_log_normalizer(q, k, k, 0.5) is None
    assert factored_module.fused_attention_with_log_normalizer(q, k, k, 0.5) is None
    assert calls == [1]
    out, lse = factored_module.attention_with_log_normalizer(q, k, k, 0.5)  # the portable kernel serves
    torch.testing.assert_close(lse, log_normalizer_of(q, k, 0.5), atol=1e-5, rtol=0)


def test_a_fused_kernel_that_refuses_a_head_size_is_not_asked_again_for_it(unchecked_kernels, monkeypatch):
    """As CUDA's flash kernel refuses head sizes that are not a multiple of 8: not asked again for that size, still
    used for others."""
    calls = []

    def refusing_odd_sizes(q, k, v, scale):
        calls.append(q.shape[-1])
        if q.shape[-1] % 8:
            raise RuntimeError("No available kernel")
        return factored_module._cpu_flash(q, k, v, scale)

    monkeypatch.setattr(factored_module, "_fused_kernel", lambda _q: refusing_odd_sizes)
    odd, even = strided_factors(1, 2, 12, 12, torch.float32), strided_factors(1, 2, 12, 16, torch.float32)
    assert factored_module.fused_attention_with_log_normalizer(*odd, odd[1], 0.5) is None
    assert factored_module.fused_attention_with_log_normalizer(*odd, odd[1], 0.5) is None
    assert factored_module.fused_attention_with_log_normalizer(*even, even[1], 0.5) is not None
    assert calls == [12, 16]


def test_the_cpu_flash_kernel_passes_its_check(unchecked_kernels):
    q, k = strided_factors(2, 3, 21, 16, torch.float32)
    out, lse = factored_module.fused_attention_with_log_normalizer(q, k, k, 0.25)
    assert factored_module._checked_kernels == {("cpu", torch.float32, 16): True}
    torch.testing.assert_close(lse, log_normalizer_of(q, k, 0.25), atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def model():
    from reference import sharpen_attention

    torch.manual_seed(0)
    return sharpen_attention(timm.create_model("vit_tiny_patch16_224", depth=3, img_size=48), std=0.06).eval()


def test_recording_from_the_factors_gives_the_blocked_maps_and_logits(model, monkeypatch):
    """The GPU record path, run on the CPU: rollout maps and logits as from the blocked kernel; per-head records
    (head_fusion='max') keep the blocked kernel."""
    images = torch.randn(3, 3, 48, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        plain_logits = model(images)
    blocked = {fusion: rollout(model, images, head_fusion=fusion) for fusion in ("mean", "max")}
    records = []
    original = recorder_module.AttentionRecorder._head_mean_record
    monkeypatch.setattr(recorder_module.AttentionRecorder, "_head_mean_record",
                        lambda self, *args: records.append(1) or original(self, *args))
    monkeypatch.setattr(recorder_module, "RECORD_FROM_FACTORS_ON", frozenset({"cpu"}))
    for fusion, expected in blocked.items():
        records.clear()
        maps = rollout(model, images, head_fusion=fusion)
        assert (maps - expected).abs().max() < 1e-6, fusion
        assert len(records) == (3 if fusion == "mean" else 0)
    with torch.no_grad(), recorder_module.AttentionRecorder(model):
        logits = model(images)
    torch.testing.assert_close(logits, plain_logits, atol=1e-5, rtol=0)
