"""Hugging Face transformers' vision models, built from small configs: capture through the attention interface."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import vitroll  # noqa: E402
from reference import (aimv2_query_weights, reference_chefer, reference_flow, reference_grad_rollout,  # noqa: E402
                       reference_integrated_gradients, reference_rollout)
from test_attributions import absolute_patch_means  # noqa: E402
from vitroll.capture import AttentionRecorder  # noqa: E402
from vitroll.errors import UnsupportedModelError  # noqa: E402
from vitroll.metrics import deletion_insertion  # noqa: E402
from vitroll.methods.base import model_logits  # noqa: E402
from vitroll.pipelines.compare import Explainer, compare  # noqa: E402
from vitroll.pipelines.evaluate import evaluate, shapes_images  # noqa: E402
from vitroll.pipelines.explain import ExplainSettings  # noqa: E402
from vitroll.pipelines.folder import annotate  # noqa: E402
from vitroll.pipelines.sanity import sanity_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
             patch_size=8)

MODELS = {
    "vit": (transformers.ViTForImageClassification, transformers.ViTConfig, dict(num_labels=3)),
    "deit-teacher": (transformers.DeiTForImageClassificationWithTeacher, transformers.DeiTConfig, dict(num_labels=3)),
    "dinov2": (transformers.Dinov2ForImageClassification, transformers.Dinov2Config, dict(num_labels=3)),
    "dinov2-registers": (transformers.Dinov2WithRegistersModel, transformers.Dinov2WithRegistersConfig,
                         dict(num_register_tokens=4)),
    "dinov3": (transformers.DINOv3ViTModel, transformers.DINOv3ViTConfig, dict(num_register_tokens=4)),
    "ijepa": (transformers.IJepaForImageClassification, transformers.IJepaConfig, dict(num_labels=3)),
    "beit": (transformers.BeitForImageClassification, transformers.BeitConfig,
             dict(num_labels=3, use_relative_position_bias=True)),
    "beit-shared-bias-class-token": (transformers.BeitForImageClassification, transformers.BeitConfig,
                                     dict(num_labels=3, use_shared_relative_position_bias=True,
                                          use_mean_pooling=False)),
    "data2vec-vision": (transformers.Data2VecVisionForImageClassification, transformers.Data2VecVisionConfig,
                        dict(num_labels=3, use_relative_position_bias=True)),
    "vit-msn": (transformers.ViTMSNForImageClassification, transformers.ViTMSNConfig, dict(num_labels=3)),
    "vit-mae": (transformers.ViTMAEModel, transformers.ViTMAEConfig, dict(mask_ratio=0.0)),
    "clip-vision": (transformers.CLIPVisionModelWithProjection, transformers.CLIPVisionConfig, dict(projection_dim=16)),
    "siglip-vision": (transformers.SiglipVisionModel, transformers.SiglipVisionConfig, {}),
    "metaclip2-vision": (transformers.MetaClip2VisionModelWithProjection, transformers.MetaClip2VisionConfig,
                         dict(projection_dim=16)),
    "aimv2-native": (transformers.Aimv2VisionModel, transformers.Aimv2VisionConfig, dict(is_native=True)),
    "aimv2-learned-positions": (transformers.Aimv2VisionModel, transformers.Aimv2VisionConfig, {}),
    "mlcd-vision": (transformers.MLCDVisionModel, transformers.MLCDVisionConfig, {}),
    "pixio": (transformers.PixioModel, transformers.PixioConfig, dict(n_cls_tokens=4, mlp_ratio=2)),
    "dinov2-backbone": (transformers.Dinov2Backbone, transformers.Dinov2Config, dict(out_indices=[1])),
    "dinov2-registers-backbone": (transformers.Dinov2WithRegistersBackbone, transformers.Dinov2WithRegistersConfig,
                                  dict(num_register_tokens=4, out_indices=[1])),
    "dinov3-backbone": (transformers.DINOv3ViTBackbone, transformers.DINOv3ViTConfig,
                        dict(num_register_tokens=4, out_indices=[1])),
    "pixio-backbone": (transformers.PixioBackbone, transformers.PixioConfig,
                       dict(n_cls_tokens=4, mlp_ratio=2, out_indices=[1])),
    "beit-backbone": (transformers.BeitBackbone, transformers.BeitConfig,
                      dict(use_relative_position_bias=True, out_indices=[1])),
}


def on_a_vision_tower(config_class: type, vision_class: type) -> Callable[..., object]:
    """The config of an image–text model whose vision tower is built from the small settings (a classifier on it)."""

    def config(*, attn_implementation: str, num_labels: int, **vision: object) -> object:
        text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        return config_class(vision_config=vision_class(**vision).to_dict(), text_config=text, num_labels=num_labels,
                            attn_implementation=attn_implementation)

    return config


MODELS.update({
    "clip-classifier": (transformers.CLIPForImageClassification,
                        on_a_vision_tower(transformers.CLIPConfig, transformers.CLIPVisionConfig), dict(num_labels=3)),
    "siglip-classifier": (transformers.SiglipForImageClassification,
                          on_a_vision_tower(transformers.SiglipConfig, transformers.SiglipVisionConfig),
                          dict(num_labels=3)),
    "metaclip2-classifier": (transformers.MetaClip2ForImageClassification,
                             on_a_vision_tower(transformers.MetaClip2Config, transformers.MetaClip2VisionConfig),
                             dict(num_labels=3)),
})
PREFIX = {"deit-teacher": 2, "dinov2-registers": 5, "dinov2-registers-backbone": 5, "dinov3": 5, "dinov3-backbone": 5,
          "ijepa": 0, "siglip-vision": 0, "siglip-classifier": 0, "aimv2-native": 0, "aimv2-learned-positions": 0,
          "pixio": 4, "pixio-backbone": 4}
BACKBONES = ("vit-mae", "dinov3", "clip-vision", "siglip-vision", "metaclip2-vision", "aimv2-native",
             "aimv2-learned-positions", "mlcd-vision", "pixio", "dinov2-backbone", "dinov2-registers-backbone",
             "dinov3-backbone", "pixio-backbone", "beit-backbone")
"""Models without a classification head (transformers' ``…Backbone`` classes give feature maps)."""


def build(name: str, implementation: str = "sdpa") -> torch.nn.Module:
    """The model ``name`` with seeded weights, queries and keys drawn larger (peaked attention), relative position
    bias tables and AIMv2's pooling query non-zero; the same weights for every ``implementation``."""
    model_class, config_class, extra = MODELS[name]
    torch.manual_seed(0)
    model = model_class(config_class(**SMALL, **extra, attn_implementation=implementation)).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            if any(part in parameter_name for part in ("q_proj.weight", "k_proj.weight", "query.weight", "key.weight",
                                                       "relative_position_bias_table", "classifier.weight",
                                                       "head.cls_token")):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.4)
    return model


def class_tokens_mean(name: str, num_patches: int) -> np.ndarray | None:
    """The decision row of a model whose head reads several tokens, shape (N,): the class tokens' rows averaged where
    it pools their mean (Pixio) or averages their logits (DeiT with teacher); half the class token's row and half the
    patch tokens' mean where it reads the class token concatenated with that mean (the DINOv2 classifier)."""
    if name == "dinov2":
        return np.r_[0.5, np.full(num_patches, 0.5 / num_patches)]
    if name not in ("pixio", "pixio-backbone", "deit-teacher"):
        return None
    return np.r_[np.full(PREFIX[name], 1 / PREFIX[name]), np.zeros(num_patches)]


def images(batch: int = 2, size: int = 32) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(2))


def eager_attentions(name: str, pixels: torch.Tensor, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """Per layer (B, H, N, N) from the model's own eager path, ``output_attentions=True``."""
    model = build(name, "eager").to(dtype)
    extra = {"noise": torch.arange(16, dtype=dtype).expand(len(pixels), -1)} if name == "vit-mae" else {}
    with torch.no_grad():
        return list(model(pixel_values=pixels.to(dtype), output_attentions=True, **extra).attentions)


@pytest.mark.parametrize("name", MODELS)
def test_captured_attention_equals_the_eager_attentions_and_the_output_is_unchanged(name):
    model, pixels = build(name), images()
    with torch.no_grad():
        plain = model_logits(model, pixels) if name not in BACKBONES else None
        with AttentionRecorder(model, head_fusion=None) as recorder:
            recorded = model_logits(model, pixels)
    expected = eager_attentions(name, pixels)
    assert len(recorder.attentions) == len(expected) == 2
    for got, want in zip(recorder.attentions, expected):
        assert got.shape == want.shape and want.std() > 1e-2  # peaked enough to tell tokens apart
        assert (got - want).abs().max().item() < 1e-5
    layout = recorder.token_layout((32, 32))
    assert (layout.num_prefix_tokens, layout.grid) == (PREFIX.get(name, 1), (4, 4))
    if plain is not None:
        assert (recorded - plain).abs().max().item() < 1e-5  # against the model's own SDPA path
    else:
        assert recorded is None  # a backbone: no classification head
    own = getattr(model.config, "vision_config", model.config)  # a classifier on an image–text model's tower
    assert all(module.config is own for module in recorder._modules if hasattr(module, "config"))
    assert model.config._attn_implementation == "sdpa"


ANY_SIZE = ("dinov2", "dinov2-registers", "dinov3", "aimv2-native", "mlcd-vision", "pixio", "dinov2-backbone",
            "dinov2-registers-backbone", "dinov3-backbone", "pixio-backbone")
"""Models that take any input size without being asked (``interpolate_pos_encoding``)."""


@pytest.mark.parametrize("name", [name for name in MODELS if name != "aimv2-learned-positions"])
def test_a_non_square_input_of_another_size_interpolates_the_position_embeddings(name):
    """24×40 pixels on models built for 32×32: a 3×5 grid, the attention of the model's own eager path asked to
    interpolate (DINOv2, DINOv3, native AIMv2, MLCD and Pixio always do), the logits of its SDPA path, and rollout equal
    to the float64 reference."""
    pixels = torch.randn(2, 3, 24, 40, generator=torch.Generator().manual_seed(4))
    asked = {} if name in ANY_SIZE else {"interpolate_pos_encoding": True}
    if name == "vit-mae":
        asked["noise"] = torch.arange(15, dtype=torch.float64).expand(2, -1)
    with torch.no_grad():
        with AttentionRecorder(build(name), head_fusion=None) as recorder:
            recorded = model_logits(recorder.model, pixels)
        eager = build(name, "eager").double()(pixel_values=pixels.double(), output_attentions=True, **asked)
        sdpa = build(name)(pixel_values=pixels, **{key: value.float() if torch.is_tensor(value) else value
                                                   for key, value in asked.items()})
    for got, want in zip(recorder.attentions, eager.attentions):
        assert got.shape == want.shape and (got.double() - want).abs().max().item() < 1e-5
    layout = recorder.token_layout((24, 40))
    assert layout.grid == (3, 5)
    if recorded is not None:
        assert (recorded - sdpa.logits).abs().max().item() < 1e-5
    if layout.readout != "attention_pool":
        maps = vitroll.rollout(build(name), pixels)
        for index in range(len(pixels)):
            expected = reference_rollout([layer[index].numpy() for layer in eager.attentions],
                                         num_prefix=layout.num_prefix_tokens, grid=(3, 5),
                                         class_token=layout.readout == "class_token",
                                         readout=class_tokens_mean(name, 15))
            assert np.abs(maps[index].numpy() - expected).max() < 1e-5


@pytest.mark.parametrize("name", ["vit", "deit-teacher", "dinov2", "dinov2-registers", "dinov3", "beit",
                                  "beit-shared-bias-class-token", "ijepa", "clip-vision", "metaclip2-vision",
                                  "mlcd-vision", "pixio", "dinov2-backbone", "dinov2-registers-backbone",
                                  "dinov3-backbone", "pixio-backbone", "beit-backbone"])
def test_rollout_equals_the_float64_reference_on_the_eager_attentions(name):
    """The backbones (``Dinov2Backbone``, ``BeitBackbone``, …) were refused ("no token attention", or "explain
    model.pixio") though they attend with their model's attention modules."""
    pixels = images()
    maps = vitroll.rollout(build(name), pixels)
    expected_layers = eager_attentions(name, pixels.double(), torch.float64)
    class_token = name not in ("beit", "beit-backbone", "ijepa")  # BEiT and I-JEPA pool the patch tokens' mean
    for index in range(len(pixels)):
        per_layer = [layer[index].numpy() for layer in expected_layers]
        expected = reference_rollout(per_layer, num_prefix=PREFIX.get(name, 1), grid=(4, 4), class_token=class_token,
                                     readout=class_tokens_mean(name, 16))
        assert np.abs(maps[index].numpy() - expected).max() < 1e-5


def reference_gradients(name: str, image: torch.Tensor, target: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """ONE image in float64 on the eager path: per layer the attention (H, N, N) and ∂ logit ``target`` / ∂ it,
    retained on the attention tensors transformers returns."""
    model = build(name, "eager").double()
    output = model(pixel_values=image.double(), output_attentions=True)
    for attention in output.attentions:
        attention.retain_grad()
    output.logits[0, target].backward()
    return [a[0].detach().numpy() for a in output.attentions], [a.grad[0].numpy() for a in output.attentions]


MEAN_POOLED = ("data2vec-vision", "ijepa", "clip-classifier", "siglip-classifier", "metaclip2-classifier")


@pytest.mark.parametrize("name", ["vit", "deit-teacher", "beit-shared-bias-class-token", *MEAN_POOLED])
def test_chefer_and_grad_rollout_equal_per_image_float64_autograd_on_the_eager_attentions(name):
    model, pixels = build(name), images()
    chefer_maps = vitroll.chefer(model, pixels, target_class=1)
    grad_maps = vitroll.grad_rollout(model, pixels, target_class=1)
    prefix = PREFIX.get(name, 1)
    for index in range(len(pixels)):
        attentions, gradients = reference_gradients(name, pixels[index:index + 1], 1)
        if name in MEAN_POOLED:  # the decision row is the mean of the patch tokens' rows
            relevance = np.eye(prefix + 16)
            for attention, gradient in zip(attentions, gradients):
                relevance = relevance + np.maximum(attention * gradient, 0).mean(axis=0) @ relevance
            expected = relevance[prefix:].mean(axis=0)[prefix:].reshape(4, 4)
            assert np.abs(chefer_maps[index].numpy() - expected).max() < 1e-5 * max(1.0, np.abs(expected).max())
            continue
        readout = class_tokens_mean(name, 16)
        expected = reference_chefer(attentions, gradients, prefix, (4, 4), readout=readout)
        assert np.abs(chefer_maps[index].numpy() - expected).max() < 1e-5 * max(1.0, np.abs(expected).max())
        expected = reference_grad_rollout(attentions, gradients, prefix, (4, 4), discard_ratio=0.9, readout=readout)
        assert np.abs(grad_maps[index].numpy() - expected).max() < 1e-5
    assert model.config._attn_implementation == "sdpa"


def test_the_siglip_attention_pool_is_the_readout_row():
    model, pixels = build("siglip-vision"), images()
    head = model.head
    with torch.no_grad():
        hidden = {}
        handle = head.register_forward_pre_hook(lambda _m, args: hidden.setdefault("x", args[0]))
        model(pixel_values=pixels)
        handle.remove()
        _, weights = head.attention(head.probe.repeat(len(pixels), 1, 1), hidden["x"], hidden["x"])  # heads averaged
    with AttentionRecorder(model) as recorder, torch.no_grad():
        model(pixel_values=pixels)
    layout = recorder.token_layout((32, 32))
    assert layout.readout == "attention_pool"
    assert (layout.pool_weights - weights[:, 0]).abs().max().item() < 1e-5
    maps = vitroll.attention(model, pixels)
    expected = torch.einsum("bn,bnm->bm", weights[:, 0], recorder.attentions[-1]).reshape(2, 4, 4)
    assert (maps - expected).abs().max().item() < 1e-5


def test_mae_with_masking_and_hierarchical_models_are_refused_in_one_line():
    model = build("vit-mae")
    model.config.mask_ratio = 0.75
    with pytest.raises(UnsupportedModelError) as raised:
        vitroll.rollout(model, images())
    assert str(raised.value) == ("ViTMAEModel with mask_ratio 0.75 keeps a random subset of the patches, so its tokens "
                                 "are not the patch grid; set model.config.mask_ratio = 0.0")
    swin = transformers.SwinModel(transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                          num_heads=[1, 2], window_size=4)).eval()
    with pytest.raises(UnsupportedModelError) as raised:
        vitroll.rollout(swin, images())
    assert str(raised.value) == (
        "SwinModel: Swin attends within shifted windows: a hierarchical model has no single token sequence that "
        "rollout could follow from layer to layer; use Grad-CAM (pip install grad-cam)")


def test_a_backbone_explains_attention_and_refuses_class_scores_in_one_line():
    model, pixels = build("clip-vision"), images()
    for method in ("rollout", "attention", "flow", "center"):
        assert getattr(vitroll, method)(model, pixels).shape == (2, 4, 4)
    message = ("CLIPVisionModelWithProjection has no classification head: there are no class scores to explain or "
               "evaluate; rollout, attention and flow explain its attention")
    for call in (lambda: vitroll.chefer(model, pixels), lambda: vitroll.integrated_gradients(model, pixels, steps=2),
                 lambda: deletion_insertion(model, pixels, torch.rand(2, 4, 4), targets=[0, 1], steps=2),
                 lambda: evaluate(model, shapes_images(1), ["rollout"], steps=2)):
        with pytest.raises(UnsupportedModelError) as raised:
            call()
        assert str(raised.value) == message
    assert vitroll.class_names(model) is None


def test_attention_flow_and_integrated_gradients_run_on_a_classifier_and_the_classes_come_from_id2label():
    model, pixels = build("vit"), images()
    recorded = vitroll.attention(model, pixels)
    expected = eager_attentions("vit", pixels)[-1].mean(dim=1)[:, 0, 1:].reshape(2, 4, 4)
    assert (recorded - expected).abs().max().item() < 1e-5
    assert vitroll.flow(model, pixels).shape == (2, 4, 4)
    assert vitroll.integrated_gradients(model, pixels, steps=4).shape == (2, 4, 4)
    assert vitroll.class_names(model) is None  # LABEL_0… are transformers' placeholders
    named = copy.deepcopy(model)
    named.config.id2label = {0: "cat", 1: "dog", 2: "rocket"}
    assert vitroll.class_names(named) == ["cat", "dog", "rocket"]


class LogitsOf(torch.nn.Module):
    """A transformers classifier as a plain ``images → logits`` module, for the references that call ``model(x)``."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def test_flow_and_integrated_gradients_equal_per_image_float64_references():
    """Flow from the eager float64 attentions of each image alone, by networkx; integrated gradients of each image's
    own class by a float64 Gauss–Legendre sum of autograd input gradients."""
    model, pixels, targets = build("vit"), images(), [2, 0]
    flows = vitroll.flow(model, pixels)
    gradients = vitroll.integrated_gradients(model, pixels, target_class=targets, steps=6)
    for i, target in enumerate(targets):
        per_layer = [a[0].mean(dim=0).numpy() for a in eager_attentions("vit", pixels[i:i + 1], torch.float64)]
        np.testing.assert_allclose(flows[i].numpy(), reference_flow(per_layer, 1, (4, 4)), atol=2e-6)
        pixel_level = reference_integrated_gradients(LogitsOf(model), pixels[i:i + 1], target, steps=6)
        expected = absolute_patch_means(pixel_level, patch=8)
        assert np.ptp(expected) > 1e-4
        np.testing.assert_allclose(gradients[i].numpy(), expected, rtol=1e-4, atol=1e-7)


def test_pipelines_run_on_a_tiny_transformers_vit(tmp_path):
    import timm

    model = build("vit")
    result = sanity_check(model, images(3), ["rollout"])
    assert result.stages == ["classifier", "vit.layers.1", "vit.layers.0"]
    scores = evaluate(model, shapes_images(2), ["rollout"], steps=2)
    assert len(scores.rows) == 2 and all(0 <= row["deletion_auc"] <= 1 for row in scores.rows)
    source = tmp_path / "in"
    source.mkdir()
    (source / "cat.jpg").write_bytes((ROOT / "sample_images" / "cat.jpg").read_bytes())
    summary = annotate(source, tmp_path / "out", model, ExplainSettings(method="chefer"), identity={"model": "hf"})
    assert summary.ok == 1
    timm_vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=3).eval()
    explainers = [Explainer(label, each, vitroll.Preprocessing.from_model(each))
                  for label, each in (("timm", timm_vit), ("hf", model), ("hf-again", model))]
    compared = compare([source / "cat.jpg"], explainers, ExplainSettings(method="rollout"))
    assert not compared.errors
    agreement = {(row["model_a"], row["model_b"]): row["spearman"] for row in compared.rows}
    assert agreement["hf", "hf-again"] == pytest.approx(1.0) and agreement["timm", "hf"] < 0.99


def test_only_the_recorded_modules_name_vitroll_while_recording_and_get_their_config_back_after_an_error():
    model = build("vit")
    modules = [layer.attention for layer in model.vit.layers]
    with pytest.raises(ZeroDivisionError), AttentionRecorder(model):
        assert [m.config._attn_implementation for m in modules] == ["vitroll", "vitroll"]
        assert model.config._attn_implementation == "sdpa" and model.config.output_attentions is False
        1 / 0
    assert all(m.config is model.config for m in modules) and model.config._attn_implementation == "sdpa"
    assert transformers.ViTConfig(**SMALL)._attn_implementation is None  # nothing global switched


def test_data2vec_built_eager_is_read_at_its_dropout():
    pixels = images()
    with AttentionRecorder(build("data2vec-vision", "eager"), head_fusion=None) as recorder, torch.no_grad():
        recorder.model(pixel_values=pixels)
    for got, want in zip(recorder.attentions, eager_attentions("data2vec-vision", pixels)):
        assert (got - want).abs().max().item() < 1e-5


REFUSED = {
    "swin": (lambda: transformers.SwinForImageClassification(transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4, num_labels=3)),
             "SwinForImageClassification: Swin attends within shifted windows: a hierarchical model"),
    "convnext": (lambda: transformers.ConvNextForImageClassification(transformers.ConvNextConfig(
        hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, num_labels=3)),
                 # it went on about a hierarchical model's token sequence, which is Swin's reason, not a CNN's
                 "ConvNextForImageClassification: ConvNeXt is a CNN: it has no attention for vitroll to read; use "
                 "Grad-CAM"),
    "pvt_v2": (lambda: transformers.PvtV2ForImageClassification(transformers.PvtV2Config(
        image_size=32, num_encoder_blocks=2, depths=[1, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
        sr_ratios=[2, 1], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2], num_labels=3)),
               "PvtV2ForImageClassification: PVT v2 attends to pooled keys in stages: a hierarchical model"),
    "hiera": (lambda: transformers.HieraForImageClassification(transformers.HieraConfig(
        embed_dim=16, image_size=[32, 32], patch_size=[4, 4], patch_stride=[2, 2], depths=[1, 1], num_heads=[1, 2],
        masked_unit_size=[4, 4], query_stride=[2, 2], num_query_pool=1, num_labels=3)),
              "HieraForImageClassification: Hiera attends within mask units and pools its tokens between stages: "
              "a hierarchical model"),
    "levit": (lambda: transformers.LevitForImageClassification(transformers.LevitConfig(
        image_size=32, hidden_sizes=[32, 48], num_attention_heads=[2, 2], depths=[1, 1], key_dim=[8, 8],
        down_ops=[["Subsample", 8, 2, 4, 2, 2]], num_labels=3)),
              "LevitForImageClassification: LeViT subsamples its tokens between stages: a hierarchical model"),
    "mobilevit": (lambda: transformers.MobileViTForImageClassification(transformers.MobileViTConfig(
        image_size=32, patch_size=2, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
        num_attention_heads=2, num_labels=3)),
                  "MobileViTForImageClassification: MobileViT attends across the patches of a feature map, once per "
                  "pixel position inside a patch, between convolutional stages: a hierarchical model"),
    "mobilevitv2": (lambda: transformers.MobileViTV2ForImageClassification(transformers.MobileViTV2Config(
        image_size=32, patch_size=2, width_multiplier=0.25, num_labels=3)),
                    "MobileViTV2ForImageClassification: MobileViT V2 attends through separable linear attention (one "
                    "context score per patch, no token-to-token matrix) between convolutional stages"),
    "swiftformer": (lambda: transformers.SwiftFormerForImageClassification(transformers.SwiftFormerConfig(
        depths=[1, 1, 1, 1], embed_dims=[8, 16, 24, 32], num_labels=3)),
                    "SwiftFormerForImageClassification: SwiftFormer attends through additive attention (one global "
                    "query, no token-to-token matrix) in convolutional stages"),
    "resnet": (lambda: transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=3)),
               "ResNetForImageClassification: ResNet is a CNN: it has no attention for vitroll to read; use Grad-CAM"),
    "regnet": (lambda: transformers.RegNetForImageClassification(transformers.RegNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8, num_labels=3)),
               "RegNetForImageClassification: RegNet is a CNN: it has no attention for vitroll to read"),
    "bit": (lambda: transformers.BitForImageClassification(transformers.BitConfig(
        embedding_size=32, hidden_sizes=[32, 32], depths=[1, 1], num_groups=8, num_labels=3)),
            "BitForImageClassification: BiT is a CNN (a ResNet V2): it has no attention for vitroll to read"),
    "efficientnet": (lambda: transformers.EfficientNetForImageClassification(transformers.EfficientNetConfig(
        image_size=32, width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=32, num_labels=3)),
                     "EfficientNetForImageClassification: EfficientNet is a CNN: it has no attention for vitroll"),
    "mobilenet_v1": (lambda: transformers.MobileNetV1ForImageClassification(transformers.MobileNetV1Config(
        image_size=32, depth_multiplier=0.25, num_labels=3)),
                     "MobileNetV1ForImageClassification: MobileNet V1 is a CNN: it has no attention for vitroll"),
    "mobilenet_v2": (lambda: transformers.MobileNetV2ForImageClassification(transformers.MobileNetV2Config(
        image_size=32, depth_multiplier=0.25, num_labels=3)),
                     "MobileNetV2ForImageClassification: MobileNet V2 is a CNN: it has no attention for vitroll"),
    "focalnet": (lambda: transformers.FocalNetForImageClassification(transformers.FocalNetConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], hidden_sizes=[8, 16], num_labels=3)),
                 "FocalNetForImageClassification: FocalNet mixes its tokens by focal modulation (depth-wise "
                 "convolutions and gates), not attention: it has no attention for vitroll to read; use Grad-CAM"),
    "poolformer": (lambda: transformers.PoolFormerForImageClassification(transformers.PoolFormerConfig(
        hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1], num_labels=3)),
                   "PoolFormerForImageClassification: PoolFormer mixes its tokens by pooling, not attention: it has "
                   "no attention for vitroll to read; use Grad-CAM"),
    "dinov3_convnext": (lambda: transformers.DINOv3ConvNextModel(transformers.DINOv3ConvNextConfig(
        hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1])),
                        "DINOv3ConvNextModel: DINOv3's ConvNeXt is a CNN (DINOv3's ViTs, model type dinov3_vit, are "
                        "supported): it has no attention for vitroll to read; use Grad-CAM"),
    "vitdet": (lambda: transformers.VitDetModel(transformers.VitDetConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32, pretrain_image_size=32,
        patch_size=8, window_size=2, window_block_indices=[0])),
               "VitDetModel: ViTDet attends within windows in its windowed layers"),
    "yolos": (lambda: transformers.YolosModel(transformers.YolosConfig(**{**SMALL, "image_size": [32, 32]},
                                                                       num_detection_tokens=3)),
              "YolosModel: YOLOS is a detector: its detection tokens follow the patches"),
    "siglip2": (lambda: transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=8,
        num_patches=16)),
                "Siglip2VisionModel: SigLIP 2 (NaFlex) takes its images as pre-cut patches"),
    "dpt": (lambda: transformers.DPTForDepthEstimation(transformers.DPTConfig(**SMALL)),
            "DPTForDepthEstimation: DPT is a dense predictor (depth, segmentation) that reassembles several layers' "
            "tokens: there is no class score per image"),
    "blip": (lambda: transformers.BlipForImageTextRetrieval(transformers.BlipConfig(
        vision_config=SMALL, text_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                              intermediate_size=64, vocab_size=100, encoder_hidden_size=32))),
             "BlipForImageTextRetrieval: BLIP matches and captions through a text model that cross-attends to the "
             "image inside its own class"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_hierarchical_windowed_and_other_non_vit_models_are_refused_with_their_reason(name, tmp_path, capsys):
    """They were refused with the generic "has no token attention" and the whole list of families (and from the
    command line with "no vitroll family reads its attention"), not why."""
    from vitroll.cli import main

    build_model, reason = REFUSED[name]
    torch.manual_seed(0)
    model = build_model().eval()
    with pytest.raises(UnsupportedModelError) as raised:
        vitroll.rollout(model, images())
    assert str(raised.value).startswith(reason) and "supported families" not in str(raised.value)
    model.save_pretrained(tmp_path / name)
    capsys.readouterr()  # transformers' shard-writing bar
    assert main(["overlay", str(ROOT / "sample_images" / "cat.jpg"), "--model", str(tmp_path / name),
                 "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and not (tmp_path / "out").exists()
    own_reason = reason.partition(": ")[2]
    assert error[0].startswith(f"vitroll: error: {tmp_path / name}: transformers model type "
                               f"'{model.config.model_type}' is not supported: {own_reason}")
    assert "the supported model types are aimv2, aimv2_vision_model, albert, beit, " in error[0]
    assert "dinov3_vit" in error[0]


@pytest.mark.parametrize("name", ["metaclip2-vision", "metaclip2-classifier", "aimv2-native", "mlcd-vision"])
def test_a_saved_clip_like_model_loads_as_its_class_with_clip_preprocessing(name, tmp_path):
    """AutoModel has no mapping for MetaCLIP 2's vision tower: it is built from the class its config names."""
    from vitroll.models import load_model

    saved = build(name)
    saved.save_pretrained(tmp_path / name)
    model = load_model(str(tmp_path / name))
    assert type(model) is type(saved)
    preprocessing = vitroll.Preprocessing.from_model(model)
    assert (preprocessing.mean, preprocessing.crop_mode, preprocessing.interpolation) == (
        (0.48145466, 0.4578275, 0.40821073), "center", "bicubic")
    torch.testing.assert_close(vitroll.rollout(model, images()), vitroll.rollout(saved, images()))


def aimv2_pool_weights(model: torch.nn.Module, pixels: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """AIMv2's pooling-query attention (B, N) in float64 by hand, heads averaged: softmax(q kᵀ / √d) of its learned
    query against the keys of the normed last tokens; and the eager path's attentions."""
    model = model.double()
    head, kept = model.head, {}
    handle = head.register_forward_pre_hook(lambda _module, args: kept.setdefault("tokens", args[0]))
    output = model(pixel_values=pixels.double(), output_attentions=True)
    handle.remove()
    return aimv2_query_weights(head, kept["tokens"]), list(output.attentions)


@pytest.mark.parametrize("name", ["aimv2-native", "aimv2-learned-positions"])
def test_aimv2_reads_out_its_pooling_query_and_rollout_equals_the_float64_reference(name):
    """AIMv2's attention-pooling head calls the attention kernel itself: its query's attention is the decision row."""
    pixels = images()
    with torch.no_grad():
        weights, eager = aimv2_pool_weights(build(name, "eager"), pixels)
        with AttentionRecorder(build(name)) as recorder:
            recorder.model(pixel_values=pixels)
        maps = vitroll.rollout(build(name), pixels)
        attention = vitroll.attention(build(name), pixels)
    layout = recorder.token_layout((32, 32))
    assert layout.readout == "attention_pool" and weights.std() > 1e-2
    assert (layout.pool_weights.double() - weights).abs().max().item() < 1e-5
    for index in range(len(pixels)):
        per_layer = [layer[index].numpy() for layer in eager]
        expected = reference_rollout(per_layer, num_prefix=0, grid=(4, 4), class_token=False,
                                     readout=weights[index].numpy())
        assert np.abs(maps[index].numpy() - expected).max() < 1e-5
        expected = weights[index].numpy() @ per_layer[-1].mean(axis=0)
        assert np.abs(attention[index].numpy() - expected.reshape(4, 4)).max() < 1e-5


def test_aimv2_with_learned_position_embeddings_refuses_another_size_in_one_line():
    with pytest.raises(ValueError) as raised:
        vitroll.rollout(build("aimv2-learned-positions"), torch.randn(1, 3, 24, 40))
    assert str(raised.value) == ("images of 24×40 do not fit the model: Aimv2VisionModel has learned position "
                                 "embeddings for 32×32 images only (it is not a native-resolution AIMv2), not 24×40")
