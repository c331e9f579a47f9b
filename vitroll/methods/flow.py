"""Attention flow (Abnar & Zuidema 2020): how much of each input token can reach the decision through the
layered attention graph, as a maximum flow.

Nodes are the tokens at every depth, (L + 1)·N of them; layer ``l`` adds an edge from token ``j`` at depth
``l − 1`` to token ``i`` at depth ``l`` with capacity ``Â_l[i, j]``, where ``Â = rownorm(α·A + (1−α)·I)``
is the head-fused attention with the residual, as in rollout. A sink collects the last depth's tokens with
the weights of the decision row (the class token, or the patch mean). A patch's value is the maximum flow
from its input node to the sink.

Cost: one max-flow problem per patch per image on a graph with L·N² edges, roughly O(L·N³) per image — it
grows a thousand times faster than rollout. Measured with ``scripts/bench_flow.py`` on 2 CPU cores
(12-layer vit_tiny, one image): N = 65 tokens 0.17 s, 101 0.73 s, 145 2.4 s, 197 5.7 s with scipy's Dinic
solver; networkx took 353 s at N = 145. By the same growth N = 577 (384 px) would take minutes per image, so
inputs above ``max_tokens`` (default 257: a 224-px image at patch 14) are refused; raise it knowingly.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch import nn

from vitroll.capture import TokenLayout
from vitroll.capture.fusion import HeadFusion
from vitroll.errors import InputValueError, OptionValueError
from vitroll.methods.inputs import Inputs
from vitroll.methods.base import Saliency, record_attention
from vitroll.methods.registry import register_method
from vitroll.methods.rollout import check_attention_weight, with_residual
from vitroll.wording import method_option

Solver = Literal["scipy", "networkx"]

DEFAULT_MAX_TOKENS = 257
_CAPACITY_SCALE = 2**24
"""scipy's solver needs integer capacities: ``round(Â · 2²⁴)`` keeps each edge within 3e-8 of its value."""


def residual_attention(attention: torch.Tensor, attention_weight: float) -> np.ndarray:
    """``rownorm(α·A + (1−α)·I)`` for one image's head-fused attention (N, N), as float64 NumPy; a row of zeros stays
    zero (:func:`~vitroll.methods.rollout.divided_or_zero`)."""
    return with_residual(attention.double().cpu(), attention_weight).numpy()


def flow_edges(layers: list[np.ndarray], sink_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Edges of the layered flow graph: (tails, heads, capacities, sink node).

    Node ``d·N + t`` is token ``t`` at depth ``d`` (depth 0 = the input); the sink is node ``(L + 1)·N``.
    """
    num_tokens = layers[0].shape[0]
    tails, heads, capacities = [], [], []
    queries, keys = np.meshgrid(np.arange(num_tokens), np.arange(num_tokens), indexing="ij")
    for depth, matrix in enumerate(layers, start=1):
        tails.append((depth - 1) * num_tokens + keys.ravel())
        heads.append(depth * num_tokens + queries.ravel())
        capacities.append(matrix.ravel())
    sink = (len(layers) + 1) * num_tokens
    top = len(layers) * num_tokens + np.arange(num_tokens)
    tails.append(top)
    heads.append(np.full(num_tokens, sink))
    capacities.append(sink_weights)
    return np.concatenate(tails), np.concatenate(heads), np.concatenate(capacities), sink


def _flows_scipy(tails, heads, capacities, sink, sources) -> np.ndarray:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    keep = capacities > 0
    integer = np.round(capacities[keep] * _CAPACITY_SCALE).astype(np.int32)
    graph = csr_matrix((integer, (tails[keep], heads[keep])), shape=(sink + 1, sink + 1))
    return np.array([maximum_flow(graph, int(s), sink).flow_value for s in sources]) / _CAPACITY_SCALE


def _flows_networkx(tails, heads, capacities, sink, sources) -> np.ndarray:
    import networkx as nx

    graph = nx.DiGraph()
    for tail, head, capacity in zip(tails.tolist(), heads.tolist(), capacities.tolist()):
        if capacity > 0:
            graph.add_edge(tail, head, capacity=capacity)
    return np.array([nx.maximum_flow_value(graph, int(s), sink) if s in graph else 0.0 for s in sources])


def flow_values(attentions: list[torch.Tensor], layout: TokenLayout, *, attention_weight: float = 0.5,
                solver: Solver = "scipy") -> torch.Tensor:
    """Maximum flow from every patch token to the decision, per image.

    Parameters
    ----------
    attentions : list of Tensor, each (B, N, N)
        Head-fused attention per layer, forward order.

    Returns
    -------
    Tensor, shape (B, N), float32 — zero on prefix tokens; NaN on every patch of an image whose attention is not
    finite (as rollout gives), where the solvers, which skip such edges, would report no flow at all.
    """
    solve = {"scipy": _flows_scipy, "networkx": _flows_networkx}[solver]
    batch, num_tokens = attentions[0].shape[0], attentions[0].shape[-1]
    readout = layout.readout_vector(device=torch.device("cpu"), dtype=torch.float64).numpy()
    sources = np.arange(layout.num_prefix_tokens, num_tokens)
    values = torch.zeros(batch, num_tokens)
    for b in range(batch):
        layers = [residual_attention(a[b], attention_weight) for a in attentions]
        if not all(np.isfinite(layer).all() for layer in layers):
            values[b, sources] = float("nan")
            continue
        sink_weights = readout[b] if readout.ndim == 2 else readout
        values[b, sources] = torch.from_numpy(solve(*flow_edges(layers, sink_weights), sources)).float()
    return values


@register_method("flow")
def flow(
    model: nn.Module,
    inputs: Inputs,
    *,
    head_fusion: HeadFusion = "mean",
    attention_weight: float = 0.5,
    solver: Solver = "scipy",
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> Saliency:
    """Attention-flow maps (B, h, w), float32 on the model's device. Slow: one max-flow problem per patch; see the
    module docstring.

    Parameters
    ----------
    head_fusion : {"mean", "max", "min"}
        How each layer's heads are fused into the capacities of its edges.
    attention_weight : float in (0, 1]
        ``α`` in ``Â = rownorm(α·A + (1−α)·I)``, the residual's share as in :func:`rollout`.
    solver : {"scipy", "networkx"}
        scipy's Dinic solver on capacities rounded to 2⁻²⁴, or networkx on the exact float capacities
        (the small-graph reference; far slower).
    max_tokens : int
        Refuse inputs with more tokens than this (default 257; see the measured cost above).
    """
    check_attention_weight(attention_weight)
    attentions, layout, logits = record_attention(model, inputs, head_fusion=head_fusion)
    if layout.num_tokens > max_tokens:
        # images of one model have one size: the option's mistake; texts differ, and only the long ones are refused
        refusal = OptionValueError if layout.grid is not None else InputValueError
        raise refusal(
            f"attention flow on {layout.num_tokens} tokens is impractical (one max-flow per patch over "
            f"{len(attentions)}·{layout.num_tokens}² edges); use a smaller input or pass "
            f"{method_option('max_tokens', layout.num_tokens)} knowingly"
        )
    values = flow_values([a.cpu() for a in attentions], layout, attention_weight=attention_weight, solver=solver)
    return Saliency(layout.patch_values(values).to(attentions[0].device), logits)
