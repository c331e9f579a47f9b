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
  need that), and costs the unfused forward.

Adding a module type is one :class:`AttentionReadout` entry in :data:`READOUTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch import nn

from vitroll.errors import UnsupportedModelError


@dataclass(frozen=True)
class AttentionReadout:
    """Capture recipe for one attention module type.

    Attributes
    ----------
    module_type : type
        The attention class (subclasses match too, unless registered themselves).
    probs_module : str
        Submodule whose input and output are the softmax probabilities (B, H, N, N) on the unfused path.
    fused_flag : str
        Attribute that selects the fused kernel; set to False while recording on the unfused path.
    query_key_modules : (str, str) or None
        Submodules whose outputs are the final queries and keys (B, H, N, D), enabling the query/key path.
    scale_attr : str
        Attribute holding the logit scale (usually ``head_dim ** -0.5``).
    """

    module_type: type
    probs_module: str = "attn_drop"
    fused_flag: str = "fused_attn"
    query_key_modules: Optional[tuple[str, str]] = None
    scale_attr: str = "scale"


def _default_readouts() -> list[AttentionReadout]:
    from timm.layers import Attention

    return [AttentionReadout(Attention, query_key_modules=("q_norm", "k_norm"))]


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
