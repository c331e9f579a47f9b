"""Attention kept as its factors, for the class-token rollout chain at long sequences.

Per head the attention is ``P = softmax(q kᵀ · scale)``, i.e. ``P[i, j] = exp(q_i·k_j·scale − ℓ_i)`` with
``ℓ_i`` the row's log-sum-exp. Keeping ``q``, ``k`` (B, H, N, D) and ``ℓ`` (B, H, N) instead of ``P`` costs
O(N·D) memory per layer instead of O(N²), and the product the rollout chain needs, ``w · P`` for a weight
vector ``w``, is itself an attention pass with the roles of queries and keys swapped::

    (w · P)[j] = Σ_i exp(k_j·q_i·scale + log w_i − ℓ_i) = exp(logsumexp_i(k_j·q_i·scale + c_i)),

    c_i = log w_i − ℓ_i,

which a fused attention kernel computes in its log-sum-exp output without materialising any N×N matrix. The
bias ``c_i`` rides along as one extra head dimension (``[k_j, 1]·[q_i, c_i/scale]``), because an additive mask
costs the CPU kernel twice as much. ``ℓ`` itself comes for free: the recorder swaps the model's own
``scaled_dot_product_attention`` call for :func:`attention_with_log_normalizer`, which returns it.

On CPU both passes use PyTorch's fused flash-attention kernel; elsewhere (or where that operator is missing) a
blocked computation in plain tensor operations (blocks sized by :mod:`vitroll.capture.blocking`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch.overrides import TorchFunctionMode

from vitroll.capture.blocking import rows_per_block


def _cpu_flash_kernel(q: torch.Tensor) -> Optional[Callable[..., tuple[torch.Tensor, torch.Tensor]]]:
    """PyTorch's CPU flash-attention operator, which also returns the log-sum-exp, when it applies to ``q``."""
    if q.device.type != "cpu" or q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return None
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


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
    kernel = _cpu_flash_kernel(q)
    if kernel is not None:
        out, log_normalizer = kernel(q, k, v, 0.0, False, scale=scale)
        return out, log_normalizer.float()
    out = torch.empty_like(q)
    log_normalizer = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    keys_t, values = k.float().transpose(-2, -1), v.float()
    step = rows_per_block(q.shape[0] * q.shape[1] * k.shape[-2] * 4, q.shape[-2], q.device)
    for start in range(0, q.shape[-2], step):
        rows = slice(start, start + step)
        logits = (q[..., rows, :].float() @ keys_t) * scale
        log_normalizer[..., rows] = logits.logsumexp(dim=-1)
        out[..., rows, :] = (torch.exp(logits - log_normalizer[..., rows, None]) @ values).to(out.dtype)
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
        """``weights · mean_h P_h`` for non-negative weights (B, N) over the query tokens → (B, N) over the keys."""
        heads, num_queries = self.queries.shape[1], self.queries.shape[2]
        occupied = (weights > 0).any(dim=0).nonzero().squeeze(1)
        if occupied.numel() * 8 <= num_queries:  # few rows carry weight (a class token's one-hot): read them
            return torch.einsum("bq,bhqn->bn", weights[:, occupied].float(), self.rows(occupied)) / heads
        # c_i = log w_i − ℓ_i, shifted by its maximum so the extra dimension stays small (float32 precision of
        # the logits); zero weights become a tiny one, as −inf would poison the kernel's zero padding
        bias = weights.float().clamp_min(torch.finfo(torch.float32).tiny).log()[:, None, :] - self.log_normalizer
        shift = bias.amax(dim=-1, keepdim=True)
        return torch.exp(self._log_column_sums(bias - shift) + shift).mean(dim=1)

    def _log_column_sums(self, bias: torch.Tensor) -> torch.Tensor:
        """``logsumexp_i(q_i·k_j·scale + bias_i)`` for every key ``j``: bias (B, H, N) → (B, H, M), float32."""
        kernel = _cpu_flash_kernel(bias)
        if kernel is not None:
            as_keys = torch.cat([self.queries.float(), (bias / self.scale).unsqueeze(-1)], dim=-1)
            as_queries = torch.cat([self.keys.float(), bias.new_ones(*self.keys.shape[:-1], 1)], dim=-1)
            return kernel(as_queries, as_keys, torch.zeros_like(as_keys), 0.0, False, scale=self.scale)[1].float()
        batch, heads, num_queries, _ = self.queries.shape
        num_keys = self.keys.shape[-2]
        sums = torch.empty(batch, heads, num_keys, dtype=torch.float32, device=bias.device)
        queries_t = self.queries.float().transpose(-2, -1)
        step = rows_per_block(batch * heads * num_queries * 4, num_keys, bias.device)
        for start in range(0, num_keys, step):
            keys = slice(start, start + step)
            logits = (self.keys[..., keys, :].float() @ queries_t) * self.scale + bias[..., None, :]
            sums[..., keys] = logits.logsumexp(dim=-1)
        return sums


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
