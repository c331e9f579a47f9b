"""Image–text maps for CLIP-like dual encoders (transformers CLIPModel, SiglipModel, MetaClip2Model and Aimv2Model,
open_clip's CLIP), on models built from small configs: chefer equals a per-pair float64 reference computed with
autograd on the eager attentions (``logits_per_image[i, t]`` as the score), texts matter for chefer and not for
rollout, capture leaves the logits alone, and bad inputs are refused with their messages."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Optional

import numpy as np
import open_clip
import pytest
import torch

transformers = pytest.importorskip("transformers")
from PIL import Image  # noqa: E402

import vitroll  # noqa: E402
from image_text_models import BOS, EOS, VISION, clip_tokenizer, hf_model, sharpened  # noqa: E402
from reference import (  # noqa: E402
    aimv2_query_weights, multihead_attention_by_hand, reference_chefer, reference_grad_rollout, reference_rollout,
)
from vitroll.adapters.image_text import PromptedModel, text_inputs  # noqa: E402
from vitroll.adapters.tokenizers import registered_tokenizer  # noqa: E402
from vitroll.capture import AttentionRecorder  # noqa: E402
from vitroll.cli import main  # noqa: E402
from vitroll.errors import (  # noqa: E402
    InputValueError, MethodOptionError, OptionValueError, UnsupportedModelError, VitrollError,
)
from vitroll.methods import Method, prompted_saliency  # noqa: E402
from vitroll.models import load_model  # noqa: E402

INPUT_IDS = torch.tensor([[BOS, 3, 14, 6, EOS, EOS, EOS], [BOS, 2, 0, 19, 40, 9, EOS], [BOS, 26, 11, 12, 8, EOS, EOS]])
ATTENTION_MASK = (torch.arange(7) <= (INPUT_IDS == EOS).int().argmax(-1, keepdim=True)).long()


def open_clip_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = open_clip.model.CLIP(16, dict(layers=2, width=32, head_width=16, image_size=32, patch_size=8),
                                 dict(context_length=7, vocab_size=100, width=32, heads=2, layers=1))
    return sharpened(model, ("visual.transformer.resblocks.0.attn.in_proj_weight",
                             "visual.transformer.resblocks.1.attn.in_proj_weight"))


def images(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(2))


Pair = tuple[list[np.ndarray], list[np.ndarray], int, Optional[np.ndarray]]
"""One image–text pair in float64: per vision layer the attention (H, N, N) and the gradient of the pair's logit
with respect to it, the prefix tokens before the patches, and the decision row (N,) where it is no class token's."""


def hf_pair(name: str, image: torch.Tensor, text: int) -> Pair:
    """ONE pair in float64 on the model's eager path: ``logits_per_image[0, text]`` backpropagated to each vision
    layer's attention (``output_attentions=True``, gradients retained); the decision row is the class row (CLIP) or
    SigLIP's attention-pool row (its pooling attention, heads averaged, as nn.MultiheadAttention returns it) or
    AIMv2's (its pooling query's attention, heads averaged, recomputed from its weights)."""
    model = hf_model(name, "eager").double()
    pooled = []
    if name == "siglip":
        model.vision_model.head.attention.register_forward_hook(lambda _m, _i, out: pooled.append(out[1][0, 0]))
    if name == "aimv2":
        model.vision_model.head.register_forward_pre_hook(
            lambda head, args: pooled.append(aimv2_query_weights(head, args[0])[0]))
    out = model(pixel_values=image.double(), input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK, output_attentions=True)
    attentions = out.vision_model_output.attentions
    for attention in attentions:
        attention.retain_grad()
    out.logits_per_image[0, text].backward()
    readout = pooled[0].detach().numpy() if pooled else None
    return ([a[0].detach().numpy() for a in attentions], [a.grad[0].numpy() for a in attentions],
            0 if pooled else 1, readout)


def open_clip_pair(image: torch.Tensor, text: int) -> Pair:
    """ONE pair in float64 through open_clip's vision tower written out by hand (attention head by head), the text
    features from the model; ``logit_scale.exp()`` times the cosine similarity backpropagated to each attention."""
    model = copy.deepcopy(open_clip_model()).double().eval()
    tower = model.visual
    x = tower.conv1(image.double()).flatten(2).transpose(1, 2)
    x = tower.ln_pre(torch.cat([tower.class_embedding.expand(1, 1, -1), x], dim=1) + tower.positional_embedding)
    kept = []
    for block in tower.transformer.resblocks:
        out, attention = multihead_attention_by_hand(block.attn, block.ln_1(x)[0])
        kept.append(attention)
        x = x + out[None]
        x = x + block.mlp(block.ln_2(x))
    image_features = torch.nn.functional.normalize(tower.ln_post(x)[:, 0] @ tower.proj, dim=-1)
    text_features = torch.nn.functional.normalize(model.encode_text(INPUT_IDS), dim=-1)
    (model.logit_scale.exp() * image_features @ text_features.T)[0, text].backward()
    return [a.detach().numpy() for a in kept], [a.grad.numpy() for a in kept], 1, None


def pair_reference(name: str, method: str, image: torch.Tensor, text: int) -> np.ndarray:
    """``method``'s map (4, 4) of ONE pair, from :func:`hf_pair` or :func:`open_clip_pair`: chefer
    (``R ← R + mean_h((∇A ⊙ A)⁺)·R``), grad_rollout at its default discard ratio 0.9, or rollout (no gradient)."""
    attentions, gradients, prefix, readout = (open_clip_pair(image, text) if name == "open_clip"
                                              else hf_pair(name, image, text))
    if method == "chefer":
        return reference_chefer(attentions, gradients, prefix, (4, 4), readout)
    if method == "grad_rollout":
        return reference_grad_rollout(attentions, gradients, prefix, (4, 4), 0.9, readout)
    return reference_rollout(attentions, num_prefix=prefix, grid=(4, 4), class_token=readout is None, readout=readout)


@pytest.mark.parametrize("name", ["clip", "siglip", "metaclip2", "aimv2", "open_clip"])
def test_chefer_maps_equal_the_per_pair_float64_reference(name):
    pixels = images()
    model = open_clip_model() if name == "open_clip" else hf_model(name)
    mask = None if name == "open_clip" else ATTENTION_MASK
    maps = vitroll.image_text_maps(model, pixels, INPUT_IDS, attention_mask=mask)
    assert maps.shape == (2, 3, 4, 4) and maps.dtype == torch.float32
    for i in range(2):
        for t in range(3):
            expected = pair_reference(name, "chefer", pixels[i:i + 1], t)
            np.testing.assert_allclose(maps[i, t].numpy(), expected, rtol=1e-4, atol=1e-4)
    assert (maps[:, 0] - maps[:, 1]).abs().max() > 1e-2 * maps.abs().max()  # two texts, two maps


@pytest.mark.parametrize("name", ["clip", "siglip", "metaclip2", "aimv2", "open_clip"])
@pytest.mark.parametrize("method", ["grad_rollout", "rollout"])
def test_grad_rollout_and_rollout_maps_equal_the_per_pair_float64_reference(name, method):
    """grad_rollout's map of pair (i, t) is that pair's, rollout's the image's whatever the text: each equals its
    rule written out on the eager float64 attentions of that one pair."""
    pixels = images()
    model = open_clip_model() if name == "open_clip" else hf_model(name)
    mask = None if name == "open_clip" else ATTENTION_MASK
    maps = vitroll.image_text_maps(model, pixels, INPUT_IDS, attention_mask=mask, method=method)
    assert maps.shape == (2, 3, 4, 4) and maps.dtype == torch.float32
    for i in range(2):
        for t in range(3):
            expected = pair_reference(name, method, pixels[i:i + 1], t)
            np.testing.assert_allclose(maps[i, t].numpy(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    assert (maps[0, 0] - maps[1, 0]).abs().max() > 1e-2 * maps.abs().max()  # two images, two maps


@pytest.mark.parametrize("name", ["clip", "siglip", "metaclip2", "aimv2", "open_clip"])
def test_rollout_is_the_same_for_every_text_and_is_the_vision_towers(name):
    pixels = images()
    model = open_clip_model() if name == "open_clip" else hf_model(name)
    maps = vitroll.image_text_maps(model, pixels, INPUT_IDS, method="rollout")
    assert maps.shape == (2, 3, 4, 4)
    assert torch.equal(maps[:, 0], maps[:, 1]) and torch.equal(maps[:, 0], maps[:, 2])
    torch.testing.assert_close(maps[:, 0], vitroll.rollout(model, pixels))


@pytest.mark.parametrize("name", ["clip", "siglip", "metaclip2", "aimv2", "open_clip"])
def test_capture_leaves_the_image_text_logits_unchanged(name):
    pixels = images()
    model = open_clip_model() if name == "open_clip" else hf_model(name)
    with torch.no_grad():
        if name == "open_clip":
            plain = model.get_logits(pixels, INPUT_IDS)[0]
        else:
            plain = model(pixel_values=pixels, input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).logits_per_image
    prompted = PromptedModel(model, text_inputs(model, INPUT_IDS, attention_mask=None if name == "open_clip"
                                                else ATTENTION_MASK))
    for keep_graph in (False, True):
        with torch.set_grad_enabled(keep_graph), AttentionRecorder(prompted, keep_graph=keep_graph):
            recorded = prompted(pixels)
        assert (recorded - plain).abs().max().item() < 1e-5
    saliency = vitroll.METHODS["chefer"](prompted, pixels, target_class=1)
    assert (saliency.logits - plain).abs().max().item() < 1e-5


@pytest.mark.parametrize("name", ["clip", "open_clip"])
@pytest.mark.parametrize("method", ["chefer", "rollout"])
def test_the_saliency_of_every_pair_comes_with_each_images_own_logits(name, method):
    """The pairs run image-major (row i·T + t is image i against text t): row i of the logits is image i's, which
    ``logits_per_image[i]`` gives, not that of another image's pair."""
    pixels = images(3)
    model = open_clip_model() if name == "open_clip" else hf_model(name)
    mask = None if name == "open_clip" else ATTENTION_MASK
    with torch.no_grad():
        if name == "open_clip":
            plain = model.get_logits(pixels, INPUT_IDS)[0]
        else:
            plain = model(pixel_values=pixels, input_ids=INPUT_IDS, attention_mask=mask).logits_per_image
    prompted = PromptedModel(model, text_inputs(model, INPUT_IDS, attention_mask=mask))
    saliency = prompted_saliency(prompted, pixels, method)
    assert saliency.logits.shape == (3, 3) and saliency.maps.shape == (3, 3, 4, 4)
    torch.testing.assert_close(saliency.logits, plain, rtol=0, atol=1e-5)
    assert (plain[0] - plain[1]).abs().max() > 1e-3  # images told apart by their logits


def test_open_clip_and_transformers_clip_agree_in_shape_and_behaviour():
    """The same (B, T) order in both: pair (i, t) is image i against text t, whatever else is in the batch; chefer
    depends on the text, rollout does not; grad_rollout too gives one map per pair."""
    pixels = images(3)
    for model, mask in ((hf_model("clip"), ATTENTION_MASK), (open_clip_model(), None)):
        for method in ("chefer", "grad_rollout"):
            maps = vitroll.image_text_maps(model, pixels, INPUT_IDS, attention_mask=mask, method=method)
            assert maps.shape == (3, 3, 4, 4) and torch.isfinite(maps).all()
            alone = vitroll.image_text_maps(model, pixels[2:], INPUT_IDS[1:2],
                                            attention_mask=None if mask is None else mask[1:2], method=method)
            torch.testing.assert_close(alone[0, 0], maps[2, 1], rtol=1e-4, atol=1e-5)
            assert not torch.allclose(maps[:, 0], maps[:, 2])


def test_the_texts_are_the_classes_of_the_prompted_model():
    model = hf_model("clip")
    prompted = PromptedModel(model, text_inputs(model, INPUT_IDS, attention_mask=ATTENTION_MASK))
    maps = vitroll.image_text_maps(model, images(), INPUT_IDS, attention_mask=ATTENTION_MASK)
    torch.testing.assert_close(vitroll.chefer(prompted, images(), target_class=2), maps[:, 2])
    assert vitroll.class_names(prompted) == ["input_ids[0]", "input_ids[1]", "input_ids[2]"]


def test_a_batch_that_runs_out_of_memory_splits_its_pairs_with_their_texts(monkeypatch, capsys):
    """The registry's halving slices the per-pair targets with the pairs, so the maps are those of one pass."""
    model = open_clip_model()
    expected = vitroll.image_text_maps(model, images(), INPUT_IDS)
    original = vitroll.METHODS["chefer"].compute

    def small_memory(model, pairs, **options):
        if len(pairs) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(model, pairs, **options)

    monkeypatch.setitem(vitroll.METHODS, "chefer", Method("chefer", small_memory, needs_gradients=True))
    torch.testing.assert_close(vitroll.image_text_maps(model, images(), INPUT_IDS), expected)
    assert "a batch of 6 ran out of memory; retrying as 3 + 3" in capsys.readouterr().err


def test_strings_are_tokenised_with_the_models_tokenizer(tmp_path):
    model, tokenizer = hf_model("clip"), clip_tokenizer(tmp_path)
    texts = ["a dog", "a photo of a cat"]
    encoded = tokenizer(texts, padding="longest", return_tensors="pt")
    expected = vitroll.image_text_maps(model, images(), encoded["input_ids"], attention_mask=encoded["attention_mask"])
    torch.testing.assert_close(vitroll.image_text_maps(model, images(), texts, tokenizer=tokenizer), expected)
    vitroll.use_tokenizer(model, tokenizer)
    torch.testing.assert_close(vitroll.image_text_maps(model, images(), texts), expected)
    assert text_inputs(model, "a dog").labels == ("a dog",)


@pytest.mark.parametrize("name", ["clip", "open_clip"])
def test_a_tokenizers_name_given_as_the_tokenizer_is_refused_by_name(name):
    """tokenizer="openai/clip-vit-base-patch32" failed inside the family's tokenize: "'str' object is not callable"."""
    model = hf_model("clip") if name == "clip" else open_clip.create_model("ViT-B-32", pretrained=None)
    with pytest.raises(OptionValueError) as raised:
        vitroll.image_text_maps(model, torch.randn(1, 3, 32, 32), ["a cat"], tokenizer="openai/clip-vit-base-patch32")
    assert str(raised.value) == ("tokenizer must be a tokenizer, not str 'openai/clip-vit-base-patch32': "
                                 "AutoTokenizer.from_pretrained('openai/clip-vit-base-patch32') loads one "
                                 "(open_clip: open_clip.get_tokenizer(MODEL_NAME))")

def test_open_clip_strings_go_through_its_default_tokenizer_at_the_models_context_length():
    model = open_clip.model.CLIP(16, dict(layers=1, width=32, head_width=16, image_size=32, patch_size=8),
                                 dict(context_length=9, width=32, heads=2, layers=1)).eval()
    inputs = text_inputs(model, ["a dog", "a cat"])
    torch.testing.assert_close(inputs.input_ids, open_clip.tokenize(["a dog", "a cat"], context_length=9))
    assert vitroll.image_text_maps(model, images(1), ["a dog", "a cat"]).shape == (1, 2, 4, 4)


@pytest.mark.parametrize("texts, options, error, message", [
    ([], {}, ValueError, "texts_or_input_ids is empty: give at least one text"),
    (["a dog", " "], {}, ValueError, r"text 1 \(' '\) is blank: a blank text has nothing to explain"),
    ({"a": 1}, {}, TypeError, "must be a string, a list of strings or input ids"),
    (["a dog", 3], {}, TypeError, r"texts_or_input_ids\[1\] is int, not a string: texts_or_input_ids must be a "
                                  r"string, a list of strings or input ids \(T, L\)"),
    (["a dog"], {}, ValueError, r"reads strings through its tokenizer: pass tokenizer=AutoTokenizer"),
    (["a dog"], {"attention_mask": ATTENTION_MASK}, ValueError, "attention_mask goes with input_ids"),
    (INPUT_IDS.float(), {}, TypeError, "input_ids must be integer token ids; got torch.float32"),
    (INPUT_IDS[None], {}, ValueError, r"input_ids must have shape \(T, L\)"),
    (INPUT_IDS, {"attention_mask": ATTENTION_MASK[:2]}, ValueError, r"attention_mask has shape \(2, 7\)"),
    (INPUT_IDS.where(INPUT_IDS != INPUT_IDS[1, 2], 100), {}, ValueError,
     r"input_ids\[1, 2\] = 100 is not a token id of the model's vocabulary \(0…99\)"),
    (INPUT_IDS, {"target_class": 1}, MethodOptionError, "the target of pair \\(i, t\\) is text t"),
    (INPUT_IDS, {"discard_ratio": 0.5}, MethodOptionError, "method 'chefer' takes no option 'discard_ratio'"),
])
def test_bad_inputs_are_refused_with_their_messages(texts, options, error, message):
    with pytest.raises(error, match=message) as raised:
        vitroll.image_text_maps(hf_model("clip"), images(), texts, **options)
    assert isinstance(raised.value, VitrollError)


def test_texts_of_a_length_the_text_tower_cannot_take_are_refused_before_any_image():
    # open_clip's text tower adds its positional embedding and mask at full length: exactly its context (7 here)
    with pytest.raises(InputValueError, match=r"^input_ids have 5 tokens per text; CLIP's text tower takes exactly "
                                              r"7 \(its context\); give ids of that length$"):
        vitroll.image_text_maps(open_clip_model(), images(), INPUT_IDS[:, :5])
    with pytest.raises(InputValueError, match=r"^the tokenizer gives 77 tokens per text; CLIP's text tower takes "
                                              r"exactly 7 .*open_clip.get_tokenizer\(MODEL_NAME\)\)$"):
        vitroll.image_text_maps(open_clip_model(), images(), ["a dog"], tokenizer=open_clip.get_tokenizer("ViT-B-32"))
    with pytest.raises(InputValueError, match=r"^input_ids have 17 tokens per text; CLIPModel's text tower takes 1 "
                                              r"to 16 "):
        vitroll.image_text_maps(hf_model("clip"), images(), torch.full((1, 17), 3))
    assert vitroll.image_text_maps(open_clip_model(), images(1), INPUT_IDS, method="rollout").shape == (1, 3, 4, 4)


def test_images_of_the_wrong_shape_are_named_as_given_not_as_paired_with_the_texts():
    with pytest.raises(ValueError, match=r"images must have shape \(B, C, H, W\); got \(3, 32, 32\); "
                                         r"images\[None\] is a batch of one$"):
        vitroll.image_text_maps(hf_model("clip"), images()[0], INPUT_IDS)  # was (3·T, 32, 32)


def test_models_that_are_not_image_text_models_or_take_no_mask_say_so():
    with pytest.raises(ValueError, match="takes no attention_mask"):
        vitroll.image_text_maps(open_clip_model(), images(), INPUT_IDS, attention_mask=ATTENTION_MASK)
    with pytest.raises(ValueError, match="vocabulary has 100 tokens.*open_clip.get_tokenizer"):
        vitroll.image_text_maps(open_clip_model(), images(), ["a dog"])
    vision = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**VISION)).eval()
    with pytest.raises(UnsupportedModelError, match=r"CLIPVisionModel \(hf-clip-vision\) is not an image–text model"
                                                    r".*hf-clip \(CLIPModel\)"):
        vitroll.image_text_maps(vision, images(), INPUT_IDS)
    with pytest.raises(UnsupportedModelError, match="CLIPModel is an image–text model: its scores need texts"):
        vitroll.chefer(hf_model("clip"), images())


PHOTO = Path(__file__).resolve().parents[1] / "sample_images" / "cat.jpg"


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory) -> Path:
    """A CLIPModel saved with its (tiny) tokenizer, as save_pretrained writes them."""
    folder = tmp_path_factory.mktemp("clip")
    hf_model("clip").save_pretrained(folder)
    clip_tokenizer(folder).save_pretrained(folder)
    return folder


def test_overlay_with_texts_writes_one_overlay_per_text_and_a_grid(clip_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", "a dog", "--text", "A photo of a cat!",
                 "--method", "chefer", "--out", str(out), "--device", "cpu"]) == 0, capsys.readouterr().err
    written = sorted(path.name for path in out.iterdir())
    assert written == ["cat_chefer_a-dog.png", "cat_chefer_a-photo-of-a-cat.png", "cat_chefer_texts.png"]
    dog, cat = (np.asarray(Image.open(out / name)) for name in written[:2])
    assert dog.shape == cat.shape == (*Image.open(PHOTO).size[::-1], 3) and not np.array_equal(dog, cat)
    model = load_model(str(clip_folder))
    logits = PromptedModel(model, text_inputs(model, ["a dog", "A photo of a cat!"]))(
        vitroll.Preprocessing.from_model(model).batch([vitroll.load_image(PHOTO)])[0])[0]
    printed = capsys.readouterr().out
    assert f"'a dog'  S = {logits[0]:.3f}  -> {out / 'cat_chefer_a-dog.png'}" in printed
    assert main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", "a dog", "--text", "a cat",
                 "--method", "rollout", "--out", str(tmp_path / "roll"), "--device", "cpu"]) == 0
    assert np.array_equal(*(np.asarray(Image.open(tmp_path / "roll" / f"cat_rollout_{slug}.png"))
                            for slug in ("a-dog", "a-cat")))


def test_figure_with_texts_is_told_that_the_grid_is_the_figure(clip_folder, tmp_path, capsys):
    # --figure was dropped in silence with --text: asked for a figure, the user got none and no word why
    out = tmp_path / "out"
    assert main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", "a dog", "--figure", "--out", str(out),
                 "--device", "cpu"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: warning: --figure draws a classifier's map; with --text the grid IMAGE_METHOD_texts.png is the "
        "figure (the image, then each text's overlay); ignored"]
    assert sorted(path.name for path in out.iterdir()) == ["cat_chefer_a-dog.png", "cat_chefer_texts.png"]
    # on a classifier --text is the mistake: one error line, no warning that a grid is the figure
    assert main(["overlay", str(PHOTO), "--text", "a dog", "--figure", "--out", str(out), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("vitroll: error: --text needs an image–text model")


def test_a_text_slugged_texts_does_not_overwrite_the_grid(clip_folder, tmp_path, capsys):
    """The grid is ``<stem>_<method>_texts.png``: a text ``Texts`` gets ``…_texts-2.png``, so both pictures stay."""
    out = tmp_path / "out"
    assert main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", "Texts", "--text", "a dog",
                 "--out", str(out), "--device", "cpu"]) == 0, capsys.readouterr().err
    assert sorted(path.name for path in out.iterdir()) == ["cat_chefer_a-dog.png", "cat_chefer_texts-2.png",
                                                           "cat_chefer_texts.png"]
    assert "'Texts'  S = " in capsys.readouterr().out
    grid, overlay = (Image.open(out / name) for name in ("cat_chefer_texts.png", "cat_chefer_texts-2.png"))
    assert grid.size != overlay.size and overlay.size == Image.open(PHOTO).size


def three_colour_strip(path: Path, size: tuple[int, int]) -> Path:
    """A (width, height) strip, red on one end and blue on the other, green in the middle square (its centre crop)."""
    width, height = size
    side = min(width, height)
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    if width > height:
        pixels[:, :width // 2], pixels[:, width // 2:] = (255, 0, 0), (0, 0, 255)
        pixels[:, (width - side) // 2:(width + side) // 2] = (0, 255, 0)
    else:
        pixels[:height // 2], pixels[height // 2:] = (255, 0, 0), (0, 0, 255)
        pixels[(height - side) // 2:(height + side) // 2] = (0, 255, 0)
    Image.fromarray(pixels).save(path)
    return path


@pytest.mark.parametrize("size", [(1000, 20), (20, 1000)])
def test_the_grid_of_a_long_strip_shows_the_centre_crop_the_model_saw(clip_folder, tmp_path, capsys, size):
    """A 1000 × 20 strip's grid was 86 px tall (panels 6 px high), a 20 × 1000 one's 16,080 px: each panel now shows
    the 20 × 20 centre crop the model saw, as square as the cat's panels."""
    strip = three_colour_strip(tmp_path / "strip.png", size)
    out = tmp_path / "out"
    assert main(["overlay", str(strip), "--model", str(clip_folder), "--text", "a dog", "--text", "a cat",
                 "--out", str(out), "--device", "cpu"]) == 0, capsys.readouterr().err
    grid = np.asarray(Image.open(out / "strip_chefer_texts.png").convert("RGB"))
    assert grid.shape[1] == 960 and 300 < grid.shape[0] < 500
    image_panel = grid[100:-20, 10:300].reshape(-1, 3).astype(int)
    green = (image_panel[:, 1] > 200) & (image_panel[:, 0] < 50) & (image_panel[:, 2] < 50)
    assert green.mean() > 0.9  # the centre crop, not the red and blue ends
    assert Image.open(out / "strip_chefer_a-dog.png").size == size  # the overlays themselves stay whole


@pytest.mark.parametrize("arguments, message", [
    (["--model", "CLIP"], "CLIP is an image–text model: give the texts to explain with --text"),
    (["--text", "a dog"], "--text needs an image–text model (CLIP, SigLIP, open_clip); vitroll-shapes "
                          "(VisionTransformer) scores classes, not texts"),
    (["--model", "CLIP", "--text", "a dog", "--target-class", "1"], "--target-class does not go with --text"),
    (["--model", "open_clip:ViT-B-99", "--text", "a dog"], "unknown open_clip model 'ViT-B-99'; did you mean"),
    (["--model", "open_clip:ViT-B-32", "--pretrained", "--text", "a dog"],
     "open_clip:ViT-B-32: open_clip's pretrained weights are downloaded by tag; pass the weights as --checkpoint FILE "
     "(open_clip_model.safetensors)"),
])
def test_overlay_mistakes_with_texts_are_one_line(clip_folder, tmp_path, capsys, arguments, message):
    arguments = [str(clip_folder) if argument == "CLIP" else argument for argument in arguments]
    message = message.replace("CLIP", str(clip_folder), 1) if message.startswith("CLIP") else message
    assert main(["overlay", str(PHOTO), *arguments, "--out", str(tmp_path), "--device", "cpu"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"vitroll: error: {message}")


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_text_is_refused_in_one_line_before_the_model_loads(clip_folder, tmp_path, capsys, blank):
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", "a dog", "--text", blank,
              "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: error: overlay: argument --text: {blank!r} is blank: give the words to explain, e.g. \"a photo of "
        "a dog\" (see `vitroll overlay --help`)"]


def test_a_text_not_in_utf8_is_refused_in_one_line_before_the_model_loads(clip_folder, tmp_path, capsys):
    latin1 = os.fsdecode(b"a caf\xe9")  # what a shell in a Latin-1 locale passes for "a café"
    with pytest.raises(SystemExit) as exited:  # was a TypeError's traceback from the tokenizer, after the model loaded
        main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", latin1, "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: error: overlay: argument --text: 'a caf\\xe9' is not UTF-8 text: byte 0xe9 at offset 5: give texts "
        "in UTF-8 (see `vitroll overlay --help`)"]


def test_a_text_longer_than_the_context_is_cut_with_one_warning(clip_folder, capsys):
    model = load_model(str(clip_folder))  # a context of 16 tokens: start, end and 14 letters
    long = "abcdefghijklmnopqrstuvwxyz"
    inputs = text_inputs(model, ["a dog", long])
    assert inputs.input_ids.shape == (2, 16)
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: {long!r} is longer than the text tower's 16 tokens and cut to them; shorten it to explain "
        "every word"]
    assert inputs.cut == (False, True)
    text_inputs(model, ["a dog", "abcdefghijklmn"])  # 14 letters fill the context exactly: nothing cut
    assert capsys.readouterr().err == ""


def test_overlay_shows_a_cut_text_shortened_and_writes_it_in_full(clip_folder, tmp_path, capsys):
    """The line of a text the context cut printed all of it (a paragraph, on one line): its beginning now, and where
    the text tower's context ends; the files keep it whole."""
    long = "a dog " * 60
    assert main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", long, "--text", "a cat", "--out",
                 str(tmp_path), "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  'a dog a dog a dog a dog a dog a dog a…' (cut: the text tower reads its first 16 "
                               "tokens)  S = ")
    assert lines[1].endswith(f"-> {tmp_path / 'cat_chefer_a-dog-a-dog-a-dog-a-dog-a-dog-a-dog-a-do.png'}")
    assert lines[2].startswith("  'a cat'  S = ")


def test_open_clip_warns_of_a_text_cut_to_its_context(capsys):
    model = open_clip.model.CLIP(16, dict(layers=1, width=32, head_width=16, image_size=32, patch_size=8),
                                 dict(context_length=9, width=32, heads=2, layers=1)).eval()
    text_inputs(model, ["a dog", "a very long text about a dog that runs"])
    assert capsys.readouterr().err.splitlines() == [
        "vitroll: warning: 'a very long text about a dog that runs' is longer than the text tower's 9 tokens and cut "
        "to them; shorten it to explain every word"]
    text_inputs(model, ["a dog", "a cat"])
    assert capsys.readouterr().err == ""


def test_overlay_with_texts_uses_chefer_unless_told(clip_folder, tmp_path, capsys):
    assert main(["overlay", str(PHOTO), "--model", str(clip_folder), "--text", "a dog", "--text", "a cat",
                 "--out", str(tmp_path / "out"), "--device", "cpu"]) == 0, capsys.readouterr().err
    written = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert written == ["cat_chefer_a-cat.png", "cat_chefer_a-dog.png", "cat_chefer_texts.png"]
    assert not np.array_equal(*(np.asarray(Image.open(tmp_path / "out" / name)) for name in written[:2]))
    assert main(["overlay", str(PHOTO), "--out", str(tmp_path / "classes"), "--device", "cpu"]) == 0
    assert [path.name for path in (tmp_path / "classes").iterdir()] == ["cat_rollout.png"]


def test_a_clip_folder_loads_the_image_text_model_with_its_tokenizer(clip_folder):
    model = load_model(str(clip_folder))
    assert type(model).__name__ == "CLIPModel"
    assert text_inputs(model, ["a dog"]).input_ids.tolist() == [[BOS, 26, 3, 14, 32, EOS]]


def test_a_clip_folder_without_tokenizer_files_loads_without_a_tokenizer_and_texts_ask_for_one(tmp_path, capsys):
    folder = tmp_path / "clip-no-tokenizer"
    hf_model("clip").save_pretrained(folder)
    model = load_model(str(folder))
    assert registered_tokenizer(model) is None
    capsys.readouterr()
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--text", "a dog", "--out", str(tmp_path / "out"),
                 "--device", "cpu"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("vitroll: error: ") and "tokenizer" in error[0]


def test_a_long_text_is_wrapped_and_cut_in_its_panel_title():
    from vitroll.pipelines.explain import panel_text

    assert panel_text("a cat") == "'a cat'"
    assert panel_text("a photo of a woman in a space suit next to a rocket") == (
        "'a photo of a woman in a space suit next to\na rocket'")
    assert panel_text("word " * 200) == (
        "'word word word word word word word\nword word word word word word word…")  # not 200 words over the pictures
    assert panel_text("x" * 100) == "'" + "x" * 36 + "\n" + "x" * 35 + "…"  # a word without spaces is broken
    assert panel_text("$5 or $10") == "'$5 or $10'"


def test_a_grid_of_many_texts_wraps_into_rows_of_eight_panels():
    import numpy as np

    from vitroll.overlay import overlay_grid

    picture = np.zeros((32, 64, 3), dtype=np.uint8)
    fig = overlay_grid(picture, [picture] * 12, [f"text {index}" for index in range(12)], title="x")
    shown = [ax for ax in fig.axes if ax.images]
    assert len(shown) == 13 and [ax.get_title() for ax in shown[8:10]] == ["text 7", "text 8"]
    np.testing.assert_allclose(fig.get_size_inches(), [8 * 3.2, 2 * (3.2 / 2 + 0.8)])  # was 41.6 inches wide
    assert {round(ax.get_position().y0, 2) for ax in shown[:8]} != {round(ax.get_position().y0, 2) for ax in shown[8:]}
    np.testing.assert_allclose(overlay_grid(picture, [picture], ["a"]).get_size_inches(), [2 * 3.2, 3.2 / 2 + 0.8])


def test_a_clip_folder_saved_without_its_tokenizer_says_how_to_save_one(tmp_path, capsys):
    folder = tmp_path / "clip-no-tokenizer"
    hf_model("clip").save_pretrained(folder)
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--text", "a dog", "--out", str(tmp_path / "out")]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vitroll:")]
    assert error == ["vitroll: error: CLIPModel reads strings through its tokenizer: pass tokenizer=AutoTokenizer."
                     "from_pretrained(<its folder or hub id>), or input_ids; from the command line, save the tokenizer "
                     "in the model's folder (tokenizer.save_pretrained(FOLDER))"]


def test_a_tensor_with_other_channels_is_refused_before_its_rows_meet_the_texts():
    with pytest.raises(ValueError) as raised:
        vitroll.image_text_maps(open_clip_model(), torch.randn(2, 4, 32, 32), INPUT_IDS)
    assert str(raised.value) == (
        "images of shape (2, 4, 32, 32) have 4 channels; the model takes (B, 3, H, W): "
        "images[:, :3] drops an alpha channel")


def test_a_saved_aimv2_model_explains_its_texts_from_the_command_line(tmp_path, capsys):
    """Aimv2Model was refused ("not yet its image–text scores"); saved with its tokenizer, it loads as the whole
    image–text model and ``overlay --text`` explains each text."""
    folder = tmp_path / "aimv2"
    saved = hf_model("aimv2")
    saved.save_pretrained(folder)
    clip_tokenizer(folder).save_pretrained(folder)
    model = load_model(str(folder))
    assert type(model) is transformers.Aimv2Model and registered_tokenizer(model) is not None
    torch.testing.assert_close(vitroll.image_text_maps(model, images(), ["a dog", "a cat"]),
                               vitroll.image_text_maps(saved, images(), ["a dog", "a cat"], tokenizer=clip_tokenizer(
                                   tmp_path)))
    capsys.readouterr()
    assert main(["overlay", str(PHOTO), "--model", str(folder), "--text", "a dog", "--text", "a cat",
                 "--out", str(tmp_path / "out"), "--device", "cpu"]) == 0, capsys.readouterr().err
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "cat_chefer_a-cat.png", "cat_chefer_a-dog.png", "cat_chefer_texts.png"]
