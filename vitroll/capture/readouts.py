"""Attention readouts: how to get softmax probabilities out of one type of attention module.

Each registered module type says which ways it supports:

* **kernel swap** – for a module on timm's fused ``scaled_dot_product_attention`` (its ``fused_attn`` flag on), the
  recorder replaces that one call, while the module runs, by its own kernel, which returns the same output and
  records the probabilities on the way (:mod:`vitroll.capture.recorder`). Rotary embeddings and relative position
  bias need nothing special: the kernel receives the final queries, keys and mask.
* **unfused** – for a module already on its unfused path, or when gradients must flow through the probabilities
  (gradient methods), hook the dropout module that receives the probabilities (``softmax → attn_drop → @ v``),
  switching ``fused_attn`` off while recording. CaiT's talking heads, which mix logits across heads, only have
  this path.
* **query/key** – for a module without a probabilities module (the attention-pooling head), hook the modules
  whose outputs are the final queries and keys (B, H, N, D) and compute ``softmax(q kᵀ · scale)`` beside the
  model, in query blocks.
* **custom** – for a module none of these fit (``nn.MultiheadAttention``, a user's own module), an ``attach``
  function hooks the module itself and hands its probabilities to an :class:`AttentionSink`.

A module type is added with one :class:`AttentionReadout` (``register_family(..., readout=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Protocol

import torch
from torch import nn

from vitroll.errors import UnsupportedModelError
from vitroll.registry import Registry


class AttentionSink(Protocol):
    """Where a custom readout (:attr:`AttentionReadout.attach`) delivers one layer's attention."""

    keep_graph: bool
    """True when gradient methods need the probabilities that the model's output was computed from, in the graph."""

    def record(self, shape: tuple[int, int, int, int], rows: Callable[[slice], torch.Tensor],
               device: torch.device) -> None:
        """Record attention of ``shape`` (B, H, Q, N) given as ``rows(query_slice) -> (B, H, q, N)`` probabilities,
        asked for in query blocks within the recorder's memory budget and fused over heads as it was asked to."""

    def record_graph(self, probabilities: torch.Tensor) -> None:
        """Record the probabilities (B, H, Q, N) that the module's output was computed from (``keep_graph``)."""

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Optional[torch.Tensor],
                  scale: float) -> torch.Tensor:
        """Compute ``softmax(q kᵀ · scale + mask) v`` → (B, H, Q, Dv) for queries (B, H, Q, D) and keys and values
        (B, H, N, D), recording the probabilities in the same pass: the recorder's own kernel (blocked within its
        memory budget, or factored), or with ``keep_graph`` the probabilities in the graph. ``attn_mask`` is
        boolean (allowed positions) or additive, broadcastable to (B, H, Q, N)."""


@dataclass(frozen=True)
class AttentionReadout:
    """Capture recipe for one attention module type.

    Attributes
    ----------
    module_type : type or str
        The attention class (subclasses match too, unless registered themselves), or its dotted path
        ``"package.module.Class"``, so that registering does not import the package.
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
        take them in another layout), not its output. It must only rearrange elements (a permutation or
        reshape), so that it also turns the gradient with respect to that input into the probabilities' gradient.
    attach : callable, optional
        A custom readout: ``attach(module, sink) -> detach`` hooks ``module`` so that each forward call hands its
        probabilities to ``sink`` (:class:`AttentionSink`) without changing the module's output; ``detach()``
        undoes every change. When set, the other fields are not used.
    """

    module_type: type | str
    probs_module: Optional[str] = "attn_drop"
    fused_flag: Optional[str] = "fused_attn"
    query_key_modules: Optional[tuple[str, str]] = None
    scale_attr: str = "scale"
    probs_from_input: Optional[Callable[[torch.Tensor], torch.Tensor]] = None
    attach: Optional[Callable[[nn.Module, AttentionSink], Callable[[], None]]] = None


READOUTS: Registry[AttentionReadout] = Registry()
"""Registered readouts, the most recent first (timm's attention types in :mod:`vitroll.adapters.timm`)."""


def register_readout(readout: AttentionReadout) -> None:
    """Add ``readout``, replacing one registered for the same module type; it is found before those it inherits."""
    READOUTS[:] = [readout] + [known for known in READOUTS if known.module_type != readout.module_type]


def _names(module_type: type) -> tuple[type, str]:
    """The ways a readout may name ``module_type``: the class, or its dotted path."""
    return module_type, f"{module_type.__module__}.{module_type.__qualname__}"


def readout_for(module: nn.Module) -> AttentionReadout:
    """The most specific registered readout for ``module``: of its own type, else of its nearest base class."""
    for module_type in type(module).__mro__:
        for readout in READOUTS:
            if readout.module_type in _names(module_type):
                return readout
    name = type(module).__name__
    known = ", ".join(sorted({(r.module_type if isinstance(r.module_type, str) else r.module_type.__name__)
                              .rsplit(".", 1)[-1] for r in READOUTS}))
    raise UnsupportedModelError(
        f"attention module {name} has no registered readout: if it is the attention of a layer, say how to read it "
        f"with register_family(..., readout=vitroll.AttentionReadout({name}, probs_module=NAME, fused_flag=None)), "
        "NAME its submodule whose output is the softmax probabilities (B, H, N, N), or for a module that calls "
        f"F.scaled_dot_product_attention, AttentionReadout({name}, attach=vitroll.capture.attach_sdpa_call); "
        f"else attention_modules lists other modules than the attention ones (types read: {known})"
    )


def check_readout(module: nn.Module, readout: AttentionReadout) -> None:
    """Refuse a readout whose flag or submodules ``module`` does not have, naming the field to correct.

    Raises
    ------
    UnsupportedModelError
        In one line that names the attribute or submodule missing and the ones the module has.
    """
    name = type(module).__name__
    if readout.fused_flag is not None and not hasattr(module, readout.fused_flag):
        raise UnsupportedModelError(
            f"AttentionReadout({name}, fused_flag={readout.fused_flag!r}): {name} has no attribute "
            f"{readout.fused_flag!r}; give fused_flag=None for a module without a fused path")
    submodules = dict(module.named_modules())
    for field, value in [("probs_module", readout.probs_module), ("query_key_modules", readout.query_key_modules)]:
        for path in value if isinstance(value, tuple) else [value]:
            if path is not None and path not in submodules:
                raise UnsupportedModelError(
                    f"AttentionReadout({name}, {field}={value!r}): {name} has no submodule {path!r}; its submodules: "
                    f"{', '.join(key for key in submodules if key) or 'none'}")
