"""Attention readouts: how to get softmax probabilities out of one type of attention module.

Two ways exist, and each registered module type says which it supports:

* **query/key** – hook the modules whose outputs are the final queries and keys (B, H, N, D) and
  compute ``softmax(q kᵀ · scale)`` beside the model. The model keeps its fused
  ``scaled_dot_product_attention`` forward, so its output is bit-for-bit unchanged, and the probabilities
  can be computed in query blocks (bounded memory). Valid only when nothing is applied between those
  modules and the softmax (no rotary embedding, no bias inside the softmax).
* **unfused** – switch the module's ``fused_attn`` flag off while recording and hook the dropout module
  that receives the probabilities. Works for any timm attention that keeps the classic
  ``softmax → attn_drop → @ v`` path, keeps the probabilities in the autograd graph (gradient methods
  need that), and costs the unfused forward. Required whenever something sits between the query/key
  projections and the softmax: rotary embeddings (EVA, ``AttentionRope``), relative position bias (BEiT),
  head mixing of the logits (CaiT's talking heads).

Adding a module type is one :class:`AttentionReadout` entry in :data:`READOUTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from vitroll.errors import UnsupportedModelError


@dataclass(frozen=True)
class AttentionReadout:
    """Capture recipe for one attention module type.

    Attributes
    ----------
    module_type : type
        The attention class (subclasses match too, unless registered themselves).
    probs_module : str or None
        Submodule whose output is the softmax probabilities (B, H, Q, N) on the unfused path; None when the
        module has no such submodule (then only the query/key path exists).
    fused_flag : str or None
        Attribute that selects the fused kernel; set to False while recording on the unfused path. None for
        modules that are always unfused.
    query_key_modules : (str, str) or None
        Submodules whose outputs are the final queries and keys (B, H, N, D), enabling the query/key path.
    scale_attr : str
        Attribute holding the logit scale (usually ``head_dim ** -0.5``).
    probs_from_input : callable, optional
        When set, the probabilities are this function of the *input* of ``probs_module`` (for modules that
        take them in another layout), not its output.
    """

    module_type: type
    probs_module: Optional[str] = "attn_drop"
    fused_flag: Optional[str] = "fused_attn"
    query_key_modules: Optional[tuple[str, str]] = None
    scale_attr: str = "scale"
    probs_from_input: Optional[Callable[[torch.Tensor], torch.Tensor]] = None


def _heads_last_to_first(probs: torch.Tensor) -> torch.Tensor:
    """(B, Q, N, H) → (B, H, Q, N)."""
    return probs.permute(0, 3, 1, 2)


def _default_readouts() -> list[AttentionReadout]:
    from timm.layers import Attention, AttentionPoolLatent, AttentionRope
    from timm.models.beit import Attention as BeitAttention
    from timm.models.cait import ClassAttn, TalkingHeadAttn
    from timm.models.eva import EvaAttention

    return [
        AttentionReadout(Attention, query_key_modules=("q_norm", "k_norm")),
        # the pooling query's attention: q_norm/k_norm feed the softmax directly; no dropout module to hook
        AttentionReadout(AttentionPoolLatent, probs_module=None, query_key_modules=("q_norm", "k_norm")),
        AttentionReadout(AttentionRope),  # rotary embedding between q/k and the softmax
        AttentionReadout(EvaAttention),  # rotary embedding between q/k and the softmax
        AttentionReadout(BeitAttention),  # relative position bias inside the softmax
        AttentionReadout(ClassAttn),  # CaiT class attention: one query row (the class token)
        # talking heads: logits mixed across heads before the softmax, probabilities mixed after it; the
        # softmax output is the input of proj_w, heads last; there is no fused kernel
        AttentionReadout(TalkingHeadAttn, probs_module="proj_w", fused_flag=None,
                         probs_from_input=_heads_last_to_first),
    ]


READOUTS: list[AttentionReadout] = _default_readouts()


def readout_for(module: nn.Module) -> AttentionReadout:
    """The most specific registered readout for ``module`` (exact type first, then by inheritance)."""
    for readout in READOUTS:
        if type(module) is readout.module_type:
            return readout
    for readout in READOUTS:
        if isinstance(module, readout.module_type):
            return readout
    known = ", ".join(r.module_type.__name__ for r in READOUTS)
    raise UnsupportedModelError(
        f"attention module {type(module).__name__} has no registered readout (known: {known})"
    )
