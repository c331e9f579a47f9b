"""Slow, obviously-correct reference implementations used by the tests (float64, per image, explicit loops)."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn


def sharpen_attention(model: nn.Module, std: float = 0.1, seed: int = 0) -> nn.Module:
    """Re-draw every qkv weight with a larger std so random-init attention is peaked, not near-uniform."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("qkv.weight"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return model.eval()


def reference_attention(model: nn.Module, image: torch.Tensor) -> list[np.ndarray]:
    """Per-head attention of every block for ONE image (1, 3, H, W): unfused timm path in float64 → [(H, N, N)]."""
    reference = copy.deepcopy(model).double().eval()
    captured: list[np.ndarray] = []
    for block in reference.blocks:
        block.attn.fused_attn = False
        block.attn.attn_drop.register_forward_hook(lambda _m, _i, out: captured.append(out[0].numpy().copy()))
    with torch.no_grad():
        reference(image.double())
    return captured


def fuse(per_head: np.ndarray, head_fusion: str) -> np.ndarray:
    return {"mean": per_head.mean, "max": per_head.max, "min": per_head.min}[head_fusion](axis=0)


def discard_rows(matrix: np.ndarray, ratio: float, protected: int | None) -> np.ndarray:
    """Row by row: zero every entry <= the k-th smallest (k = int(N·ratio)), never the protected column."""
    out = matrix.copy()
    n = matrix.shape[1]
    k = int(n * ratio)
    if k == 0:
        return out
    for i in range(n):
        candidates = [j for j in range(n) if j != protected]
        values = sorted(matrix[i, j] for j in candidates)
        threshold = values[min(k, len(values)) - 1]
        for j in candidates:
            if matrix[i, j] <= threshold:
                out[i, j] = 0.0
    return out


def reference_rollout(
    per_layer: list[np.ndarray], *, num_prefix: int, grid: tuple[int, int], class_token: bool,
    head_fusion: str = "mean", discard_ratio: float = 0.0, attention_weight: float = 0.5, start_layer: int = 0,
) -> np.ndarray:
    """Full-matrix rollout R = Â_L ··· Â_1 in float64; returns the readout row over patches, shape grid."""
    n = per_layer[0].shape[-1]
    result = np.eye(n)
    for per_head in per_layer[start_layer:]:
        fused = discard_rows(fuse(per_head, head_fusion), discard_ratio, 0 if class_token else None)
        mixed = attention_weight * fused + (1 - attention_weight) * np.eye(n)
        mixed = mixed / mixed.sum(axis=1, keepdims=True)
        result = mixed @ result
    row = result[0] if class_token else result[num_prefix:].mean(axis=0)
    return row[num_prefix:].reshape(grid)
