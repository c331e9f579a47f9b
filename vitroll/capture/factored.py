"""Attention kept as its factors, for the class-token rollout chain at long sequences.

Per head the attention is ``P = softmax(q kᵀ · scale)``, i.e. ``P[i, j] = exp(q_i·k_j·scale − ℓ_i)`` with
``ℓ_i`` the row's log-sum-exp. Keeping ``q``, ``k`` (B, H, N, D) and ``ℓ`` (B, H, N) instead of ``P`` costs
O(N·D) memory per layer instead of O(N²). ``ℓ`` comes for free: the recorder swaps the model's own
``scaled_dot_product_attention`` call for :func:`attention_with_log_normalizer`, which returns it (from PyTorch's
fused kernels: flash attention on CPU and for half types on CUDA, memory-efficient attention for float32 on CUDA).
The product the rollout chain needs, ``w · P`` for a weight vector ``w``, is then one matrix product per query
block, ``exp(q kᵀ·scale − ℓ)``, whose entries are probabilities (≤ 1, so no overflow and no second normalisation),
reduced against ``w`` while the block is in cache; query rows with zero weight are skipped. Blocks are sized by
:mod:`vitroll.capture.blocking`.

The sums are formed block by block rather than read from the log-sum-exp of a second fused kernel pass with queries
and keys swapped (the weights riding along as an extra head dimension), because the blocked product over the rows
that carry weight costs less than one pass of the model's fused attention kernel, and that second pass costs more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch.overrides import TorchFunctionMode

from vitroll.capture.blocking import rows_per_block
from vitroll.capture.precision import without_autocast


LOG_NORMALIZER_CHECK_TOLERANCE = 1e-2
"""How far a fused kernel's log-sum-exp may be from one computed here, on its first call per device and dtype."""

_checked_kernels: dict[tuple[str, torch.dtype, int], bool] = {}
"""Per (device type, dtype, head size): whether PyTorch's fused kernel served and gave the log-sum-exp this module
expects (CUDA's flash kernel refuses head sizes that are not a multiple of 8, for one)."""


def _cpu_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, scale=scale)[:2]


def _cuda_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False, scale=scale)[:2]


def _cuda_memory_efficient(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    out, log_normalizer = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True, 0.0, False, scale=scale)[:2]
    return out, log_normalizer[..., :q.shape[-2]]  # some versions pad the rows to a multiple of 32


def _fused_kernel(q: torch.Tensor) -> Optional[Callable[..., tuple[torch.Tensor, torch.Tensor]]]:
    """PyTorch's fused attention operator for ``q`` that also returns the log-sum-exp: flash attention on CPU (float32
    and half types) and on CUDA (half types), memory-efficient attention on CUDA for float32; None elsewhere."""
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    if q.device.type == "cpu":
        return _cpu_flash if hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu") else None
    if q.device.type == "cuda":
        return _cuda_memory_efficient if q.dtype == torch.float32 else _cuda_flash
    return None


def fused_attention_with_log_normalizer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               scale: float) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """The fused kernel's output and float32 log-sum-exp, or None where no fused kernel applies or serves.

    The first call per device type, dtype and head size checks the log-sum-exp of the first query row against one
    computed here: a kernel that refuses the input, or whose log-sum-exp is not the natural-log one over the keys, is
    not used again in this process."""
    kernel = _fused_kernel(q)
    key = (q.device.type, q.dtype, q.shape[-1])
    if kernel is None or _checked_kernels.get(key) is False:
        return None
    try:
        out, log_normalizer = kernel(q, k, v, scale)
    except RuntimeError:  # no kernel for this head size, layout or device generation
        _checked_kernels[key] = False
        return None
    log_normalizer = log_normalizer.float()
    if key not in _checked_kernels:
        with without_autocast(q.device):
            expected = ((q[:1, :, :1].float() @ k[:1].float().transpose(-2, -1)) * scale).logsumexp(dim=-1)
        _checked_kernels[key] = bool(
            (expected - log_normalizer[:1, :, :1]).abs().max() <= LOG_NORMALIZER_CHECK_TOLERANCE)
        if not _checked_kernels[key]:
            return None
    return out, log_normalizer


def attention_with_log_normalizer(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention and its row log-normalisers.

    Parameters
    ----------
    q, k, v : Tensor, shapes (B, H, N, D), (B, H, M, D), (B, H, M, D)
    scale : float
        Logit scale (``D ** -0.5`` in timm).

    Returns
    -------
    out : Tensor, shape (B, H, N, D) — ``softmax(q kᵀ·scale) v``, in ``q``'s dtype
    log_normalizer : Tensor, shape (B, H, N), float32 — ``logsumexp(q kᵀ·scale)`` over the keys
    """
    fused = fused_attention_with_log_normalizer(q, k, v, scale)
    if fused is not None:
        return fused
    out = torch.empty_like(q)
    log_normalizer = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    # at least float32, also under the model's autocast (FactoredAttention recomputes the logits in float32 against
    # ℓ); a float64 model's output stays float64, as its own kernel would give it
    precision = torch.promote_types(q.dtype, torch.float32)
    keys_t, values = k.to(precision).transpose(-2, -1), v.to(precision)
    step = rows_per_block(q.shape[0] * q.shape[1] * k.shape[-2] * precision.itemsize, q.shape[-2], q.device)
    with without_autocast(q.device):
        for start in range(0, q.shape[-2], step):
            rows = slice(start, start + step)
            logits = (q[..., rows, :].to(precision) @ keys_t) * scale
            row_log_normalizer = logits.logsumexp(dim=-1)
            log_normalizer[..., rows] = row_log_normalizer
            out[..., rows, :] = (torch.exp(logits - row_log_normalizer[..., None]) @ values).to(out.dtype)
    return out, log_normalizer


@dataclass(frozen=True)
class FactoredAttention:
    """One layer's softmax attention, ``P_h = exp(q kᵀ·scale − ℓ)``, kept as its factors; heads fused by mean.

    Attributes
    ----------
    queries, keys : Tensor, shape (B, H, N, D)
    log_normalizer : Tensor, shape (B, H, N), float32 — row log-sum-exp of the logits
    scale : float
    """

    queries: torch.Tensor
    keys: torch.Tensor
    log_normalizer: torch.Tensor
    scale: float

    @property
    def shape(self) -> torch.Size:
        """(B, N, N): the shape of the head-mean attention this stands for."""
        batch, _, tokens, _ = self.queries.shape
        return torch.Size((batch, tokens, self.keys.shape[-2]))

    @property
    def device(self) -> torch.device:
        return self.queries.device

    def rows(self, rows: slice | torch.Tensor) -> torch.Tensor:
        """Per-head probabilities of the query rows ``rows`` (a slice or indices), (B, H, Q, N), float32."""
        logits = (self.queries[..., rows, :].float() @ self.keys.float().transpose(-2, -1)) * self.scale
        return torch.exp(logits - self.log_normalizer[..., rows, None])

    def left_multiply(self, weights: torch.Tensor) -> torch.Tensor:
        """``weights · mean_h P_h`` for weights (B, N) over the query tokens → (B, M) over the keys, float32.

        Per image and head, in blocks of the query rows that carry weight (a class token's one-hot reads one row).
        """
        batch, heads, num_queries, _ = self.queries.shape
        num_keys = self.keys.shape[-2]
        product = torch.zeros(batch, num_keys, dtype=torch.float32, device=self.device)
        step = rows_per_block(num_keys * 4, num_queries, self.device)
        for image in range(batch):
            occupied = weights[image].nonzero().squeeze(1)
            for head in range(heads):
                queries, keys_t = self.queries[image, head].float(), self.keys[image, head].float().T.contiguous()
                log_normalizer = self.log_normalizer[image, head]
                for block in occupied.split(step):
                    logits = torch.addmm(log_normalizer[block, None], queries[block], keys_t,
                                         beta=-1, alpha=self.scale)
                    product[image] += weights[image, block].float() @ logits.exp_()
        return product / heads


class AttentionKernelSwap(TorchFunctionMode):
    """While active and ``target`` is set, ``F.scaled_dot_product_attention`` calls go to ``target`` instead.

    The recorder activates it only around the forward of an attention module it records, so the model's own kernel
    call is replaced by one that also records the layer. When two recorders watch the same model, both swaps are
    active: the inner one records, then hands the call on to the outer one, whose output is the same.
    """

    _active = 0

    def __init__(self) -> None:
        super().__init__()
        self.target: Optional[Callable[..., torch.Tensor]] = None

    def __enter__(self) -> "AttentionKernelSwap":
        AttentionKernelSwap._active += 1
        return super().__enter__()

    def __exit__(self, *exc_info: object) -> None:
        AttentionKernelSwap._active -= 1
        super().__exit__(*exc_info)

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        if self.target is not None and func is torch.nn.functional.scaled_dot_product_attention:
            out = self.target(*args, **kwargs)
            # the mode is off the stack while it handles a call, so func reaches the outer swap
            return func(*args, **kwargs) if AttentionKernelSwap._active > 1 else out
        return func(*args, **kwargs)
