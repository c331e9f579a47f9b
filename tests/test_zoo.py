"""The timm ViT zoo: every supported family captures the attention its own weights compute.

Each family's captured per-head attention is compared with a manual ``softmax(q kᵀ · scale + bias)`` written
from the block's weights (rotary embedding and relative position bias applied by hand through the modules'
own helpers), and the model's output must not change when captured.
"""

from __future__ import annotations

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.layers import apply_rot_embed_cat

from vitroll import AttentionRecorder, UnsupportedModelError, rollout
from vitroll.methods.rollout import attention
from reference import sharpen_attention

SMALL = dict(depth=2, embed_dim=64, num_heads=2, pretrained=False)


def _heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, N, H·D) → (B, H, N, D)."""
    return t.reshape(*t.shape[:2], heads, -1).transpose(1, 2)


def _qkv(attn, x, bias=None):
    qkv = F.linear(x, attn.qkv.weight, attn.qkv.bias if bias is None else bias)
    q, k, _ = qkv.reshape(*x.shape[:2], 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    return q, k


def _split_bias(attn):
    return torch.cat((attn.q_bias, attn.k_bias, attn.v_bias)) if getattr(attn, "q_bias", None) is not None else None


def manual_vit(attn, x, kwargs):
    q, k = _qkv(attn, x)
    q, k = attn.q_norm(q), attn.k_norm(k)
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1)


def manual_rope(attn, x, kwargs):
    """EVA / AttentionRope: q/k norm, then the rotary embedding on the patch tokens, then softmax."""
    q, k = _qkv(attn, x, _split_bias(attn))
    q, k = attn.q_norm(q), attn.k_norm(k)
    rope, npt = kwargs["rope"], attn.num_prefix_tokens
    half = getattr(attn, "rotate_half", False)
    q = torch.cat([q[:, :, :npt], apply_rot_embed_cat(q[:, :, npt:], rope, half=half)], dim=2)
    k = torch.cat([k[:, :, :npt], apply_rot_embed_cat(k[:, :, npt:], rope, half=half)], dim=2)
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1)


def manual_beit(attn, x, kwargs):
    """BEiT: split q/v biases, relative position bias added to the logits before the softmax."""
    q, k = _qkv(attn, x, _split_bias(attn))
    logits = (q * attn.scale) @ k.transpose(-2, -1)
    if attn.relative_position_bias_table is not None:
        logits = logits + attn._get_rel_pos_bias()
    if kwargs.get("shared_rel_pos_bias") is not None:
        logits = logits + kwargs["shared_rel_pos_bias"]
    return logits.softmax(-1)


def manual_relpos(attn, x, kwargs):
    """vit_relpos: the block's own relative position bias (MLP or table), else the model's shared one."""
    q, k = _qkv(attn, x)
    q, k = attn.q_norm(q), attn.k_norm(k)
    bias = attn.rel_pos.get_bias() if attn.rel_pos is not None else kwargs["shared_rel_pos"]
    return ((q * attn.scale) @ k.transpose(-2, -1) + bias).softmax(-1)


def manual_talking_heads(attn, x, kwargs):
    """CaiT self-attention: logits mixed across heads (proj_l), then the softmax (proj_w mixes after it)."""
    q, k = _qkv(attn, x)
    logits = (q * attn.scale) @ k.transpose(-2, -1)
    return attn.proj_l(logits.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(-1)


def manual_class_attn(attn, x, kwargs):
    """CaiT class attention: the class token's query against all tokens, (B, H, 1, N)."""
    q = _heads(attn.q(x[:, :1]), attn.num_heads)
    k = _heads(attn.k(x), attn.num_heads)
    return ((q * attn.scale) @ k.transpose(-2, -1)).softmax(-1)


def manual_pool(pool, x, kwargs):
    """Attention pooling head: latent queries against the final tokens."""
    q = _heads(pool.q(pool.latent.expand(x.shape[0], -1, -1)), pool.num_heads)
    k = _heads(pool.kv(x)[..., : x.shape[-1]], pool.num_heads)
    q, k = pool.q_norm(q), pool.k_norm(k)
    return ((q * pool.scale) @ k.transpose(-2, -1)).softmax(-1)


def embed_cait(model, manual: list[torch.Tensor]) -> list[torch.Tensor]:
    """Expected CaiT records in the [class, patches] space, written out by hand."""
    n = manual[-1].shape[-1]
    out = []
    for index, m in enumerate(manual):
        full = torch.eye(n).repeat(*m.shape[:2], 1, 1)
        if index < len(model.blocks):
            full[:, :, 1:, 1:] = m
        else:
            full[:, :, 0:1, :] = m
        out.append(full)
    return out


# name, create_model kwargs, input (H, W), expected grid, manual per attention module
ZOO = [
    ("vit_tiny_patch16_224", dict(img_size=64), (64, 64), (4, 4), manual_vit),
    ("vit_tiny_patch16_224", dict(img_size=64, class_token=False, global_pool="avg"), (64, 64), (4, 4), manual_vit),
    ("vit_tiny_patch16_224", dict(img_size=64, dynamic_img_size=True), (80, 48), (5, 3), manual_vit),
    ("deit_tiny_patch16_224", dict(img_size=64), (64, 64), (4, 4), manual_vit),
    ("deit_tiny_distilled_patch16_224", dict(img_size=64), (64, 64), (4, 4), manual_vit),
    ("deit3_small_patch16_224", dict(img_size=64), (64, 64), (4, 4), manual_vit),
    ("vit_betwixt_patch16_reg4_gap_256", dict(img_size=64), (64, 64), (4, 4), manual_vit),
    ("vit_small_patch14_reg4_dinov2", dict(img_size=56, dynamic_img_size=True), (70, 42), (5, 3), manual_vit),
    ("flexivit_small", dict(img_size=64), (64, 64), (4, 4), manual_vit),
    ("vit_base_patch16_siglip_224", dict(img_size=64), (64, 64), (4, 4), manual_vit),
    ("eva02_tiny_patch14_224", dict(img_size=56, dynamic_img_size=True), (70, 56), (5, 4), manual_rope),
    ("vit_base_patch16_rope_224", dict(img_size=64), (64, 64), (4, 4), manual_rope),
    ("beit_base_patch16_224", dict(img_size=64), (64, 64), (4, 4), manual_beit),
    ("beitv2_base_patch16_224", dict(img_size=64, use_shared_rel_pos_bias=True, use_rel_pos_bias=False),
     (64, 64), (4, 4), manual_beit),
    ("cait_xxs24_224", dict(img_size=64), (64, 64), (4, 4), None),
    ("naflexvit_so150m2_patch16_reg1_map", {}, (48, 80), (3, 5), manual_vit),
    ("vit_relpos_base_patch16_224", dict(img_size=(48, 64)), (48, 64), (3, 4), manual_relpos),
    ("vit_relpos_base_patch16_cls_224", dict(img_size=64), (64, 64), (4, 4), manual_relpos),
    ("vit_srelpos_small_patch16_224", dict(img_size=64), (64, 64), (4, 4), manual_relpos),
]


def _id(case) -> str:
    name, kwargs = case[0], case[1]
    extras = "-".join(f"{k}={v}" for k, v in kwargs.items() if k != "img_size")
    return f"{name}[{extras}]" if extras else name


@pytest.mark.parametrize("case", ZOO, ids=[_id(c) for c in ZOO])
def test_family_captures_its_own_attention(case):
    """The blocked kernel in place of the model's fused kernel records the attention the block computes, and the
    model's output stays within 1e-5."""
    name, kwargs, image_hw, grid, manual = case
    model = sharpen_attention(timm.create_model(name, **SMALL, **kwargs), std=0.3)
    images = torch.randn(2, 3, *image_hw)

    # inputs of every attention module (and of the pooling head), to recompute their attention by hand
    recorder = AttentionRecorder(model, head_fusion=None)
    sites = recorder._modules + recorder._readout_modules
    inputs: list[tuple] = []
    handles = [m.register_forward_pre_hook(lambda _m, a, kw: inputs.append((a[0], kw)),
                                           with_kwargs=True) for m in sites]
    with torch.no_grad():
        plain = model(images)
        with recorder:
            captured = model(images)
    for handle in handles:
        handle.remove()
    inputs = inputs[len(sites):]  # the recorded pass only

    torch.testing.assert_close(captured, plain, atol=1e-5, rtol=1e-5)

    with torch.no_grad():
        if name.startswith("cait"):
            per_layer = [manual_talking_heads(m, x, kw) if i < len(model.blocks) else manual_class_attn(m, x, kw)
                         for i, (m, (x, kw)) in enumerate(zip(recorder._modules, inputs))]
            expected = embed_cait(model, per_layer)
        else:
            expected = [manual(m, x, kw) for m, (x, kw) in zip(recorder._modules, inputs)]
    attentions = recorder.attentions
    assert len(attentions) == len(expected) >= 2
    for got, want in zip(attentions, expected):
        assert got.shape == want.shape
        assert (got - want).abs().max().item() < 1e-5
        assert not torch.allclose(want, want.mean(-1, keepdim=True)), "sharpened attention must not be uniform"

    layout = recorder.token_layout(image_hw)
    assert layout.grid == grid
    if recorder._readout_modules:  # attention pooling: the readout is the pool's own attention
        pool, (x, kw) = recorder._readout_modules[0], inputs[-1]
        want = manual_pool(pool, x, kw).mean(dim=(1, 2))
        assert layout.readout == "attention_pool"
        skipped = layout.num_tokens - want.shape[-1]  # prefix tokens the pool does not read weigh 0
        assert (layout.pool_weights[:, skipped:] - want).abs().max().item() < 1e-5
        assert layout.pool_weights[:, :skipped].abs().sum() == 0

    for method in (rollout, attention):
        maps = method(model, images)
        assert maps.shape == (2, *grid) and torch.isfinite(maps).all()
        assert maps.std() > 0


def test_cait_rollout_reaches_patches_through_class_attention():
    model = timm.create_model("cait_xxs24_224", **SMALL, img_size=64).eval()
    with torch.no_grad(), AttentionRecorder(model) as recorder:
        model(torch.randn(1, 3, 64, 64))
    layers = recorder.attentions
    assert [a.shape for a in layers] == [(1, 17, 17)] * 4
    for a in layers[:2]:  # self-attention stage: the class token does not exist yet
        assert a[0, 0, 0] == 1 and a[0, 0, 1:].abs().sum() == 0 and a[0, 1:, 0].abs().sum() == 0
    for a in layers[2:]:  # class-attention stage: only the class token's row moves
        torch.testing.assert_close(a[0, 1:, 1:], torch.eye(16))
        torch.testing.assert_close(a[0, 0].sum(), torch.tensor(1.0))


@pytest.mark.parametrize("name", ["convnext_atto", "resnet18"])
def test_non_vit_models_are_refused_by_family(name):
    model = timm.create_model(name, pretrained=False).eval()
    with pytest.raises(UnsupportedModelError,
                       match=rf"{type(model).__name__} has no token attention.*vit.*eva.*beit.*cait"):
        rollout(model, torch.randn(1, 3, 64, 64))


@pytest.mark.parametrize(("name", "kwargs", "line"), [
    ("swin_tiny_patch4_window7_224", dict(embed_dim=24, depths=(1, 1), num_heads=(1, 2), img_size=64, window_size=4),
     "SwinTransformer: Swin attends within shifted windows"),
    ("levit_128s", dict(img_size=64), "LevitDistilled: LeViT subsamples its tokens between stages"),
    ("xcit_nano_12_p16_224", dict(img_size=64, depth=1), "Xcit: XCiT's cross-covariance attention mixes channels"),
    ("pit_ti_224", dict(img_size=64), "PoolingVisionTransformer: PiT pools its tokens"),
])
def test_staged_windowed_or_channel_attention_models_are_refused_saying_why(name, kwargs, line):
    """A built model passed to the Python API is refused with the same reason as its name on the command line."""
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    with pytest.raises(UnsupportedModelError) as refused:
        rollout(model, torch.randn(1, 3, 64, 64))
    assert str(refused.value).startswith(line)
    assert str(refused.value).endswith("no single token sequence runs from the image to the class score for rollout "
                                       "to follow; use Grad-CAM (pip install grad-cam)")
