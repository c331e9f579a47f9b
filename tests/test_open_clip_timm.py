"""open_clip models whose vision tower wraps a timm trunk (``TimmModel``: ViT-B-16-SigLIP's ViT with a 'map' head,
EVA02-B-16's Eva read at its class token), on tiny trunks: rollout equals the float64 rollout of the trunk's attention
read at its own decision row, chefer of each image–text pair equals a per-pair float64 autograd reference, and
ResNet / ConvNeXt towers are refused in one line saying why."""

from __future__ import annotations

import copy

import numpy as np
from huggingface_hub import constants
from PIL import Image
import open_clip
import pytest
import torch

import vitroll
from image_text_models import clip_tokenizer, open_clip_timm_model, tiny_timm_trunks
from reference import reference_attention, reference_chefer, reference_pool_row, reference_rollout
from test_image_text import INPUT_IDS, PHOTO, images
from vitroll.cli import main
from vitroll.errors import UnsupportedModelError
from vitroll.preprocess import Preprocessing

NAMES = ("siglip", "eva02")


def decision_row(name: str, trunk: torch.nn.Module, image: torch.Tensor) -> np.ndarray | None:
    """The trunk's own readout for ONE image: SigLIP's pooling query's attention; None for EVA02's class token."""
    return reference_pool_row(trunk, image) if name == "siglip" else None


def chefer_reference(name: str, model: torch.nn.Module, image: torch.Tensor, text: int) -> np.ndarray:
    """ONE pair in float64 on the trunk's unfused path: open_clip's ``get_logits(image, texts)[0, text]`` (SigLIP's
    with its bias) backpropagated to each block's attention, read out at the trunk's decision row."""
    reference = copy.deepcopy(model).double().eval()
    kept: list[torch.Tensor] = []

    def keep(_module, _inputs, output):
        output.retain_grad()
        kept.append(output)

    for block in reference.visual.trunk.blocks:
        block.attn.fused_attn = False
        block.attn.attn_drop.register_forward_hook(keep)
    reference.get_logits(image.double(), INPUT_IDS)[0][0, text].backward()
    num_prefix = 0 if name == "siglip" else 1
    return reference_chefer([a[0].detach().numpy() for a in kept], [a.grad[0].numpy() for a in kept], num_prefix,
                            (4, 4), decision_row(name, model.visual.trunk, image))


@pytest.mark.parametrize("name", NAMES)
def test_rollout_equals_the_float64_rollout_of_the_trunks_attention_at_its_decision_row(name):
    model, pixels = open_clip_timm_model(name), images()
    maps = vitroll.rollout(model, pixels)
    assert maps.shape == (2, 4, 4)
    trunk = model.visual.trunk
    for i in range(2):
        expected = reference_rollout(reference_attention(trunk, pixels[i:i + 1]), num_prefix=trunk.num_prefix_tokens,
                                     grid=(4, 4), class_token=name == "eva02",
                                     readout=decision_row(name, trunk, pixels[i:i + 1]))
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(vitroll.image_text_maps(model, pixels, INPUT_IDS, method="rollout")[:, 2], maps)


@pytest.mark.parametrize("name", NAMES)
def test_chefer_maps_equal_the_per_pair_float64_reference(name):
    model, pixels = open_clip_timm_model(name), images()
    maps = vitroll.image_text_maps(model, pixels, INPUT_IDS)
    assert maps.shape == (2, 3, 4, 4) and maps.dtype == torch.float32
    for i in range(2):
        for t in range(3):
            np.testing.assert_allclose(maps[i, t].numpy(), chefer_reference(name, model, pixels[i:i + 1], t),
                                       rtol=1e-4, atol=1e-4)
    assert (maps[:, 0] - maps[:, 1]).abs().max() > 1e-2 * maps.abs().max()  # two texts, two maps


def test_the_preprocessing_is_open_clips_not_timms():
    model = open_clip_timm_model("siglip")
    open_clip.set_model_preprocess_cfg(model, dict(size=32, mode="RGB", mean=(0.5,) * 3, std=(0.5,) * 3,
                                                   interpolation="bilinear", resize_mode="squash"))
    preprocessing = Preprocessing.from_model(model)
    assert (preprocessing.input_size, preprocessing.mean, preprocessing.std, preprocessing.interpolation,
            preprocessing.crop_mode, preprocessing.crop_pct) == ((32, 32), (0.5,) * 3, (0.5,) * 3, "bilinear",
                                                                 "squash", 1.0)


NO_TOKEN_ATTENTION = ("has no token attention for rollout to follow (a CNN: its features are maps, not a token "
                      "sequence); vitroll explains open_clip's ViT towers and timm ViT trunks (SigLIP, EVA02); use "
                      "Grad-CAM (pip install grad-cam)")


def test_resnet_and_convnext_towers_are_refused_saying_they_have_no_token_attention():
    torch.manual_seed(0)
    text = dict(context_length=7, vocab_size=100, width=32, heads=2, layers=1)
    resnet = open_clip.model.CLIP(32, dict(layers=(1, 1, 1, 1), width=8, image_size=32), text)
    convnext = open_clip.model.CustomTextCLIP(32, dict(timm_model_name="convnext_atto", image_size=32), text)
    with pytest.raises(UnsupportedModelError) as refused:
        vitroll.rollout(resnet, images())
    assert str(refused.value) == f"ModifiedResNet: open_clip's ResNet tower (RN50, …) {NO_TOKEN_ATTENTION}"
    with pytest.raises(UnsupportedModelError) as refused:
        vitroll.image_text_maps(convnext, images(), INPUT_IDS)
    assert str(refused.value) == f"this open_clip vision tower is timm's convnext_atto: ConvNeXt {NO_TOKEN_ATTENTION}"


def test_a_windowed_trunk_is_refused_with_timms_reason():
    with tiny_timm_trunks(img_size=32, window_size=2, embed_dim=8, depths=(1, 1), num_heads=(1, 1)):
        tower = open_clip.timm_model.TimmModel("swin_tiny_patch4_window7_224", 32, image_size=32)
    with pytest.raises(UnsupportedModelError, match=r"^this open_clip vision tower is timm's "
                                                    r"swin_tiny_patch4_window7_224: SwinTransformer: Swin attends"):
        vitroll.rollout(tower, images())


def test_overlay_text_on_open_clip_siglip_tokenises_with_the_cached_tokenizer_of_its_architecture(
        monkeypatch, tmp_path, capsys):
    """``open_clip:ViT-B-16-SigLIP`` (built tiny here) has SigLIP's vocabulary: ``--text`` needs its tokenizer, which
    open_clip fetches from the Hugging Face hub and vitroll takes from the cache only."""
    asked = []

    def cached_tokenizer(architecture: str):
        asked.append((architecture, constants.HF_HUB_OFFLINE))
        return lambda texts: torch.tensor([[3 + len(text), 5, 7, 9, 0, 0, 0] for text in texts])

    monkeypatch.setattr(open_clip, "create_model", lambda architecture, pretrained: open_clip_timm_model("siglip"))
    monkeypatch.setattr(open_clip, "get_tokenizer", cached_tokenizer)
    out = tmp_path / "out"
    assert main(["overlay", str(PHOTO), "--model", "open_clip:ViT-B-16-SigLIP", "--text", "a dog", "--text",
                 "a tabby cat", "--out", str(out), "--device", "cpu"]) == 0, capsys.readouterr().err
    assert asked == [("ViT-B-16-SigLIP", True)]
    assert sorted(path.name for path in out.iterdir()) == ["cat_chefer_a-dog.png", "cat_chefer_a-tabby-cat.png",
                                                           "cat_chefer_texts.png"]
    dog, cat = (np.asarray(Image.open(out / f"cat_chefer_a-{name}.png")) for name in ("dog", "tabby-cat"))
    assert dog.shape == (*Image.open(PHOTO).size[::-1], 3) and not np.array_equal(dog, cat)


def test_overlay_text_without_the_cached_tokenizer_says_how_to_get_it_in_one_line(monkeypatch, tmp_path, capsys):
    def offline(_architecture: str):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(open_clip, "create_model", lambda architecture, pretrained: open_clip_timm_model("siglip"))
    monkeypatch.setattr(open_clip, "get_tokenizer", offline)
    assert main(["overlay", str(PHOTO), "--model", "open_clip:ViT-B-16-SigLIP", "--text", "a dog",
                 "--out", str(tmp_path), "--device", "cpu"]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vitroll: error")]
    assert error == ["vitroll: error: this open_clip model's vocabulary has 100 tokens, not those of open_clip's "
                     "default tokenizer (49408): pass tokenizer=open_clip.get_tokenizer(MODEL_NAME), or input_ids (on "
                     "the command line, open_clip:MODEL_NAME uses that tokenizer once it is in the Hugging Face cache: "
                     "call open_clip.get_tokenizer(MODEL_NAME) once online)"]


@pytest.mark.parametrize("architecture, reason", [
    ("RN50", f"open_clip's ResNet tower (RN50, …) {NO_TOKEN_ATTENTION}"),
    ("convnext_base", f"its vision tower is timm's convnext_base (timm.models.convnext): it {NO_TOKEN_ATTENTION}"),
    ("swin_base_patch4_window7_224", "its vision tower is timm's swin_base_patch4_window7_224 "
                                     "(timm.models.swin_transformer): Swin attends within shifted windows"),
], ids=["resnet", "convnext", "swin"])
def test_open_clip_names_of_towers_without_token_attention_are_refused_before_building_or_reading(
        monkeypatch, tmp_path, capsys, architecture, reason):
    def never(*_args, **_kwargs):
        raise AssertionError("built")

    monkeypatch.setattr(open_clip, "create_model", never)
    assert main(["overlay", str(PHOTO), "--model", f"open_clip:{architecture}", "--text", "a dog",
                 "--checkpoint", str(tmp_path / "absent.safetensors"), "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"vitroll: error: open_clip:{architecture}: {reason}")


def test_a_hugging_face_tokenizer_padding_with_its_end_token_warns_of_the_cut_texts_only(tmp_path, capsys):
    """open_clip's ``HFTokenizer`` (SigLIP's) pads with the tokenizer's pad token, here its end token (not 0): the
    text that fits (exactly, or with padding) is not cut, the longer one is, whatever ids it holds (0 is a letter)."""
    clip_tokenizer(tmp_path).save_pretrained(str(tmp_path))
    tokenizer = open_clip.tokenizer.HFTokenizer(str(tmp_path), context_length=7)
    maps = vitroll.image_text_maps(open_clip_timm_model("siglip"), images(1), ["a dog", "abcde", "abcdefghij"],
                                   tokenizer=tokenizer, method="rollout")
    assert maps.shape == (1, 3, 4, 4)
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: warning: 'abcdefghij' is longer than the text tower's 7 tokens and cut to them; shorten it to "
        "explain every word"]


def test_refusals_inside_a_tower_name_the_path_from_the_model_passed():
    """They named paths from the refused module itself: ``explain model[1]`` for the trunk's ViT at
    ``model.visual.trunk[1]``, ``compiled._orig_mod`` for a compiled tower."""
    text = dict(context_length=7, vocab_size=100, width=32, heads=2, layers=1)
    with tiny_timm_trunks(img_size=32, patch_size=8, embed_dim=8, depth=1, num_heads=1):
        clip = open_clip.model.CustomTextCLIP(32, dict(timm_model_name="vit_tiny_patch16_224", image_size=32), text)
    vit = clip.visual.trunk
    clip.visual.trunk = torch.nn.Sequential(torch.nn.Identity(), vit)
    held = ("this open_clip vision tower is timm's Sequential: Sequential is of no registered model family, but the "
            "VisionTransformer it holds is: explain {}, whose own preprocessing")
    for model, path in ((clip, "model.visual.trunk[1]"), (clip.visual, "model.trunk[1]")):
        with pytest.raises(UnsupportedModelError) as refused:
            vitroll.rollout(model, images())
        assert str(refused.value).startswith(held.format(path))
    with pytest.raises(UnsupportedModelError) as refused:
        vitroll.image_text_maps(clip, images(), INPUT_IDS)  # bound to its texts inside vitroll: still `model`
    assert str(refused.value).startswith(held.format("model.visual.trunk[1]"))
    clip.visual.trunk = vit
    clip.visual = torch.compile(clip.visual)
    with pytest.raises(UnsupportedModelError, match=r"explain the model it wraps, model\.visual\._orig_mod \(the"):
        vitroll.image_text_maps(clip, images(), INPUT_IDS)
