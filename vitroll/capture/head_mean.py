"""The head-mean attention map of one layer from its factors: ``mean_h exp(q_h k_hᵀ·scale − ℓ_h)`` → (B, Q, N).

On a GPU the model's own fused attention kernel is fast and returns the row log-sum-exp ``ℓ`` beside its output
(:func:`~vitroll.capture.factored.attention_with_log_normalizer`), so the record needs only the logits again, once per
head, reduced over the heads: one read of ``q`` and ``k`` and one write of the (B, Q, N) map. The Triton kernel
here does exactly that, each tile of the map summed over the heads in registers, the products on tensor cores with
float32 accumulation (for float32 inputs in IEEE float32); the per-head (B, H, Q, N) probabilities that a PyTorch
implementation materialises, with their conversions and memory traffic, never exist. Without Triton, or if its
kernel fails to build, :func:`head_mean_attention` computes the same map in PyTorch, in query blocks.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import torch

from vitroll.capture.blocking import rows_per_block
from vitroll.capture.precision import without_autocast

try:
    import triton
    import triton.language as tl
except ImportError:  # Triton ships with CUDA builds of PyTorch on Linux; elsewhere the PyTorch path serves
    triton = None

_triton_failed = False
"""Set when the Triton kernel failed to build or launch once: the PyTorch path serves from then on."""

BLOCK_QUERIES = 64
BLOCK_KEYS = 64

if triton is not None:

    @triton.jit
    def _head_mean_kernel(
        q_ptr, k_ptr, lse_ptr, out_ptr,
        heads, num_queries, num_keys, head_dim, scale,
        q_stride_b, q_stride_h, q_stride_n, q_stride_d,
        k_stride_b, k_stride_h, k_stride_n, k_stride_d,
        lse_stride_b, lse_stride_h, lse_stride_n,
        out_stride_b, out_stride_q, out_stride_n,
        BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, IEEE: tl.constexpr,
    ):
        """One (BLOCK_Q, BLOCK_N) tile of one image's map: Σ_h exp(q_h k_hᵀ·scale − ℓ_h) / heads."""
        query_block, key_block, image = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        queries = query_block * BLOCK_Q + tl.arange(0, BLOCK_Q)
        keys = key_block * BLOCK_N + tl.arange(0, BLOCK_N)
        dims = tl.arange(0, BLOCK_D)
        query_ok, key_ok, dim_ok = queries < num_queries, keys < num_keys, dims < head_dim
        total = tl.zeros((BLOCK_Q, BLOCK_N), dtype=tl.float32)
        for head in range(0, heads):
            q = tl.load(q_ptr + image * q_stride_b + head * q_stride_h + queries[:, None] * q_stride_n
                        + dims[None, :] * q_stride_d, mask=query_ok[:, None] & dim_ok[None, :], other=0.0)
            k = tl.load(k_ptr + image * k_stride_b + head * k_stride_h + keys[:, None] * k_stride_n
                        + dims[None, :] * k_stride_d, mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
            lse = tl.load(lse_ptr + image * lse_stride_b + head * lse_stride_h + queries * lse_stride_n,
                          mask=query_ok, other=0.0)
            if IEEE:
                logits = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                logits = tl.dot(q, tl.trans(k))
            total += tl.exp(logits * scale - lse[:, None])
        tl.store(out_ptr + image * out_stride_b + queries[:, None] * out_stride_q + keys[None, :] * out_stride_n,
                 total / heads, mask=query_ok[:, None] & key_ok[None, :])


def triton_applies(device: torch.device) -> bool:
    """Whether :func:`head_mean_attention` runs the Triton kernel for factors on ``device``: a CUDA device, Triton
    importable, and the kernel not failed before in this process."""
    return triton is not None and not _triton_failed and device.type == "cuda"


def head_mean_attention(
    queries: torch.Tensor, keys: torch.Tensor, log_normalizer: torch.Tensor, scale: float, *,
    use_triton: Optional[bool] = None,
) -> torch.Tensor:
    """Head-mean softmax attention of one layer from its factors.

    Parameters
    ----------
    queries, keys : Tensor, shapes (B, H, Q, D) and (B, H, N, D)
        In any floating dtype and layout (timm's strided views of its fused qkv projection included).
    log_normalizer : Tensor, shape (B, H, Q)
        Row log-sum-exp of ``queries · keysᵀ · scale``, as the fused kernels return it.
    scale : float
    use_triton : bool, optional
        None (default): the Triton kernel where :func:`triton_applies`; False: the PyTorch path; True: Triton or
        raise (for tests and benchmarks).

    Returns
    -------
    Tensor, shape (B, Q, N), float32 — ``mean_h exp(q_h k_hᵀ·scale − ℓ_h)``; each row sums to 1 up to rounding.
    """
    global _triton_failed
    if use_triton or (use_triton is None and triton_applies(queries.device)):
        try:
            return _head_mean_triton(queries, keys, log_normalizer, scale)
        except Exception as error:  # noqa: BLE001 — a kernel that cannot build here must not stop the explanation
            if use_triton:
                raise
            _triton_failed = True
            warnings.warn(f"vitroll: the Triton attention-record kernel failed ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''}); using the PyTorch path",
                          RuntimeWarning, stacklevel=2)
    return _head_mean_torch(queries, keys, log_normalizer, scale)


def _head_mean_triton(queries: torch.Tensor, keys: torch.Tensor, log_normalizer: torch.Tensor,
                      scale: float) -> torch.Tensor:
    if triton is None:
        raise RuntimeError("Triton is not installed")
    batch, heads, num_queries, head_dim = queries.shape
    num_keys = keys.shape[-2]
    if keys.dtype != queries.dtype:
        keys = keys.to(queries.dtype)
    log_normalizer = log_normalizer.float()
    out = torch.empty(batch, num_queries, num_keys, dtype=torch.float32, device=queries.device)
    grid = (math.ceil(num_queries / BLOCK_QUERIES), math.ceil(num_keys / BLOCK_KEYS), batch)
    _head_mean_kernel[grid](
        queries, keys, log_normalizer, out, heads, num_queries, num_keys, head_dim, float(scale),
        *queries.stride(), *keys.stride(), *log_normalizer.stride(), *out.stride(),
        BLOCK_Q=BLOCK_QUERIES, BLOCK_N=BLOCK_KEYS, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        IEEE=queries.dtype == torch.float32,
    )
    return out


def _head_mean_torch(queries: torch.Tensor, keys: torch.Tensor, log_normalizer: torch.Tensor,
                     scale: float) -> torch.Tensor:
    batch, heads, num_queries, _ = queries.shape
    num_keys = keys.shape[-2]
    out = torch.empty(batch, num_queries, num_keys, dtype=torch.float32, device=queries.device)
    keys_t = keys.float().transpose(-2, -1)
    step = rows_per_block(batch * heads * num_keys * 4, num_queries, queries.device)
    with without_autocast(queries.device):
        for start in range(0, num_queries, step):
            rows = slice(start, start + step)
            logits = (queries[:, :, rows].float() @ keys_t).mul_(scale)
            out[:, rows] = logits.sub_(log_normalizer[:, :, rows, None].float()).exp_().mean(dim=1)
    return out
