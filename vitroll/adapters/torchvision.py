"""torchvision's ``VisionTransformer`` (vit_b_16 … vit_h_14, any ``image_size``), registered through the public call.

Its attention is ``nn.MultiheadAttention``, which the encoder blocks call with ``need_weights=False``. The readout
leaves that call alone: a forward pre-hook on each instance recomputes the probabilities beside it, per head and in
query blocks, from the call's input and the module's own ``in_proj_weight`` / ``in_proj_bias`` (one more query and
key projection and query-key product per layer), so the model's output is bit for bit what it is without vitroll.
Gradient methods need the probabilities the output was computed from, so with ``keep_graph`` a forward hook replaces
the call's output by the same attention recomputed from those in-graph probabilities (equal to PyTorch's up to float
rounding), answering the caller's ``need_weights`` as asked. The call's own output is computed and dropped there:
gradient methods pay one more attention per layer, which their backward pass outweighs.
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Optional

import torch
from torch import nn

from vitroll.adapters.base import register_family
from vitroll.capture.families import TokenLayout
from vitroll.capture.readouts import AttentionReadout, AttentionSink
from vitroll.capture.recorder import attention_probabilities
from vitroll.errors import UnsupportedModelError
from vitroll.preprocess import Preprocessing
from vitroll.wording import argument

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESIZE_PER_CROP = 256 / 224
"""torchvision's classification transform resizes the shorter side to 256 and centre-crops 224."""


def _call_arguments(module: nn.MultiheadAttention, args: tuple, kwargs: dict) -> dict[str, object]:
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _check_plain_self_attention(module: nn.MultiheadAttention, call: dict[str, object]) -> None:
    if call["attn_mask"] is not None or call["key_padding_mask"] is not None or call["is_causal"]:
        raise UnsupportedModelError(
            "nn.MultiheadAttention was called with a mask; vitroll reads unmasked attention only")
    if module.bias_k is not None or module.add_zero_attn or call["query"].dim() != 3:
        raise UnsupportedModelError(
            "nn.MultiheadAttention with bias_k/add_zero_attn or unbatched inputs is not supported")
    if module.training and module.dropout > 0:
        raise UnsupportedModelError("nn.MultiheadAttention in training mode with dropout; call model.eval() first")


def _heads(module: nn.MultiheadAttention, tokens: torch.Tensor, weight: torch.Tensor,
           bias: torch.Tensor | None) -> torch.Tensor:
    """Project tokens (B, N, E) (or (N, B, E) unless ``batch_first``) → per head (B, H, N, D)."""
    if not module.batch_first:
        tokens = tokens.transpose(0, 1)
    projected = nn.functional.linear(tokens, weight, bias)
    return projected.unflatten(-1, (module.num_heads, module.head_dim)).transpose(1, 2)


def _projections(module: nn.MultiheadAttention) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(weight, bias) of the query, key and value projections."""
    embed = module.embed_dim
    biases = [None] * 3 if module.in_proj_bias is None else list(module.in_proj_bias.split(embed))
    if module._qkv_same_embed_dim:
        weights = list(module.in_proj_weight.split(embed))
    else:
        weights = [module.q_proj_weight, module.k_proj_weight, module.v_proj_weight]
    return list(zip(weights, biases))


def _recompute_beside(module: nn.MultiheadAttention, sink: AttentionSink) -> Callable[[], None]:
    def record(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        call = _call_arguments(module, args, kwargs)
        _check_plain_self_attention(module, call)
        (w_q, b_q), (w_k, b_k), _ = _projections(module)
        with torch.no_grad():
            q, k = _heads(module, call["query"], w_q, b_q), _heads(module, call["key"], w_k, b_k)
            scale = module.head_dim ** -0.5
            sink.record((*q.shape[:3], k.shape[2]), lambda rows: attention_probabilities(q[:, :, rows], k, scale),
                        q.device)

    return module.register_forward_pre_hook(record, with_kwargs=True).remove


def _recompute_in_graph(module: nn.MultiheadAttention, sink: AttentionSink) -> Callable[[], None]:
    computed: dict[str, object] = {}

    def compute(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        call = _call_arguments(module, args, kwargs)
        _check_plain_self_attention(module, call)
        q, k, v = (_heads(module, call[name], w, b)
                   for name, (w, b) in zip(("query", "key", "value"), _projections(module)))
        probabilities = attention_probabilities(q, k, module.head_dim ** -0.5)  # (B, H, N, N)
        out = nn.functional.linear((probabilities @ v).transpose(1, 2).flatten(2),
                                   module.out_proj.weight, module.out_proj.bias)
        sink.record_graph(probabilities)
        weights = None
        if call["need_weights"]:
            weights = probabilities.mean(dim=1) if call["average_attn_weights"] else probabilities
        computed["output"] = (out if module.batch_first else out.transpose(0, 1), weights)

    def replace_output(_module: nn.Module, _args: tuple, _output: object) -> tuple[torch.Tensor, torch.Tensor | None]:
        return computed.pop("output")

    before = module.register_forward_pre_hook(compute, with_kwargs=True)
    after = module.register_forward_hook(replace_output)

    def detach() -> None:
        before.remove()
        after.remove()

    return detach


def attach_multihead_attention(module: nn.Module, sink: AttentionSink) -> Callable[[], None]:
    """The custom readout of ``nn.MultiheadAttention`` (see the module docstring)."""
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(f"expected nn.MultiheadAttention, got {type(module).__name__}")
    return _recompute_in_graph(module, sink) if sink.keep_graph else _recompute_beside(module, sink)


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    return [layer.self_attention for layer in model.encoder.layers]


def _heads_then_layers_down(model: nn.Module) -> list[nn.Module]:
    """The classification heads, then the encoder layers from the last to the first."""
    return [model.heads, *reversed(model.encoder.layers)]


def _token_layout(model: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
    """The class token, then the patches row by row (torchvision concatenates the class token first).

    Raises ValueError for any input size but (``image_size``, ``image_size``), which torchvision's forward asserts.
    """
    if tuple(image_hw) != (model.image_size,) * 2:
        size = model.image_size
        raise ValueError(f"torchvision's VisionTransformer takes {size}×{size} inputs only (its image_size); "
                         f"{argument('img_size', placeholder='N')} builds it for N×N")
    patch = model.patch_size
    return TokenLayout(num_prefix_tokens=1, readout="class_token", grid=(image_hw[0] // patch, image_hw[1] // patch))


_SIZE_LETTERS = {(12, 768): "b", (24, 1024): "l", (32, 1280): "h"}
"""(layers, width) of torchvision's ViT sizes → the letter in their names (vit_b_16, vit_l_32, vit_h_14)."""


def _default_transform_sizes(model: nn.Module) -> Optional[tuple[int, str]]:
    """(resize size, interpolation) of the ``DEFAULT`` weights' transform of the torchvision architecture ``model``
    is, when there is one and its crop is the model's ``image_size`` (vit_l_16 resizes to 242, vit_h_14's weights
    take 518 bicubic)."""
    import torchvision

    letter = _SIZE_LETTERS.get((len(model.encoder.layers), model.hidden_dim))
    name = f"vit_{letter}_{model.patch_size}"
    if letter is None or name not in torchvision.models.list_models(module=torchvision.models):
        return None
    transform = torchvision.models.get_model_weights(name).DEFAULT.transforms()
    if list(transform.crop_size) != [model.image_size]:
        return None
    return transform.resize_size[0], transform.interpolation.value


def _preprocessing(model: nn.Module) -> Preprocessing:
    """torchvision's ``ImageClassification`` transform at the model's ``image_size``: the shorter side resized to
    ``image_size · 256/224`` (bilinear), centre crop, ImageNet mean and std; for torchvision's own architectures at
    their weights' crop size, those weights' resize size and interpolation."""
    size = model.image_size
    resize, interpolation = _default_transform_sizes(model) or (math.floor(size * RESIZE_PER_CROP), "bilinear")
    return Preprocessing(input_size=(size, size), mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_pct=size / resize,
                         interpolation=interpolation)


def _class_names(model: nn.Module) -> Optional[list[str]]:
    """ImageNet's categories (as torchvision's weights list them) for a model with 1000 outputs."""
    from torchvision.models import ViT_B_16_Weights

    categories = ViT_B_16_Weights.DEFAULT.meta["categories"]
    head = getattr(model.heads, "head", None)
    return list(categories) if getattr(head, "out_features", None) == len(categories) else None


register_family(
    "torchvision-vit", "torchvision.models.vision_transformer.VisionTransformer",
    attention_modules=_attention_modules, token_layout=_token_layout, preprocessing=_preprocessing,
    randomizable=_heads_then_layers_down, class_names=_class_names, input_embedding=lambda model: model.conv_proj,
    readout=AttentionReadout(nn.MultiheadAttention, probs_module=None, fused_flag=None,
                             attach=attach_multihead_attention),
    name_patterns=("torchvision:vit_*",),
    notes="nn.MultiheadAttention read beside the call (output untouched); square image_size only",
)
