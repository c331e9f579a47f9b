"""timm's Vision Transformers (vit, vit-relpos, naflexvit, eva, beit, cait), registered through the same public
call a user has.

Each family names its attention modules and token layout; each of timm's attention types gets its readout (the
recipes are described in :mod:`vitroll.capture.readouts`); the preprocessing is timm's evaluation transform from the
model's ``pretrained_cfg``.
"""

from __future__ import annotations

from typing import Callable

import torch
from timm.data import resolve_data_config
from timm.layers import Attention, AttentionPoolLatent, AttentionRope
from timm.models.beit import Attention as BeitAttention
from timm.models.beit import Beit
from timm.models.cait import Cait, ClassAttn, TalkingHeadAttn
from timm.models.deit import VisionTransformerDistilled
from timm.models.eva import Eva, EvaAttention
from timm.models.naflexvit import NaFlexVit
from timm.models.vision_transformer import VisionTransformer
from timm.models.vision_transformer_relpos import RelPosAttention, VisionTransformerRelPos
from torch import nn

from vitroll.adapters.base import register_family
from vitroll.capture.families import Padding, Readout, TokenLayout, add_refusal, padded_to_patches
from vitroll.capture.readouts import AttentionReadout, AttentionSink
from vitroll.capture.recorder import attention_probabilities
from vitroll.preprocess import Preprocessing
from vitroll.wording import argument


def _built_input_size(model: nn.Module) -> tuple[int, int] | None:
    """The input size the model was built for (``img_size=`` at creation), which ``pretrained_cfg`` does not track."""
    image_size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    return tuple(image_size) if image_size is not None else None


def _patch_embedding(model: nn.Module) -> nn.Module:
    """The module timm's images enter: the patch embedding (a hybrid's holds its CNN stem; NaFlexViT's ``embeds``)."""
    return model.embeds if isinstance(model, NaFlexVit) else model.patch_embed


def timm_preprocessing(model: nn.Module) -> Preprocessing:
    """timm's evaluation transform of ``model`` (``timm.data.resolve_data_config``) at the size it was built for."""
    config = resolve_data_config({}, model=model)
    crop_mode = config.get("crop_mode", "center")
    return Preprocessing(
        input_size=_built_input_size(model) or tuple(config["input_size"][1:]),
        mean=tuple(config["mean"]),
        std=tuple(config["std"]),
        crop_pct=config.get("crop_pct") or 0.875,
        interpolation=config.get("interpolation", "bicubic"),
        crop_mode=crop_mode if crop_mode in ("center", "squash", "border") else "center",
        patch_padding=_padding_patch(_patch_embedding(model)),
    )


def timm_class_names(model: nn.Module) -> list[str] | None:
    """The model's ``pretrained_cfg["label_names"]``, or ImageNet's (the subset its classifier size suggests) from
    timm's metadata."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    cfg = getattr(model, "pretrained_cfg", None) or {}
    if cfg.get("label_names"):
        return list(cfg["label_names"])
    subset = infer_imagenet_subset(model)
    return None if subset is None else ImageNetInfo(subset).label_descriptions(detailed=False)


def _heads_last_to_first(probs: torch.Tensor) -> torch.Tensor:
    """(B, Q, N, H) → (B, H, Q, N)."""
    return probs.permute(0, 3, 1, 2)


def _block_attention_modules(model: nn.Module) -> list[nn.Module]:
    return [block.attn for block in model.blocks]


def _head_then_blocks_down(model: nn.Module) -> list[nn.Module]:
    """The classifier (``get_classifier()``), then the blocks from the last to the first."""
    return [model.get_classifier(), *reversed(model.blocks)]


def _cait_head_then_blocks_down(model: nn.Module) -> list[nn.Module]:
    """The classifier, the class-attention blocks, then the self-attention blocks, each stage from the top down."""
    return [model.get_classifier(), *reversed(model.blocks_token_only), *reversed(model.blocks)]


def _check_input_size(model: nn.Module, image_hw: tuple[int, int]) -> None:
    """Raise ValueError for an input size the model's patch embedding rejects (``strict_img_size``) or would crop
    silently (not whole patches, without ``dynamic_img_pad``)."""
    embed = _patch_embedding(model)
    built = tuple(getattr(embed, "img_size", None) or ())
    patch = tuple(getattr(embed, "patch_size", None) or ())
    if getattr(embed, "strict_img_size", False) and built and tuple(image_hw) != built:
        any_size = (f", or for any size with {argument('dynamic_img_size', True)}"
                    if hasattr(model, "dynamic_img_size") else "")
        raise ValueError(f"{type(model).__name__} was built for {built[0]}×{built[1]} inputs; build it for this size "
                         f"with {argument('img_size', tuple(image_hw))}{any_size}")
    if patch and not getattr(embed, "dynamic_img_pad", False) and any(s % p for s, p in zip(image_hw, patch)):
        raise ValueError(f"not a multiple of the model's {patch[0]}×{patch[1]} patches")
    # padded to whole patches, a grid the fixed position embeddings were not made for fails inside timm's forward
    stated = tuple(getattr(embed, "grid_size", None) or ())
    if stated and getattr(embed, "dynamic_img_pad", False) and not getattr(model, "dynamic_img_size", False):
        grid = tuple(embed.dynamic_feat_size(image_hw))
        if grid != stated:
            raise ValueError(f"{type(model).__name__} pads a {image_hw[0]}×{image_hw[1]} input to a "
                             f"{grid[0]}×{grid[1]} grid of {patch[0]}×{patch[1]} patches, but its position "
                             f"embeddings are for {stated[0]}×{stated[1]}; build it with "
                             f"{argument('dynamic_img_size', True)}, or with an {argument('img_size')} of whole "
                             "patches")


ATTENTION_POOLS = ("map", "prr")
"""timm's ``global_pool`` values whose head attends over the final tokens: its attention is the decision row."""


def _pooled_token_layout(model: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
    """Layout of models with ``patch_embed``, ``num_prefix_tokens`` and timm's ``global_pool`` convention.

    Raises ValueError for an input size the model cannot take.
    """
    _check_input_size(model, image_hw)
    embed = _patch_embedding(model)
    grid = tuple(embed.dynamic_feat_size(image_hw))
    pool = getattr(model, "global_pool", "token")
    # timm's pool_include_prefix: the average (or the attention pool) covers the prefix tokens too
    mean: Readout = "token_mean" if getattr(model, "pool_include_prefix", False) else "patch_mean"
    readout: Readout = "attention_pool" if pool in ATTENTION_POOLS else {"token": "class_token"}.get(pool, mean)
    if isinstance(model, VisionTransformerDistilled):  # its head averages the class and distillation tokens' logits
        readout = "prefix_mean"
    return TokenLayout(num_prefix_tokens=model.num_prefix_tokens, readout=readout, grid=grid,
                       padded_hw=padded_to_patches(image_hw, _padding_patch(embed)))


def _padding_patch(embed: nn.Module) -> tuple[int, int] | None:
    """The patch (h, w) a patch embedding pads its input up to whole ones of (timm's ``dynamic_img_pad``), or None."""
    return tuple(embed.patch_size) if getattr(embed, "dynamic_img_pad", False) else None


def _attention_pool(model: nn.Module) -> list[nn.Module]:
    pool = getattr(model, "attn_pool", None)
    return [pool] if getattr(model, "global_pool", None) in ATTENTION_POOLS and pool is not None else []


def _attach_prr_pool(module: nn.Module, sink: AttentionSink) -> Callable[[], None]:
    """timm's PRR pool (``global_pool='prr'``): a parameter-free self-attention ``softmax(x_h x_hᵀ · scale)`` over
    the pre-normed tokens' head slices, then the class token's output (``pool='token'``) or the mean of all outputs
    (``'avg'``). Records, beside the call, the query rows the pool reads: row 0, or every row (their mean is then the
    decision row)."""

    def record(_module: nn.Module, args: tuple) -> None:
        tokens = module.pre_norm(args[0])
        batch, num_tokens, _ = tokens.shape
        heads = tokens.reshape(batch, num_tokens, module.num_heads, module.head_dim).transpose(1, 2)
        queries = heads[:, :, :1] if module.pool == "token" else heads
        sink.record((batch, module.num_heads, queries.shape[2], num_tokens),
                    lambda rows: attention_probabilities(queries[:, :, rows], heads, module.scale), tokens.device)

    return module.register_forward_pre_hook(record).remove


def _cait_attention_modules(model: nn.Module) -> list[nn.Module]:
    return [block.attn for block in model.blocks] + [block.attn for block in model.blocks_token_only]


def _cait_assemble(model: nn.Module, records: list[torch.Tensor], padding: Padding) -> list[torch.Tensor]:
    """Put CaiT's two stages in one token space [class, patches…] of N = 1 + P tokens.

    Self-attention layers (P, P) run before the class token exists: the class token's row and column
    are ``padding``. Class-attention layers (1, N) update only the class token: their row becomes row 0 and
    the patch tokens' rows are ``padding`` (for attention the identity: patches pass through that stage unchanged).
    """
    num_tokens = records[-1].shape[-1]
    assembled = []
    for index, record in enumerate(records):
        full = torch.zeros(*record.shape[:-2], num_tokens, num_tokens, dtype=record.dtype, device=record.device)
        if padding == "identity":
            full.diagonal(dim1=-2, dim2=-1).fill_(1.0)
        if index < len(model.blocks):
            full[..., 1:, 1:] = record
        else:
            full[..., :1, :] = record
        assembled.append(full)
    return assembled


register_family(
    "vit", VisionTransformer, attention_modules=_block_attention_modules, token_layout=_pooled_token_layout,
    randomizable=_head_then_blocks_down, preprocessing=timm_preprocessing, class_names=timm_class_names,
    input_embedding=_patch_embedding, readout_modules=_attention_pool,
    readout=[
        AttentionReadout(Attention),
        # the pooling query's attention: q_norm/k_norm feed the softmax directly; no dropout module to hook
        AttentionReadout(AttentionPoolLatent, probs_module=None, query_key_modules=("q_norm", "k_norm")),
        AttentionReadout(AttentionRope),
        AttentionReadout("timm.layers.attention_pool.AttentionPoolPrr", probs_module=None, fused_flag=None,
                         attach=_attach_prr_pool),
    ],
    name_patterns=("vit_*", "deit_*", "deit3_*", "flexivit_*", "vitamin_*", "vit_*_reg4*", "vit_*_dinov2*",
                   "vit_*_siglip*"),
    timm_modules=("vision_transformer", "deit", "vision_transformer_hybrid", "vitamin"),
    notes="class/distillation/register tokens skipped; distilled DeiT → mean of class and distillation tokens (its "
          "head averages both); avg pooling → patch mean; 'map'/'prr' head → pool attention",
)
register_family(
    "vit-relpos", VisionTransformerRelPos, attention_modules=_block_attention_modules,
    token_layout=_pooled_token_layout,
    randomizable=_head_then_blocks_down, preprocessing=timm_preprocessing, class_names=timm_class_names,
    input_embedding=_patch_embedding, readout=AttentionReadout(RelPosAttention),
    name_patterns=("vit_relpos_*", "vit_srelpos_*"), timm_modules=("vision_transformer_relpos",),
    notes="relative position bias (own or shared, MLP or table) included (the blocked kernel's mask); avg pooling "
          "(default) → patch mean, 'token' → class token; --img-size only (no --dynamic-img-size in timm)",
)
register_family(
    "naflexvit", NaFlexVit, attention_modules=_block_attention_modules, token_layout=_pooled_token_layout,
    randomizable=_head_then_blocks_down, preprocessing=timm_preprocessing, class_names=timm_class_names,
    input_embedding=_patch_embedding, readout_modules=_attention_pool,
    name_patterns=("naflexvit_*",), timm_modules=("naflexvit",),
    notes="image batches (not NaFlex's pre-cut patches): any size of whole patches, its position embedding "
          "resampled; class/register tokens skipped; avg pooling → patch mean; 'map' head → pool attention",
)
register_family(
    "eva", Eva, attention_modules=_block_attention_modules, token_layout=_pooled_token_layout,
    randomizable=_head_then_blocks_down, preprocessing=timm_preprocessing, class_names=timm_class_names,
    input_embedding=_patch_embedding, readout_modules=_attention_pool,
    readout=AttentionReadout(EvaAttention),
    name_patterns=("eva02_*", "eva_*", "vit_*_rope_*"), timm_modules=("eva",),
    notes="rotary embedding included (blocked kernel on the rotated queries and keys); class/register tokens "
          "skipped; avg pooling → patch mean; 'map' head → pool attention; timm's other Eva models (vit_pe_*, "
          "*_dinov3*) too",
)
register_family(
    "beit", Beit, attention_modules=_block_attention_modules, token_layout=_pooled_token_layout,
    randomizable=_head_then_blocks_down, preprocessing=timm_preprocessing, class_names=timm_class_names,
    input_embedding=_patch_embedding, readout=AttentionReadout(BeitAttention),
    name_patterns=("beit_*", "beitv2_*"), timm_modules=("beit",),
    notes="relative position bias included (the blocked kernel's mask); avg pooling (default) → patch mean, "
          "'token' → class token; --img-size resamples the bias, no --dynamic-img-size (timm's Beit has none)",
)
register_family(
    "cait", Cait, attention_modules=_cait_attention_modules, token_layout=_pooled_token_layout,
    randomizable=_cait_head_then_blocks_down, preprocessing=timm_preprocessing, class_names=timm_class_names,
    input_embedding=_patch_embedding, assemble=_cait_assemble,
    readout=[
        AttentionReadout(ClassAttn),  # CaiT class attention: one query row (the class token)
        # talking heads: logits mixed across heads before the softmax, probabilities mixed after it; the
        # softmax output is the input of proj_w, heads last; there is no fused kernel
        AttentionReadout(TalkingHeadAttn, probs_module="proj_w", fused_flag=None,
                         probs_from_input=_heads_last_to_first),
    ],
    name_patterns=("cait_*",), timm_modules=("cait",),
    notes="talking-heads softmax; class-attention stage rolled out as the class token's rows",
)


_NO_SEQUENCE = ("no single token sequence runs from the image to the class score for rollout to follow; use Grad-CAM "
                "(pip install grad-cam)")
_SWIN = "attends within shifted windows and merges patches between stages"
_REFUSED = (
    ("swin_transformer.SwinTransformer", f"Swin {_SWIN}"),
    ("swin_transformer_v2.SwinTransformerV2", f"Swin V2 {_SWIN}"),
    ("swin_transformer_v2_cr.SwinTransformerV2Cr", f"Swin V2 {_SWIN}"),
    ("levit.Levit", "LeViT subsamples its tokens between stages"),
    ("mvitv2.MultiScaleVit", "MViTv2 pools its queries, keys and values, shrinking the token grid between stages"),
    ("pit.PoolingVisionTransformer", "PiT pools its tokens into a coarser grid between stages"),
    ("hiera.Hiera", "Hiera attends within mask units and pools its tokens between stages"),
    ("tiny_vit.TinyVit", "TinyViT attends within windows in stages after convolutional ones"),
    ("pvt_v2.PyramidVisionTransformerV2", "PVT v2 attends to pooled keys in stages"),
    ("twins.Twins", "Twins attends within windows and to subsampled keys, in stages"),
    ("xcit.Xcit", "XCiT's cross-covariance attention mixes channels, not tokens (only its last class-attention "
                  "layers attend over the tokens)"),
    ("crossvit.CrossVit", "CrossViT runs two token sequences at two patch sizes that exchange only their class "
                          "tokens"),
)
"""timm's attention models vitroll refuses, each with why (``timm.models.`` module and class, reason)."""

for _model_class, _why in _REFUSED:
    add_refusal(f"timm.models.{_model_class}", f"{_why}: {_NO_SEQUENCE}")
