"""Slow, obviously-correct reference implementations used by the tests (float64, per image, explicit loops)."""

from __future__ import annotations

import copy
import itertools
import math
from fractions import Fraction
from typing import Callable

import numpy as np
import timm
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


def reference_case(name: str, kwargs: dict, size: tuple[int, int], batch: int
                   ) -> tuple[nn.Module, torch.Tensor, list[list[np.ndarray]]]:
    """A sharpened random-init timm model, ``batch`` random images (B, 3, H, W) and each image's reference attention."""
    torch.manual_seed(1)
    model = sharpen_attention(timm.create_model(name, pretrained=False, **kwargs))
    images = torch.randn(batch, 3, *size)
    return model, images, [reference_attention(model, images[i:i + 1]) for i in range(batch)]


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


def rownorm(matrix: np.ndarray) -> np.ndarray:
    """Each row (n, n) divided by its sum, one at a time; a row that sums to 0 (with α = 1, attention that the clamp
    or the discard left all 0) stays 0: a token that passes on no relevance passes on nothing."""
    out = np.zeros_like(matrix)
    for i, row in enumerate(matrix):
        total = row.sum()
        if total != 0:
            out[i] = row / total
    return out


def discard_rows(matrix: np.ndarray, ratio: float, protected: int | None) -> np.ndarray:
    """Row by row: zero every entry <= the k-th smallest (k = ⌊N·ratio⌋ of the decimal ratio, exactly), never the
    protected column."""
    out = matrix.copy()
    n = matrix.shape[1]
    k = math.floor(Fraction(str(ratio)) * n)
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
    readout: np.ndarray | None = None,
) -> np.ndarray:
    """Full-matrix rollout R = Â_L ··· Â_1 in float64; returns the readout row over patches, shape grid: the class
    token's row, the patch tokens' mean row, or ``readout @ R`` for a given decision row ``readout`` (N,)."""
    n = per_layer[0].shape[-1]
    result = np.eye(n)
    for per_head in per_layer[start_layer:]:
        fused = discard_rows(fuse(per_head, head_fusion), discard_ratio, 0 if class_token else None)
        result = rownorm(attention_weight * fused + (1 - attention_weight) * np.eye(n)) @ result
    if readout is not None:
        row = readout @ result
    else:
        row = result[0] if class_token else result[num_prefix:].mean(axis=0)
    return row[num_prefix:].reshape(grid)


def both_prefix_rows(layout) -> np.ndarray | None:
    """Distilled DeiT's decision row: its head averages the logits of the class and the distillation token, so
    half of each one's row (N,); None for the other layouts."""
    return np.r_[0.5, 0.5, np.zeros(layout.num_tokens - 2)] if layout.readout == "prefix_mean" else None


def reference_pool_row(model: nn.Module, image: torch.Tensor) -> np.ndarray:
    """The decision row (N,) of a timm ViT that pools its final tokens, for ONE image (1, 3, H, W) in float64:
    ``global_pool='avg'`` weighs the tokens it averages equally; ``'map'`` gives the pooling head's attention
    (heads and latent queries averaged), recomputed from its weights; ``'prr'`` its parameter-free attention's class
    row (heads averaged), or mean row without a class token. Tokens the pool never reads (the prefix tokens, unless
    ``pool_include_prefix``) get 0."""
    reference = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        tokens = reference.forward_features(image.double())[0]  # (N, D), after the final norm
        num_tokens, skipped = tokens.shape[0], 0 if reference.pool_include_prefix else reference.num_prefix_tokens
        seen = tokens[skipped:]
        if reference.global_pool == "avg":
            weights = np.full(len(seen), 1.0 / len(seen))
        elif reference.global_pool == "prr":
            pool = reference.attn_pool
            heads = pool.pre_norm(seen).reshape(len(seen), pool.num_heads, pool.head_dim).transpose(0, 1)
            attention = torch.softmax(heads @ heads.transpose(-1, -2) * pool.scale, dim=-1).mean(dim=0)
            weights = (attention[0] if reference.has_class_token else attention.mean(dim=0)).numpy()
        else:
            pool = reference.attn_pool
            heads, head_dim = pool.num_heads, pool.head_dim
            q = pool.q_norm(pool.q(pool.latent[0]).reshape(-1, heads, head_dim).transpose(0, 1))
            k = pool.k_norm(pool.kv(seen).reshape(len(seen), 2, heads, head_dim)[:, 0].transpose(0, 1))
            weights = torch.softmax(q @ k.transpose(-1, -2) * pool.scale, dim=-1).mean(dim=(0, 1)).numpy()
    row = np.zeros(num_tokens)
    row[skipped:] = weights
    return row


def aimv2_query_weights(head: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """AIMv2's pooling-query attention (B, N), heads averaged: softmax(q kᵀ / √d) of the learned query of ``head``
    (an ``Aimv2AttentionPoolingHead``) against the keys of ``tokens`` (B, N, D), the head's input."""
    heads, dim = head.num_heads, head.hidden_size // head.num_heads
    keys = head.k_proj(tokens).unflatten(-1, (heads, dim)).transpose(1, 2)  # (B, H, N, d)
    query = head.cls_token.reshape(1, heads, 1, dim)
    return torch.softmax(query @ keys.transpose(-1, -2) * dim ** -0.5, dim=-1)[:, :, 0].mean(dim=1)


def reference_attention_gradients(model: nn.Module, image: torch.Tensor,
                                  target: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """ONE image in float64 through the unfused timm path: per block the attention (H, N, N) and the gradient
    of logit ``target`` with respect to it, by retaining each attention tensor's grad."""
    reference = copy.deepcopy(model).double().eval()
    kept: list[torch.Tensor] = []

    def keep(_module, _inputs, output):
        output.retain_grad()
        kept.append(output)

    for block in reference.blocks:
        block.attn.fused_attn = False
        block.attn.attn_drop.register_forward_hook(keep)
    reference(image.double())[0, target].backward()
    return [a[0].detach().numpy() for a in kept], [a.grad[0].numpy() for a in kept]


def reference_chefer(attentions: list[np.ndarray], gradients: list[np.ndarray], num_prefix: int, grid,
                     readout: np.ndarray | None = None) -> np.ndarray:
    """R = I; R ← R + mean_h((∇A ⊙ A)⁺) @ R per layer; the class token's row over patches (or ``readout @ R``, an
    attention-pooling query's row (N,))."""
    n = attentions[0].shape[-1]
    relevance = np.eye(n)
    for attention, gradient in zip(attentions, gradients):
        relevance = relevance + np.maximum(attention * gradient, 0).mean(axis=0) @ relevance
    row = relevance[0] if readout is None else readout @ relevance
    return row[num_prefix:].reshape(grid)


def reference_grad_rollout(attentions, gradients, num_prefix: int, grid, discard_ratio: float,
                           readout: np.ndarray | None = None, attention_weight: float = 0.5) -> np.ndarray:
    """Full-matrix rollout of (mean_h ∇A ⊙ A)⁺ with per-row discard, α = ``attention_weight``: the class token's row
    (its column kept), or ``readout @ R`` for another decision row (N,) (no column kept)."""
    n = attentions[0].shape[-1]
    result = np.eye(n)
    for attention, gradient in zip(attentions, gradients):
        fused = discard_rows(np.maximum((attention * gradient).mean(axis=0), 0), discard_ratio,
                             0 if readout is None else None)
        result = rownorm(attention_weight * fused + (1 - attention_weight) * np.eye(n)) @ result
    row = result[0] if readout is None else readout @ result
    return row[num_prefix:].reshape(grid)


def reference_flow(per_layer_fused: list[np.ndarray], num_prefix: int, grid, readout: np.ndarray | None = None,
                   attention_weight: float = 0.5) -> np.ndarray:
    """Attention flow with networkx on an explicitly built graph: nodes ("layer", depth, token), edges
    from depth−1 key j to depth query i with capacity rownorm(α·A + (1−α)·I)[i, j], α = ``attention_weight``; sink =
    class token at the top, or for another decision row ``readout`` (N,) a "sink" node that each top token t feeds
    with capacity readout[t]."""
    import networkx as nx

    n = per_layer_fused[0].shape[-1]
    graph = nx.DiGraph()
    for depth, attention in enumerate(per_layer_fused, start=1):
        mixed = rownorm(attention_weight * attention + (1 - attention_weight) * np.eye(n))
        for i in range(n):
            for j in range(n):
                graph.add_edge(("layer", depth - 1, j), ("layer", depth, i), capacity=float(mixed[i, j]))
    top = ("layer", len(per_layer_fused), 0)
    if readout is not None:
        top = "sink"
        for token in range(n):
            graph.add_edge(("layer", len(per_layer_fused), token), top, capacity=float(readout[token]))
    values = [nx.maximum_flow_value(graph, ("layer", 0, j), top) for j in range(num_prefix, n)]
    return np.array(values).reshape(grid)


def reference_cait_attention_gradients(model: nn.Module, image: torch.Tensor, target: int
                                       ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """CaiT, ONE image in float64: per layer the attention (H, N, N) and the gradient of logit ``target`` with
    respect to it, written into the token space [class, patches…] entry by entry.

    Talking-heads layers: the softmax output that ``proj_w`` receives (heads last), patch rows and columns; the
    class token does not exist yet. Class-attention layers: the class token's row (unfused path). Entries a layer
    does not have are the identity in the attention (those tokens pass through) and zero in the gradient.
    """
    from timm.models.cait import ClassAttn, TalkingHeadAttn

    reference = copy.deepcopy(model).double().eval()
    kept: list[torch.Tensor] = []

    def keep_input(_module, inputs):
        inputs[0].retain_grad()
        kept.append(inputs[0])

    def keep_output(_module, _inputs, output):
        output.retain_grad()
        kept.append(output)

    for module in reference.modules():
        if isinstance(module, TalkingHeadAttn):
            module.proj_w.register_forward_pre_hook(keep_input)
        elif isinstance(module, ClassAttn):
            module.fused_attn = False
            module.attn_drop.register_forward_hook(keep_output)
    reference(image.double())[0, target].backward()

    num_self, num_heads = len(reference.blocks), reference.blocks[0].attn.num_heads
    num_tokens = kept[-1].shape[-1]
    attentions, gradients = [], []
    for layer, tensor in enumerate(kept):
        value, grad = tensor[0].detach().numpy(), tensor.grad[0].numpy()
        attention, gradient = np.zeros((2, num_heads, num_tokens, num_tokens))
        for h in range(num_heads):
            for i in range(num_tokens):
                for j in range(num_tokens):
                    if layer < num_self and i > 0 and j > 0:  # (N − 1, N − 1, H): patch i attends to patch j
                        attention[h, i, j], gradient[h, i, j] = value[i - 1, j - 1, h], grad[i - 1, j - 1, h]
                    elif layer >= num_self and i == 0:  # (H, 1, N): the class token attends to token j
                        attention[h, i, j], gradient[h, i, j] = value[h, 0, j], grad[h, 0, j]
                    else:
                        attention[h, i, j] = float(i == j)
        attentions.append(attention)
        gradients.append(gradient)
    return attentions, gradients


def multihead_attention_by_hand(mha: nn.MultiheadAttention, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention of ONE sequence of tokens ``y`` (N, E) through ``mha``'s ``in_proj_weight`` / ``in_proj_bias``,
    head by head: the output (N, E) and the attention (H, N, N), its gradient retained."""
    dim, heads = mha.embed_dim, mha.num_heads
    head_dim = dim // heads
    q, k, v = (y @ mha.in_proj_weight[i * dim:(i + 1) * dim].T + mha.in_proj_bias[i * dim:(i + 1) * dim]
               for i in range(3))
    attention = torch.stack([
        torch.softmax(q[:, h * head_dim:(h + 1) * head_dim] @ k[:, h * head_dim:(h + 1) * head_dim].T
                      / math.sqrt(head_dim), dim=-1)
        for h in range(heads)])  # (H, N, N)
    attention.retain_grad()
    mixed = torch.cat([attention[h] @ v[:, h * head_dim:(h + 1) * head_dim] for h in range(heads)], dim=-1)
    return mixed @ mha.out_proj.weight.T + mha.out_proj.bias, attention


def reference_torchvision_forward(model: nn.Module, image: torch.Tensor, target: int
                                  ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """ONE image (1, 3, H, W) through a torchvision ``VisionTransformer`` re-written by hand in float64, attention
    from each layer's ``in_proj_weight`` / ``in_proj_bias`` head by head: the logits (C,), and per layer the
    attention (H, N, N) and the gradient of logit ``target`` with respect to it."""
    reference = copy.deepcopy(model).double().eval()
    x = reference._process_input(image.double())
    x = torch.cat([reference.class_token.expand(1, -1, -1), x], dim=1) + reference.encoder.pos_embedding
    kept: list[torch.Tensor] = []
    for layer in reference.encoder.layers:
        out, attention = multihead_attention_by_hand(layer.self_attention, layer.ln_1(x)[0])
        kept.append(attention)
        x = x + out[None]
        x = x + layer.mlp(layer.ln_2(x))
    logits = reference.heads(reference.encoder.ln(x)[:, 0])[0]
    logits[target].backward()
    return (logits.detach().numpy(), [a.detach().numpy() for a in kept], [a.grad.numpy() for a in kept])


Scores = Callable[[nn.Module, torch.Tensor], torch.Tensor]
"""``scores(model, image)``: a model's class scores (1, K) for ONE image (1, C, H, W)."""


def plain_scores(model: nn.Module, image: torch.Tensor) -> torch.Tensor:
    """The forward's output, for a model that returns its logits (timm)."""
    return model(image)


def reference_input_gradient(model: nn.Module, points: torch.Tensor, target: int,
                             scores: Scores = plain_scores) -> np.ndarray:
    """∂ score ``target`` / ∂ input at each of ``points`` (P, C, H, W), one point at a time, in float64
    → (P, C, H, W)."""
    reference = copy.deepcopy(model).double().eval()
    gradients = []
    for point in points.double():
        point = point[None].clone().requires_grad_(True)
        scores(reference, point)[0, target].backward()
        gradients.append(point.grad[0].numpy())
    return np.stack(gradients)


def reference_integrated_gradients(model: nn.Module, image: torch.Tensor, target: int, steps: int,
                                   scores: Scores = plain_scores) -> np.ndarray:
    """Integrated Gradients of ONE image (1, C, H, W) from the zero baseline, in float64, by the ``steps``-point
    Gauss–Legendre rule on [0, 1] written out (nodes and weights from NumPy): (x − 0) · Σ_k w_k ∇f(α_k x)
    → (C, H, W)."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas, weights = (nodes + 1) / 2, weights / 2
    x = image[0].double()
    gradients = reference_input_gradient(model, torch.stack([float(alpha) * x for alpha in alphas]), target, scores)
    return x.numpy() * np.tensordot(weights, gradients, axes=1)


def reference_gradient_shap(model: nn.Module, image: torch.Tensor, baselines: torch.Tensor, target: int,
                            samples: int, stdev: float, seed: int, scores: Scores = plain_scores) -> np.ndarray:
    """GradientSHAP of ONE image (1, C, H, W) in float64: the mean over ``samples`` draws of
    (x + ε − b) · ∇f(b + α(x + ε − b)), b one of ``baselines`` (K, C, H, W), α ~ U(0, 1), ε ~ N(0, stdev²).

    The draws are made as captum makes them after seeding both generators with ``seed`` (noise from torch in the
    input's dtype, then the baseline indices and the α from NumPy), so the estimate can be compared number for
    number; everything after the draws is computed here → (C, H, W)."""
    np.random.seed(seed)
    torch.manual_seed(seed)
    noise = torch.normal(0, torch.tensor(stdev).repeat(samples, *image.shape[1:]))
    noisy = (image.repeat_interleave(samples, dim=0) + noise).double()
    chosen = baselines[np.random.choice(len(baselines), samples).tolist()].double()
    alphas = np.random.uniform(0.0, 1.0, samples)
    points = torch.stack([b + float(a) * (x - b) for x, b, a in zip(noisy, chosen, alphas)])
    gradients = reference_input_gradient(model, points, target, scores)
    return ((noisy - chosen).numpy() * gradients).mean(axis=0)


def reference_image_occlusion(model: nn.Module, image: torch.Tensor, target: int, window: int, patch: int,
                              scores: Scores = plain_scores) -> np.ndarray:
    """Occlusion of ONE image (3, H, W) in float64: for each window × window block of ``patch``-pixel patches, zero
    its pixels and take the target score's drop; each patch's score is the mean over the blocks covering it →
    (⌈H / patch⌉, ⌈W / patch⌉), signed. A last partial row or column of patches (a model that pads its input up to
    whole patches, right and bottom) holds the image's last H mod patch (W mod patch) pixels."""
    reference = copy.deepcopy(model).double().eval()
    image = image.double()
    grid = (-(-image.shape[1] // patch), -(-image.shape[2] // patch))
    with torch.no_grad():
        full = scores(reference, image[None])[0, target]
        total, count = np.zeros(grid), np.zeros(grid)
        for top, left in itertools.product(range(grid[0] - window + 1), range(grid[1] - window + 1)):
            hidden = image.clone()
            hidden[:, top * patch:(top + window) * patch, left * patch:(left + window) * patch] = 0.0
            drop = float(full - scores(reference, hidden[None])[0, target])
            total[top:top + window, left:left + window] += drop
            count[top:top + window, left:left + window] += 1
    return total / count


def _mean_positive_weighted_heads(attention: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """Chefer et al. 2021b eq. (5), Ā = E_h[(∇A ⊙ A)⁺], head by head: (H, Q, S) twice → (Q, S)."""
    fused = np.zeros(attention.shape[1:])
    for head in range(attention.shape[0]):
        fused += np.maximum(gradient[head] * attention[head], 0.0)
    return fused / attention.shape[0]


def _fused_heads(attention: np.ndarray, head_fusion: str) -> np.ndarray:
    """(H, Q, S) → (Q, S), head by head."""
    fused = attention[0].copy()
    for head in range(1, attention.shape[0]):
        fused = {"mean": fused + attention[head], "max": np.maximum(fused, attention[head]),
                 "min": np.minimum(fused, attention[head])}[head_fusion]
    return fused / attention.shape[0] if head_fusion == "mean" else fused


def _rows_normalised(matrix: np.ndarray) -> np.ndarray:
    """Each row divided by its sum, row by row; a row that sums to 0 stays 0."""
    out = np.zeros_like(matrix)
    for row in range(matrix.shape[0]):
        total = matrix[row].sum()
        if total != 0:
            out[row] = matrix[row] / total
    return out


def _residual_normalised(relevance: np.ndarray) -> np.ndarray:
    """Chefer et al. 2021b eqs. (8)–(9): R̂ = R − I, each row of R̂ divided by its sum, then + I (N, N).

    A row of R̂ that sums to 0 (a token whose relevance never grew) stays 0, where the reference code's division
    gives NaN and its ``R_sq_addition[torch.isnan(R_sq_addition)] = 0`` (DETR/modules/ExplanationGenerator.py,
    ``apply_mm_attention_rules``) then drops the layer's whole cross-attention addition: every column of R̄ᵀ has
    that NaN in it."""
    eye = np.eye(relevance.shape[0])
    return _rows_normalised(relevance - eye) + eye


def _captioner_prefix_forward(model: nn.Module, image: torch.Tensor, decoder_input: list[int], keep_graph: bool):
    """ONE image (3, H, W) and one decoder input through ``model`` in float64 with transformers' eager attention:
    the output, and the attention tensors encoder…, decoder self…, cross… in forward order (grads retained)."""
    output = model(pixel_values=image[None].double(), decoder_input_ids=torch.tensor([decoder_input]),
                   output_attentions=True, use_cache=False)
    recorded = [*output.encoder_attentions, *output.decoder_attentions, *output.cross_attentions]
    if keep_graph:
        for attention in recorded:
            attention.retain_grad()
    return output, recorded


def reference_caption_relevance(model: nn.Module, image: torch.Tensor, caption: list[int], start_id: int,
                                method: str, *, num_prefix: int, head_fusion: str = "mean",
                                attention_weight: float = 0.5) -> np.ndarray:
    """Caption maps of a transformers ``VisionEncoderDecoderModel`` for ONE image (3, H, W) and its caption (K token
    ids), as at generation time: token k is explained from a separate float64 forward pass on the decoder input
    ``[start_id, caption[0], …, caption[k−1]]`` (k + 1 positions, so no later position exists), its logit at the
    last position → (K, N − num_prefix), row k over the encoder's patch tokens.

    ``method="chefer"``: Chefer, Gur & Wolf 2021b for encoder–decoders (their DETR generator,
    ``Generator.generate_ours``), layer by layer with Ā of eq. (5) from autograd on that logit: R_ii = I,
    R_tt = I, R_ti = 0; each encoder layer R_ii += Ā·R_ii (eq. 6); per decoder layer, its self-attention
    R_tt += Ā·R_tt and R_ti += Ā·R_ti (eqs. 6, 7, both from the old matrices), then its cross-attention
    R_ti += R̄_ttᵀ·Ā·R̄_ii (eq. 10, R̄ of eqs. 8–9); eq. 11 adds Ā·R_it = 0, since the image never attends to text.

    ``method="rollout"``: the joint (k + 1 + N)-token graph written out one layer matrix at a time (text tokens
    first): an encoder layer mixes the image tokens by rownorm(α·A + (1−α)·I); a decoder self-attention the text
    tokens likewise; a cross-attention sends each text row (1−α) to itself and α·A[q, j] to image token j, row
    normalised; every other token passes through. R is the product, later layers on the left.
    """
    reference = copy.deepcopy(model).double().eval()
    reference.set_attn_implementation("eager")
    num_encoder = reference.config.encoder.num_hidden_layers
    num_decoder = reference.config.decoder.num_hidden_layers
    rows = []
    for k in range(len(caption)):
        chefer = method == "chefer"
        with torch.set_grad_enabled(chefer):
            output, recorded = _captioner_prefix_forward(reference, image, [start_id, *caption[:k]], chefer)
        attentions = [attention[0].detach().numpy() for attention in recorded]  # (H, Q, S) each
        encoder = attentions[:num_encoder]
        selfs = attentions[num_encoder:num_encoder + num_decoder]
        crosses = attentions[num_encoder + num_decoder:]
        num_text, num_image = k + 1, encoder[0].shape[-1]
        if chefer:
            output.logits[0, k, caption[k]].backward()
            gradients = [attention.grad[0].numpy() for attention in recorded]
            weighted = [_mean_positive_weighted_heads(a, g) for a, g in zip(attentions, gradients)]
            image_image = np.eye(num_image)
            for layer in range(num_encoder):
                image_image = image_image + weighted[layer] @ image_image
            text_text, text_image = np.eye(num_text), np.zeros((num_text, num_image))
            for layer in range(num_decoder):
                self_weighted = weighted[num_encoder + layer]
                cross_weighted = weighted[num_encoder + num_decoder + layer]
                text_text, text_image = (text_text + self_weighted @ text_text,
                                         text_image + self_weighted @ text_image)
                text_image = text_image + (_residual_normalised(text_text).T @ cross_weighted
                                           @ _residual_normalised(image_image))
            row = text_image[k]
        else:
            alpha, size = attention_weight, num_text + num_image
            joint = np.eye(size)
            layers = [("encoder", a) for a in encoder] + [
                (role, a) for self_a, cross_a in zip(selfs, crosses)
                for role, a in (("self", self_a), ("cross", cross_a))]
            for role, attention in layers:
                fused = _fused_heads(attention, head_fusion)
                step = np.eye(size)
                if role == "cross":
                    for query in range(num_text):
                        step[query, query] = 1.0 - alpha
                        for key in range(num_image):
                            step[query, num_text + key] = alpha * fused[query, key]
                else:
                    block = slice(num_text, size) if role == "encoder" else slice(0, num_text)
                    step[block, block] = alpha * fused + (1.0 - alpha) * np.eye(len(fused))
                joint = _rows_normalised(step) @ joint
            row = joint[k, num_text:]
        rows.append(row[num_prefix:])
    return np.stack(rows)


def reference_average_ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank: 1 + (how many are smaller) + (how many others are equal) / 2."""
    return [1 + sum(v < x for v in values) + (sum(v == x for v in values) - 1) / 2 for x in values]


def reference_spearman(first: np.ndarray, second: np.ndarray) -> float:
    """Spearman correlation of two maps of one image over the pixels finite in both: Pearson's r of their average
    ranks, summed with math.fsum; 0 where either side's ranks are constant (a constant map, one pixel, none)."""
    pairs = [(float(a), float(b)) for a, b in zip(first.ravel(), second.ravel())
             if math.isfinite(a) and math.isfinite(b)]
    x, y = reference_average_ranks([a for a, _ in pairs]), reference_average_ranks([b for _, b in pairs])
    if not pairs:
        return 0.0
    mean_x, mean_y = math.fsum(x) / len(x), math.fsum(y) / len(y)
    covariance = math.fsum((a - mean_x) * (b - mean_y) for a, b in zip(x, y))
    spread = math.sqrt(math.fsum((a - mean_x) ** 2 for a in x) * math.fsum((b - mean_y) ** 2 for b in y))
    return covariance / spread if spread > 0 else 0.0


def reference_top_pixels(saliency: np.ndarray, fraction: float, candidates: set[int] | None = None) -> set[int]:
    """Flat positions of one map's top ``fraction`` of its candidate pixels (default all): NaN counted as 0, the larger
    value first and of equal values the earlier position, round(fraction · N) of them and at least one."""
    values = [0.0 if math.isnan(v) else float(v) for v in saliency.ravel()]
    pool = [p for p in range(len(values)) if candidates is None or p in candidates]
    count = max(1, round(fraction * len(pool))) if pool else 0
    return set(sorted(pool, key=lambda p: (-values[p], p))[:count])


def reference_iou(first: set[int], second: set[int]) -> float:
    return len(first & second) / len(first | second) if first | second else 0.0


def reference_deletion_insertion(model: nn.Module, image: torch.Tensor, saliency: np.ndarray, target: int,
                                 steps: int) -> tuple[list[float], list[float], float, float]:
    """Deletion and insertion curves of ONE image (3, H, W) for a map at input size (H, W), mean-colour substrate, in
    float64 pixel by pixel: pixels in map order (NaN last, ties by position), ``round(k · H·W / steps)`` of them
    changed at step k. Returns (deletion curve, insertion curve, deletion AUC, insertion AUC) by the trapezoid rule."""
    model = copy.deepcopy(model).double().eval()
    image = image.double()
    _, height, width = image.shape
    total = height * width
    values = [-math.inf if math.isnan(v) else float(v) for v in saliency.ravel()]
    order = sorted(range(total), key=lambda p: (-values[p], p))
    background = image.mean(dim=(1, 2), keepdim=True).expand_as(image)
    counts = [round(k * total / steps) for k in range(steps + 1)]
    curves: tuple[list[float], list[float]] = ([], [])
    for count in counts:
        deleted, inserted = image.clone(), background.clone()
        for position in order[:count]:
            row, column = divmod(position, width)
            deleted[:, row, column] = background[:, row, column]
            inserted[:, row, column] = image[:, row, column]
        with torch.no_grad():
            for curve, picture in zip(curves, (deleted, inserted)):
                curve.append(float(model(picture[None]).softmax(dim=-1)[0, target]))
    fractions = [count / total for count in counts]

    def area(curve: list[float]) -> float:
        return math.fsum((curve[k] + curve[k + 1]) / 2 * (fractions[k + 1] - fractions[k]) for k in range(steps))

    return curves[0], curves[1], area(curves[0]), area(curves[1])
