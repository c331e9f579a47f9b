"""The batched engine against the slow float64 reference, on several prefix-token layouts and grids."""

from __future__ import annotations


import numpy as np
import pytest
import timm
import torch

from vitroll import attention, rollout, rollout_matrix
from vitroll.errors import MethodOptionError
from vitroll.methods import discard_lowest, record_attention, rollout_vector
from reference import (both_prefix_rows, discard_rows, fuse, reference_attention, reference_case, reference_pool_row,
                       reference_rollout, sharpen_attention)

MODELS = {
    "vit_tiny": ("vit_tiny_patch16_224", {}, (224, 224)),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}, (224, 224)),
    "dinov2_reg4": ("vit_small_patch14_reg4_dinov2", {"img_size": 224}, (224, 224)),
    "non_square": ("vit_tiny_patch16_224", {"img_size": (224, 160)}, (224, 160)),
    "gap_reg4": ("vit_little_patch16_reg4_gap_256", {"img_size": 128}, (128, 128)),
}


@pytest.fixture(scope="module", params=list(MODELS))
def case(request):
    return reference_case(*MODELS[request.param], batch=3)


@pytest.mark.parametrize("head_fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("discard_ratio", [0.0, 0.9])
def test_rollout_matches_float64_reference(case, head_fusion, discard_ratio):
    model, images, per_image = case
    maps = rollout(model, images, head_fusion=head_fusion, discard_ratio=discard_ratio)
    _, layout, _ = record_attention(model, images[:1])
    assert maps.shape == (len(images), *layout.grid)
    for i, per_layer in enumerate(per_image):
        expected = reference_rollout(
            per_layer, num_prefix=layout.num_prefix_tokens, grid=layout.grid,
            class_token=layout.readout == "class_token", head_fusion=head_fusion, discard_ratio=discard_ratio,
            readout=both_prefix_rows(layout),
        )
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=1e-5, rtol=0)
    assert not torch.allclose(maps[0], maps[1]), "different images must give different maps"


def test_layouts_have_the_expected_prefix_tokens_and_grids():
    expected = {"vit_tiny": (1, "class_token", (14, 14)), "deit_distilled": (2, "prefix_mean", (14, 14)),
                "dinov2_reg4": (5, "class_token", (16, 16)), "non_square": (1, "class_token", (14, 10)),
                "gap_reg4": (4, "patch_mean", (8, 8))}
    for key, (name, kwargs, size) in MODELS.items():
        model = timm.create_model(name, pretrained=False, **kwargs).eval()
        _, layout, _ = record_attention(model, torch.randn(1, 3, *size))
        assert (layout.num_prefix_tokens, layout.readout, layout.grid) == expected[key], key


POOLED = {  # timm ViTs whose head pools the final tokens, and the tokens it pools
    "map_after_registers": dict(class_token=False, reg_tokens=4, global_pool="map"),  # vit_so150m_patch16_reg4_map_256
    "map_after_class_token": dict(global_pool="map"),
    "map_over_prefix": dict(class_token=False, reg_tokens=1, global_pool="map", pool_include_prefix=True),
    "avg_over_prefix": dict(reg_tokens=2, global_pool="avg", pool_include_prefix=True),
    "avg_after_prefix": dict(reg_tokens=2, global_pool="avg"),
    "prr_class_token": dict(reg_tokens=1, global_pool="prr"),  # parameter-free attention, then the class token
    "prr_mean": dict(class_token=False, global_pool="prr"),  # the same, then the mean
}


RELPOS = {  # timm's vit_relpos models: relative position bias, and their own pooling defaults
    "vit_relpos_base_patch16_224": (0, "patch_mean"),  # no class token, average pool
    "vit_relpos_base_patch16_cls_224": (1, "class_token"),
    "vit_relpos_base_patch16_clsgap_224": (1, "patch_mean"),  # class token, but the pool averages the patches
    "vit_srelpos_small_patch16_224": (0, "patch_mean"),  # one bias shared by every block
}


@pytest.mark.parametrize("name", RELPOS)
def test_relative_position_bias_models_match_reference(name):
    torch.manual_seed(0)
    model = sharpen_attention(timm.create_model(name, pretrained=False, img_size=(32, 48), patch_size=8, depth=2,
                                                embed_dim=32, num_heads=2, num_classes=3), std=0.3)
    images = torch.randn(2, 3, 32, 48)
    maps = rollout(model, images)
    _, layout, _ = record_attention(model, images[:1])
    assert (layout.num_prefix_tokens, layout.readout, layout.grid) == (*RELPOS[name], (4, 6))
    for i in range(len(images)):
        expected = reference_rollout(reference_attention(model, images[i:i + 1]), num_prefix=layout.num_prefix_tokens,
                                     grid=(4, 6), class_token=layout.readout == "class_token")
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=1e-6, rtol=0)


NAFLEX = {  # timm's NaFlexViT models given image batches: their prefix tokens and pooling
    "naflexvit_base_patch16_gap": (4, "patch_mean"),  # 4 register tokens, average pool
    "naflexvit_base_patch16_siglip": (0, "attention_pool"),
    "naflexvit_so150m2_patch16_reg1_map": (1, "attention_pool"),  # the pool skips the register token
    "naflexvit_base_patch16_radio_v3": (8, "class_token"),
}


@pytest.mark.parametrize("name", NAFLEX)
def test_naflex_models_match_reference(name):
    torch.manual_seed(0)
    model = sharpen_attention(timm.create_model(name, pretrained=False, patch_size=8, depth=2, embed_dim=32,
                                                num_heads=2, num_classes=3), std=0.3)
    images = torch.randn(2, 3, 32, 48)
    maps = rollout(model, images)
    _, layout, _ = record_attention(model, images[:1])
    assert (layout.num_prefix_tokens, layout.readout, layout.grid) == (*NAFLEX[name], (4, 6))
    for i in range(len(images)):
        pool_row = None if layout.readout == "class_token" else reference_pool_row(model, images[i:i + 1])
        expected = reference_rollout(reference_attention(model, images[i:i + 1]), num_prefix=layout.num_prefix_tokens,
                                     grid=(4, 6), class_token=pool_row is None, readout=pool_row)
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="not a multiple of the model's 8×8 patches"):
        rollout(model, torch.randn(1, 3, 36, 48))


@pytest.mark.parametrize("pool", POOLED)
def test_pooling_models_read_out_exactly_the_tokens_their_pool_reads(pool):
    torch.manual_seed(0)
    model = sharpen_attention(timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=(32, 48),
                                                patch_size=8, depth=2, embed_dim=32, num_heads=2, num_classes=3,
                                                **POOLED[pool]), std=0.3)
    images = torch.randn(2, 3, 32, 48)
    maps = rollout(model, images)
    for i in range(len(images)):
        expected = reference_rollout(reference_attention(model, images[i:i + 1]), num_prefix=model.num_prefix_tokens,
                                     grid=(4, 6), class_token=False, readout=reference_pool_row(model, images[i:i + 1]))
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=1e-6, rtol=0)


def test_start_layer_and_attention_weight_match_reference(case):
    model, images, per_image = case
    maps = rollout(model, images, start_layer=4, attention_weight=0.8)
    _, layout, _ = record_attention(model, images[:1])
    expected = reference_rollout(per_image[0], num_prefix=layout.num_prefix_tokens, grid=layout.grid,
                                 class_token=layout.readout == "class_token", attention_weight=0.8, start_layer=4,
                                 readout=both_prefix_rows(layout))
    np.testing.assert_allclose(maps[0].numpy(), expected, atol=1e-5, rtol=0)


def test_raw_attention_and_per_head_maps_match_reference(case):
    model, images, per_image = case
    fused = attention(model, images)
    per_head = attention(model, images, head_fusion=None)
    _, layout, _ = record_attention(model, images[:1])
    last = per_image[0][-1]
    if layout.readout == "class_token":
        rows = last[:, 0, :]
    elif layout.readout == "prefix_mean":
        rows = both_prefix_rows(layout) @ last
    else:
        rows = last[:, layout.num_prefix_tokens:, :].mean(axis=1)
    heads = rows[:, layout.num_prefix_tokens:].reshape(-1, *layout.grid)
    np.testing.assert_allclose(per_head[0].numpy(), heads, atol=1e-5, rtol=0)
    np.testing.assert_allclose(fused[0].numpy(), heads.mean(axis=0), atol=1e-5, rtol=0)


@pytest.mark.parametrize("head_fusion", ["max", "min"])
@pytest.mark.parametrize("layer", [-1, 0])
def test_raw_attention_fuses_heads_as_asked(case, head_fusion, layer):
    """``attention(head_fusion="max")`` was tested only through ``record_attention``: a head_fusion swapped for the
    mean between ``attention`` and the recorder went unseen. Every image against the float64 reference: the layer's
    heads fused, then its decision row (both prefix rows halved for distilled DeiT, the patch rows' mean for a
    pooled model)."""
    model, images, per_image = case
    maps = attention(model, images, head_fusion=head_fusion, layer=layer)
    _, layout, _ = record_attention(model, images[:1])
    prefix = layout.num_prefix_tokens

    def decision_row(matrix: np.ndarray) -> np.ndarray:
        if layout.readout == "class_token":
            row = matrix[0]
        elif layout.readout == "prefix_mean":
            row = both_prefix_rows(layout) @ matrix
        else:
            row = matrix[prefix:, :].mean(axis=0)
        return row[prefix:].reshape(layout.grid)

    for i, per_layer in enumerate(per_image):
        expected = decision_row(fuse(per_layer[layer], head_fusion))
        # the mean lies outside the tolerance (DINOv2's near-uniform first layer: by 4e-5 at least)
        assert np.abs(expected - decision_row(fuse(per_layer[layer], "mean"))).max() > 3e-5
        np.testing.assert_allclose(maps[i].numpy(), expected, atol=1e-5, rtol=0)


def test_full_matrix_row_equals_vector_chain(case):
    model, images, _ = case
    attentions, layout, _ = record_attention(model, images)
    matrix = rollout_matrix(attentions, layout, discard_ratio=0.5)
    vector = rollout_vector(attentions, layout, discard_ratio=0.5)
    readout = layout.readout_vector()
    torch.testing.assert_close(readout @ matrix, vector, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(matrix.sum(-1), torch.ones(matrix.shape[:2]), atol=1e-5, rtol=0)


def test_discard_lowest_drops_per_row_and_never_the_class_column():
    attention_rows = torch.tensor([[[0.05, 0.5, 0.3, 0.15], [0.4, 0.1, 0.2, 0.3], [0.01, 0.01, 0.97, 0.01],
                                    [0.25] * 4]])
    out = discard_lowest(attention_rows, 0.5, protected_column=0)
    expected = torch.tensor([[[0.05, 0.5, 0.0, 0.0], [0.4, 0.0, 0.0, 0.3], [0.01, 0.0, 0.97, 0.0], [0.25, 0, 0, 0]]])
    torch.testing.assert_close(out, expected)
    # rows, not columns: each row keeps its own largest entries (ties at the threshold all go)
    assert (out[0] > 0).sum(dim=1).tolist() == [2, 2, 2, 1]


@pytest.mark.parametrize("num_tokens, ratio, k", [(100, 0.29, 29), (100, 0.53, 53), (50, 0.58, 29), (197, 0.9, 177),
                                                  (4, 0.24999999999999997, 0)])
def test_discard_drops_the_floor_of_n_times_the_decimal_ratio(num_tokens, ratio, k):
    """k = ⌊N·ratio⌋ of the ratio as written: neither float32 (100 · 0.53 → 52) nor float64 (100 · 0.29 →
    28.999…) rounding may move it by one token, nor a margin for that round a ratio just below 1/N up to 1/N."""
    attention_rows = torch.rand(1, num_tokens, num_tokens, generator=torch.Generator().manual_seed(0))  # no ties
    for protected, dropped in ((None, k), (0, min(k, num_tokens - 1))):
        out = discard_lowest(attention_rows, ratio, protected_column=protected)
        assert ((out == 0).sum(dim=-1) == dropped).all()
        np.testing.assert_array_equal(out[0].numpy(),
                                      discard_rows(attention_rows[0].double().numpy(), ratio, protected))


def test_discard_reference_agrees_on_a_random_matrix():
    rng = np.random.default_rng(3)
    matrix = rng.dirichlet(np.ones(9), size=9)
    out = discard_lowest(torch.from_numpy(matrix)[None], 0.6, protected_column=0)[0].numpy()
    from reference import discard_rows

    np.testing.assert_array_equal(out, discard_rows(matrix, 0.6, 0))


def test_head_fusions_differ_and_are_ordered(case):
    model, images, per_image = case
    attentions = {f: record_attention(model, images[:1], head_fusion=f)[0][-1][0] for f in ("mean", "max", "min")}
    assert torch.all(attentions["min"] <= attentions["mean"] + 1e-7)
    assert torch.all(attentions["mean"] <= attentions["max"] + 1e-7)
    np.testing.assert_allclose(attentions["max"].numpy(), fuse(per_image[0][-1], "max"), atol=1e-5)


def test_invalid_options_raise_clear_errors():
    model = timm.create_model("vit_tiny_patch16_224").eval()
    images = torch.randn(1, 3, 224, 224)
    with pytest.raises(MethodOptionError, match=r"option 'head_fusion' of method 'rollout' takes 'mean' \| 'max' \| "
                                                 r"'min'; got 'median' \(str\)"):
        rollout(model, images, head_fusion="median")  # checked by the registry against the signature's Literal
    with pytest.raises(ValueError, match="discard_ratio"):
        rollout(model, images, discard_ratio=1.0)
    with pytest.raises(ValueError, match="attention_weight"):
        rollout(model, images, attention_weight=0.0)
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        rollout(model, images[0])


def test_a_discard_ratio_too_high_for_the_models_tokens_warns_naming_it_once_a_call_or_a_run(capsys):
    """discard_ratio=0.99 on a model of 17 tokens drops every column but the class token's: every map was all 0, drawn
    as one flat colour, with no word. One line a call; a command's run (told_at_the_end) adds up all its batches in
    one line (it told the first batch that had such maps only); none for a ratio that keeps a patch; grad_rollout
    says the same."""
    from vitroll import grad_rollout
    from vitroll.wording import told_at_the_end

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=10).eval()
    images = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    kept = rollout(model, images, discard_ratio=0.94)  # ⌊0.94 · 17⌋ = 15 dropped: one patch kept in each row
    assert bool((kept.flatten(1).amax(1) > kept.flatten(1).amin(1)).all())
    assert capsys.readouterr().err == ""
    cause = ("discard_ratio=0.99 drops 16 of the 17 attention weights in each row, all but the class token's, which "
             "leaves no patch any: too high for this model's 17 tokens, discard_ratio=0.9411 or lower keeps some")
    for _ in range(2):
        assert torch.equal(rollout(model, images, discard_ratio=0.99), torch.zeros(2, 4, 4))
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: rollout's map is constant (all 0) for 2 of the 2 inputs of the batch (0, 1): {cause}"] * 2
    with told_at_the_end():
        for batch in (images, images[:1], images[:1]):
            rollout(model, batch, discard_ratio=0.99)
            rollout(model, batch, discard_ratio=0.94)
        assert capsys.readouterr().err == ""  # told at the end
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: rollout's map is constant (all 0 for the first) for 4 inputs of the run, in 3 of its "
        f"batches: {cause}"]
    assert torch.equal(grad_rollout(model, images[:1], discard_ratio=0.99), torch.zeros(1, 4, 4))
    assert capsys.readouterr().err.startswith("vitroll: warning: grad_rollout's map is constant (all 0) for input 0 "
                                              "of the batch: discard_ratio=0.99 drops 16 of the 17")


def test_the_ratio_the_constant_map_warning_names_keeps_a_patch_and_is_worded_as_the_flag_on_the_command_line(
        capsys):
    """The warning said 'a discard_ratio below 0.9412' for 17 tokens ((n - 1)/n = 0.941176… rounded up), yet 0.94118
    is below it and drops every patch; and it named discard_ratio= to a command line that set --discard-ratio."""
    from vitroll.wording import worded_for_the_command_line

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=10).eval()
    images = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(rollout(model, images, discard_ratio=0.94118), torch.zeros(1, 4, 4))
    assert "discard_ratio=0.9411 or lower keeps some" in capsys.readouterr().err
    named = rollout(model, images, discard_ratio=0.9411).flatten()
    assert float(named.amax()) > float(named.amin()) and capsys.readouterr().err == ""
    with worded_for_the_command_line():
        rollout(model, images, discard_ratio=0.99)
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: warning: rollout's map is constant (all 0) for input 0 of the batch: --discard-ratio 0.99 drops 16 "
        "of the 17 attention weights in each row, all but the class token's, which leaves no patch any: too high for "
        "this model's 17 tokens, --discard-ratio 0.9411 or lower keeps some"]
