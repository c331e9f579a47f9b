"""Every mistake a user can make with the Python API is a VitrollError (errors.py's promise), one line naming what
to do, and still the TypeError or ValueError the README names, so ``except ValueError`` keeps working."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from vitroll import (
    AttentionRecorder, KeyPatch, Preprocessing, TokenLayout, VitrollError, class_names, colorize, figure, key_patches,
    load_image, load_model, normalize, outline_boxes, overlay, register_family, rollout, rollout_matrix, to_original,
    upsample,
)
from vitroll.audit.metrics import MaskSource
from vitroll.audit.records import AuditOptions, parse_group_by
from vitroll.errors import InputValueError, OptionValueError, RecorderUsageError
from vitroll.io.dicom import parse_window
from vitroll.methods import record_attention
from vitroll.pipelines.evaluate_captions import caption_ids, evaluate_captions
from vitroll.pipelines.folder import AnnotateOptions
from vitroll.pipelines.legend import legend_html

RGB = np.zeros((8, 10, 3), np.uint8)
GRID = np.ones((2, 2), np.float32)


@pytest.fixture(scope="module")
def model():
    return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=5).eval()


IMAGE_MISTAKES = [
    pytest.param(lambda: np.zeros((32, 32, 3)), ValueError, "float64 array of shape (32, 32, 3)", id="float-array"),
    pytest.param(lambda: np.zeros((32, 32, 4), np.uint8), ValueError, "RGB with alpha", id="rgba-array"),
    pytest.param(lambda: np.zeros((32, 32, 3), np.uint16), ValueError, "uint16 colour array", id="uint16-colour"),
    pytest.param(lambda: [], ValueError, "empty list", id="empty-list"),
    pytest.param(lambda: {"image": 1}, TypeError, "images has type dict", id="dict"),
    pytest.param(lambda: [torch.zeros(3, 32, 32)], TypeError, "images[0] has type Tensor", id="tensor-in-list"),
    pytest.param(lambda: torch.zeros(1, 3, 32, 32, dtype=torch.uint8), ValueError, "torch.uint8 tensor", id="uint8"),
    pytest.param(lambda: torch.zeros(0, 3, 32, 32), ValueError, "empty batch", id="empty-batch"),
    pytest.param(lambda: torch.zeros(3, 32, 32), ValueError, "must have shape (B, C, H, W)", id="chw"),
    pytest.param(lambda: torch.zeros(1, 4, 32, 32), ValueError, "have 4 channels", id="four-channels"),
    pytest.param(lambda: torch.full((1, 3, 32, 32), 200.0), ValueError, "raw 0…255 pixels?", id="raw-pixels"),
    pytest.param(lambda: torch.zeros(1, 3, 24, 24), ValueError, "do not fit the model", id="size"),
]


@pytest.mark.parametrize("images,builtin,message", IMAGE_MISTAKES)
def test_images_a_method_cannot_take_are_a_vitroll_error(model, images, builtin, message):
    with pytest.raises(VitrollError, match="^[^\n]*$") as raised:
        rollout(model, images())
    assert isinstance(raised.value, builtin)
    assert message in str(raised.value)


OVERLAY_MISTAKES = [
    pytest.param(lambda: overlay(RGB[..., 0], GRID), ValueError, "image must be RGB uint8", id="grey-image"),
    pytest.param(lambda: overlay(RGB, np.ones((1, 2, 2))), ValueError, "a batch of maps?", id="batch-map"),
    pytest.param(lambda: overlay(RGB, np.array([["a"]])), ValueError, "must hold real numbers", id="text-map"),
    pytest.param(lambda: overlay(RGB, GRID, alpha=2), ValueError, "alpha must be in [0, 1]", id="alpha-range"),
    pytest.param(lambda: overlay(RGB, GRID, alpha="0.5"), TypeError, "alpha must be a number", id="alpha-type"),
    pytest.param(lambda: overlay(RGB, GRID, cmap="jett"), ValueError, "did you mean jet?", id="cmap-name"),
    pytest.param(lambda: overlay(RGB, GRID, cmap=3), TypeError, "cmap must be", id="cmap-type"),
    pytest.param(lambda: overlay(RGB, GRID, interpolation="linear"), ValueError, "interpolation must be one of",
                 id="interpolation"),
    pytest.param(lambda: overlay(RGB, GRID, normalization="max"), ValueError, "'minmax' or 'percentile'",
                 id="normalization"),
    pytest.param(lambda: normalize(GRID, mode="percentile", percentiles=(50, 10)), ValueError,
                 "percentiles must be (low, high)", id="percentiles"),
    pytest.param(lambda: upsample(np.ones((2, 2, 2)), (4, 4)), ValueError, "must be 2-D (h, w)", id="upsample-3d"),
    pytest.param(lambda: upsample(GRID, 8), TypeError, "size_hw must be (H, W), two integers ≥ 1; got int 8",
                 id="upsample-int-size"),
    pytest.param(lambda: upsample(GRID, (0, 8)), ValueError, "size_hw must be (H, W), two integers ≥ 1; got (0, 8)",
                 id="upsample-zero-size"),
    pytest.param(lambda: upsample(GRID, (8.5, 8)), TypeError, "size_hw must be (H, W), two integers ≥ 1",
                 id="upsample-float-size"),
    pytest.param(lambda: to_original(GRID, None), TypeError, "geometry must be the CropGeometry",
                 id="to-original-no-geometry"),
    pytest.param(lambda: key_patches(GRID, (8, 10), 1), TypeError, "geometry must be the CropGeometry",
                 id="key-patches-no-geometry"),
    pytest.param(lambda: colorize(np.ones((2, 2, 2))), ValueError, "values must be 2-D (h, w)", id="colorize-3d"),
    pytest.param(lambda: overlay(RGB, torch.ones(2, 2, device="meta")), ValueError,
                 "heatmap is a tensor on the meta device, which holds no values", id="meta-heatmap"),
]


@pytest.mark.parametrize("call,builtin,message", OVERLAY_MISTAKES)
def test_overlay_and_map_mistakes_are_a_vitroll_error(call, builtin, message):
    with pytest.raises(VitrollError, match="^[^\n]*$") as raised:
        call()
    assert isinstance(raised.value, builtin)
    assert message in str(raised.value)


@pytest.mark.parametrize("not_a_model,message", [
    ("vit_tiny_patch16_224", "model is a str, not a torch.nn.Module: load it first with "
                             "vitroll.load_model('vit_tiny_patch16_224')"),
    (RGB, "model is a ndarray, not a torch.nn.Module: the arguments are (model, images)"),
    (42, "model is an int, not a torch.nn.Module: the arguments are (model, images)"),
])
def test_a_model_that_is_not_a_module_is_a_vitroll_error(not_a_model, message):
    with pytest.raises(VitrollError) as raised:
        rollout(not_a_model, RGB)
    assert isinstance(raised.value, TypeError)
    assert str(raised.value) == message


@pytest.mark.parametrize("entry_point", [Preprocessing.from_model, class_names, AttentionRecorder],
                         ids=["preprocessing", "class-names", "recorder"])
def test_every_entry_point_that_looks_up_a_family_refuses_a_model_name(entry_point):
    """``Preprocessing.from_model("vit")`` and the others raised "'str' object has no attribute 'named_modules'": the
    family lookup they all pass through refuses what is not a module, as the methods do."""
    with pytest.raises(VitrollError) as raised:
        entry_point("vit_tiny_patch16_224")
    assert isinstance(raised.value, TypeError)
    assert str(raised.value) == ("model is a str, not a torch.nn.Module: load it first with "
                                 "vitroll.load_model('vit_tiny_patch16_224')")


def test_a_model_on_the_meta_device_is_refused_before_any_forward():
    with torch.device("meta"):
        model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, num_classes=5)
    with pytest.raises(VitrollError, match=r"^VisionTransformer's weights are on the meta device, which holds no "
                                           r"values: model.to_empty\(device='cpu'\) and load_state_dict"):
        rollout(model.eval(), torch.zeros(1, 3, 32, 32))
    assert all(not module._forward_hooks for module in model.modules())


@pytest.mark.parametrize("mode", ["L", "RGBA", "P", "LA", "CMYK", "I;16", "La", "RGBa"])
def test_preprocessing_called_on_a_pil_image_of_any_mode_gives_what_a_method_gives_it(model, mode):
    """``pre(Image.open(path))`` on a grey, palette or transparent PNG raised "cannot reshape array of size 1024 into
    shape (32,32,3)": it is converted to RGB as a method converts it (alpha on white, 16 bits stretched). Pillow's
    premultiplied grey with alpha (La) raised "conversion from La to L not supported"."""
    pixels = np.random.default_rng(0).integers(0, 256, (40, 50, 4), dtype=np.uint8)
    image = (Image.fromarray(pixels[..., 0].astype(np.uint16) * 257) if mode == "I;16"
             else Image.fromarray(pixels, "RGBA").convert(mode))
    pre = Preprocessing.from_model(model)
    tensor, geometry = pre(image)
    assert tensor.shape == (3, 32, 32) and geometry.original_hw == (40, 50)
    torch.testing.assert_close(rollout(model, tensor[None]), rollout(model, image))


@pytest.mark.parametrize("mode", ["LA", "La", "RGBA", "RGBa"])
def test_a_transparent_pixel_is_white_whether_its_alpha_is_premultiplied_or_not(mode):
    """An RGBa image's transparent pixels came out black, an RGBA one's white."""
    from vitroll.io.images import to_rgb

    image = Image.fromarray(np.array([[[200, 100, 50, 0], [200, 100, 50, 255]]], np.uint8), "RGBA")
    image = image.convert("LA").convert(mode) if mode == "La" else image.convert(mode)  # Pillow's RGBA → La drops alpha
    grey = np.asarray(Image.new("RGB", (1, 1), (200, 100, 50)).convert("L"))[0, 0]
    opaque = [grey] * 3 if mode.startswith("L") else [200, 100, 50]
    assert np.asarray(to_rgb(image)).tolist() == [[[255, 255, 255], opaque]]


def test_preprocessing_called_on_an_array_names_the_conversion(model):
    with pytest.raises(VitrollError, match=r"^image must be a PIL image \(Image.fromarray\(array\) wraps a uint8 "
                                           r"array, vitroll.load_image\(path\) reads a file\); got ndarray$"):
        Preprocessing.from_model(model)(RGB)


@pytest.mark.parametrize("image,advice", [
    (Image.fromarray(RGB[..., 0]), "image.convert('RGB') converts a PIL image"),
    (RGB / 255.0, "(image * 255).round().astype(np.uint8) converts values in [0, 1]"),
    (RGB.transpose(2, 0, 1), "image.transpose(1, 2, 0) puts the channels last"),
    (RGB[..., 0], "np.stack([image] * 3, axis=-1) makes a grey image RGB"),
    (np.dstack([RGB, RGB[..., :1]]), "image[..., :3] drops the alpha"),
], ids=["pil-grey", "float", "chw", "grey", "rgba"])
def test_an_image_overlay_cannot_draw_on_is_refused_with_the_conversion_it_needs(image, advice):
    """An ML engineer holds float images in [0, 1], CHW arrays and grey scans; the refusal says how to convert."""
    with pytest.raises(VitrollError, match="^[^\n]*$") as raised:
        overlay(image, GRID)
    assert str(raised.value).startswith("image must be RGB uint8 of shape (H, W, 3), H and W ≥ 1; got ")
    assert str(raised.value).endswith(f": {advice}")


@pytest.mark.parametrize("images,advice", [
    (np.zeros((32, 32, 3), np.float32), "(images * 255).round().astype(np.uint8) converts values in [0, 1]"),
    (np.zeros((3, 32, 32), np.uint8), "images.transpose(1, 2, 0) puts the channels last"),
    (np.zeros((2, 32, 32, 3), np.uint8), "list(images) passes a stacked batch as its images"),
    (torch.zeros(3, 32, 32), "images[None] is a batch of one"),
], ids=["float", "chw", "stacked", "chw-tensor"])
def test_images_people_hold_are_refused_with_the_conversion_they_need(model, images, advice):
    with pytest.raises(VitrollError, match="^[^\n]*$") as raised:
        rollout(model, images)
    assert str(raised.value).endswith(advice)


def test_load_image_given_pixels_names_what_to_pass_instead():
    """``load_image(array)`` raised "expected str, bytes or os.PathLike object, not ndarray"."""
    with pytest.raises(VitrollError) as raised:
        load_image(RGB)
    assert isinstance(raised.value, TypeError)
    assert str(raised.value) == ("path must be the image file to read (a str or os.PathLike); got ndarray: an image "
                                 "already in memory (a PIL image, a uint8 array) goes to the methods and overlay as "
                                 "it is")


def test_load_model_given_a_model_names_what_to_pass_instead(model):
    """``load_model(model)`` raised "expected str, bytes or os.PathLike object, not VisionTransformer"."""
    with pytest.raises(VitrollError) as raised:
        load_model(model)
    assert isinstance(raised.value, TypeError)
    assert str(raised.value) == ("name must be a model's name or folder (a str or os.PathLike); got "
                                 "VisionTransformer: a model already built goes to the methods as it is")


@pytest.mark.parametrize("arguments,builtin,message", [
    (lambda model, recorded: (model, torch.zeros(1, 3, 32, 32)), TypeError,
     "attentions is a VisionTransformer, not the recorded attention of its layers: rollout(model, images) explains a "
     "model; the rollout functions take what an AttentionRecorder records (recorder.attentions, "
     "recorder.token_layout(image_hw))"),
    (lambda model, recorded: ([], recorded[1]), ValueError,
     "attentions is empty: record at least one layer (the rollout of no layers is the identity and explains nothing)"),
    (lambda model, recorded: (recorded[0], torch.zeros(1, 3, 32, 32)), TypeError,
     "layout must be the TokenLayout of the recorded input (recorder.token_layout(image_hw)); got Tensor"),
], ids=["model-and-images", "no-layers", "images-as-layout"])
def test_rollout_matrix_refuses_what_is_not_recorded_attention(model, arguments, builtin, message):
    """``rollout_matrix(model, images)`` raised AttributeError "'Tensor' object has no attribute 'readout'", and
    ``rollout_matrix([], layout)`` an IndexError."""
    recorded = record_attention(model, torch.zeros(1, 3, 32, 32))
    with pytest.raises(VitrollError) as raised:
        rollout_matrix(*arguments(model, recorded))
    assert isinstance(raised.value, builtin)
    assert str(raised.value) == message


BOX = "(left, top, right, bottom), four finite numbers"


@pytest.mark.parametrize("boxes,message", [
    ([(0, 0, 5)], f"boxes[0] must be {BOX}; got (0, 0, 5)"),
    ((0, 0, 5, 5), f"boxes[0] must be {BOX}; got 0: one box goes in a list, [box]"),
    ([KeyPatch(0, 0, 1.0, (0, 0, 5, 5))], f"boxes[0] must be {BOX}; got KeyPatch(row=0, col=0, score=1.0, "
                                          "box=(0, 0, 5, 5)): [patch.box for patch in patches] gives the KeyPatches' "
                                          "boxes"),
    ([(0, 0, 5, 5), (0, 0, 5, (1, 2))], f"boxes[1] must be {BOX}; got (0, 0, 5, (1, 2))"),
    ([("0", "0", "5", "5")], f"boxes[0] must be {BOX}; got ('0', '0', '5', '5')"),
    ([(0, 0, float("nan"), 5)], f"boxes[0] must be {BOX}; got (0, 0, nan, 5)"),
], ids=["three-numbers", "one-box-unlisted", "key-patches", "ragged", "strings", "nan"])
def test_outline_boxes_refuses_a_box_that_is_not_four_numbers(boxes, message):
    """``outline_boxes(image, [(0, 0, 5)])`` raised "not enough values to unpack (expected 4, got 3)"; a ragged box
    NumPy's "inhomogeneous shape" error, strings "invalid literal for int()", NaN "cannot convert float NaN"."""
    with pytest.raises(VitrollError) as raised:
        outline_boxes(RGB, boxes)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == message


@pytest.mark.parametrize("arguments,builtin,message", [
    (lambda: ("cat.jpg", [(0, 0, 5, 5)]), ValueError, "image must be RGB uint8 of shape (H, W, 3), H and W ≥ 1; got "
     "<U7 (): np.asarray(vitroll.load_image(path)) reads an image file"),
    (lambda: (torch.zeros(3, 8, 10), [(0, 0, 5, 5)]), ValueError, "image must be RGB uint8 of shape (H, W, 3), H and "
     "W ≥ 1; got float32 (3, 8, 10): image.transpose(1, 2, 0) puts the channels last"),
    (lambda: (RGB[..., 0], [(0, 0, 5, 5)]), ValueError, "image must be RGB uint8 of shape (H, W, 3), H and W ≥ 1; got "
     "uint8 (8, 10): np.stack([image] * 3, axis=-1) makes a grey image RGB"),
    (lambda: (RGB, None), TypeError, "boxes must be a list of (left, top, right, bottom) boxes; got NoneType"),
    (lambda: (RGB, [(0, 0, 5, 5)], "red"), ValueError,
     "color must be (red, green, blue), three numbers in [0, 255]; got 'red'"),
    (lambda: (RGB, [(0, 0, 5, 5)], (0, 0, 256)), ValueError,
     "color must be (red, green, blue), three numbers in [0, 255]; got (0, 0, 256)"),
    (lambda: (RGB, [(0, 0, 5, 5)], (0, 0, 0), 1.5), TypeError, "thickness must be an integer ≥ 1; got float 1.5"),
    (lambda: (RGB, [(0, 0, 5, 5)], (0, 0, 0), 0), ValueError, "thickness must be an integer ≥ 1; got 0"),
], ids=["path", "tensor", "grey", "no-boxes", "colour-name", "colour-256", "float-thickness", "thickness-0"])
def test_outline_boxes_refuses_an_image_boxes_colour_or_thickness_it_cannot_draw(arguments, builtin, message):
    """``outline_boxes`` handed its image straight to OpenCV: a path or a tensor gave a many-line OpenCV overload
    error, a grey image came back with the boxes drawn in one channel's value."""
    image, boxes, *options = arguments()
    with pytest.raises(VitrollError) as raised:
        outline_boxes(image, boxes, **dict(zip(("color", "thickness"), options)))
    assert isinstance(raised.value, builtin)
    assert str(raised.value) == message


def test_outline_boxes_draws_a_box_reaching_far_beyond_the_image_to_its_edge():
    """A box to 1e30 (a map's box scaled wrongly, or float('inf')-like bounds) made OpenCV fail to parse the point."""
    outlined = outline_boxes(np.zeros((10, 10, 3), np.uint8), [(-1e30, 2, 1e30, 6)], thickness=1)
    assert outlined[2, :, 0].tolist() == [255] * 10 and outlined[5, :, 0].tolist() == [255] * 10
    assert outlined[3:5, :, 0].sum() == 0


def test_outline_boxes_draws_boxes_given_as_tuples_arrays_and_tensors():
    outlined = outline_boxes(np.zeros((10, 10, 3), np.uint8), [(0, 0, 5, 5), np.array([5, 5, 10, 10]),
                                                              torch.tensor([0, 5, 5, 10])], thickness=1)
    assert outlined[0, :5, 0].tolist() == [255] * 5 and outlined[9, 5:, 0].tolist() == [255] * 5
    assert outlined[9, :5, 0].tolist() == [255] * 5


@pytest.mark.parametrize("pictures,message", [
    (lambda saliency, overlaid: (saliency[:4, :5], overlaid),
     "saliency must have shape (8, 10) for an image of shape (8, 10, 3); got (4, 5): to_original(grid_map, geometry) "
     "puts a grid map on its image"),
    (lambda saliency, overlaid: (saliency[None], overlaid),
     "saliency must have shape (8, 10) for an image of shape (8, 10, 3); got (1, 8, 10)"),
    (lambda saliency, overlaid: (saliency, overlaid[:4]),
     "overlaid must have shape (8, 10, 3) for an image of shape (8, 10, 3); got (4, 10, 3)"),
], ids=["grid-map", "batch-of-one", "overlay-of-another-image"])
def test_figure_refuses_panels_of_another_size_than_the_image(pictures, message):
    """``figure(image, saliency, overlaid)`` drew panels of different sizes side by side without a word."""
    saliency = np.linspace(0, 1, 80, dtype=np.float32).reshape(8, 10)
    with pytest.raises(VitrollError) as raised:
        figure(RGB, *pictures(saliency, overlay(RGB, saliency)))
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == message


def test_a_recorder_asked_for_what_it_has_not_recorded_is_a_vitroll_error_and_still_a_runtime_error(model):
    with AttentionRecorder(model) as idle:
        pass
    with pytest.raises(RecorderUsageError, match=r"^no attention was recorded for layers \[0, 1\]; run a forward "
                                                 r"pass inside the context$") as raised:
        idle.attentions
    assert isinstance(raised.value, RuntimeError) and isinstance(raised.value, VitrollError)
    with AttentionRecorder(model) as recorder:
        logits = model(torch.rand(1, 3, 32, 32))
    with pytest.raises(RecorderUsageError, match=r"^attention gradients need AttentionRecorder\(model, "
                                                 r"keep_graph=True\)$"):
        recorder.gradients(logits[0, 0])


def _one_word_per_token(texts: list[str], add_special_tokens: bool) -> dict[str, list[list[int]]]:
    """A tokenizer stub: one id per character, so a caption of several letters is several tokens."""
    return {"input_ids": [[ord(letter) for letter in text] for text in texts]}


PIPELINE_MISTAKES = [
    pytest.param(lambda tmp: AnnotateOptions(precision="fp64"), OptionValueError,
                 "precision must be one of fp32, fp16, bf16; got 'fp64'", id="annotate-precision"),
    pytest.param(lambda tmp: AnnotateOptions(batch_size=0), OptionValueError, "batch_size must be at least 1; got 0",
                 id="annotate-batch-size"),
    pytest.param(lambda tmp: AnnotateOptions(workers=-1), OptionValueError, "workers must be at least 0; got -1",
                 id="annotate-workers"),
    pytest.param(lambda tmp: legend_html("jet", "zscore"), OptionValueError,
                 "normalization must be one of minmax, percentile; got 'zscore'", id="legend-normalization"),
    pytest.param(lambda tmp: parse_window("lungs"), OptionValueError,
                 "window must be one of lung, bone, soft-tissue or W,L (width,level); got 'lungs'", id="window-name"),
    pytest.param(lambda tmp: parse_window("0,40"), OptionValueError, "window width must be at least 1; got 0",
                 id="window-width"),
    pytest.param(lambda tmp: parse_group_by("scanner,colour"), OptionValueError,
                 "group_by: unknown field 'colour'; choose from ", id="group-by"),
    pytest.param(lambda tmp: AuditOptions(salt=" "), OptionValueError,
                 "salt is empty, which leaves the case and study keys plain hashes", id="empty-salt"),
    pytest.param(lambda tmp: AuditOptions(flag_threshold=50), OptionValueError,
                 "flag_threshold must lie in [0, 1]; got 50", id="flag-threshold"),
    pytest.param(lambda tmp: MaskSource(tmp / "masks"), InputValueError,
                 "mask folder {tmp}/masks does not exist", id="mask-folder"),
    pytest.param(lambda tmp: MaskSource((tmp / "masks.png").touch() or tmp / "masks.png"), InputValueError,
                 "mask folder {tmp}/masks.png is a file, not a folder", id="mask-folder-a-file"),
    pytest.param(lambda tmp: evaluate_captions(torch.nn.Identity(), None, [], ["gradcam"]), OptionValueError,
                 "caption maps come from chefer, rollout, occlusion (and the random baseline); not gradcam",
                 id="caption-method"),
    pytest.param(lambda tmp: TokenLayout(1, "class_token", None), OptionValueError,
                 "a TokenLayout has either a patch grid (images) or a token_mask (sequences)", id="layout-grid"),
    pytest.param(lambda tmp: TokenLayout(0, "position", None, token_mask=torch.ones(1, 4, dtype=torch.bool)),
                 OptionValueError, "a 'position' readout needs the explained positions", id="layout-position"),
    pytest.param(lambda tmp: register_family("mine", "MyTextModel", attention_modules=list, token_layout=TokenLayout,
                                             inputs="tokens", preprocessing=lambda model: None), OptionValueError,
                 "family 'mine': an image family needs its preprocessing; a text family takes none",
                 id="family-preprocessing"),
    pytest.param(lambda tmp: caption_ids(_one_word_per_token, ["red cross"], end=1, pad=0), InputValueError,
                 "the tokenizer splits 'red cross' into 9 tokens, not one per word", id="caption-tokens"),
]


@pytest.mark.parametrize("mistake,error,message", PIPELINE_MISTAKES)
def test_pipeline_audit_and_adapter_mistakes_are_a_vitroll_error_and_still_a_value_error(
        tmp_path, mistake, error, message):
    with pytest.raises(error, match="^[^\n]*$") as raised:
        mistake(tmp_path)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value).startswith(message.format(tmp=tmp_path))
    assert " --" not in f" {raised.value}"  # a Python user is told the arguments, not the command line's flags


def test_an_unreadable_mask_image_is_an_input_value_error_naming_it(tmp_path):
    (tmp_path / "scan.png").write_text("not a png")
    with pytest.raises(InputValueError, match=r"^cannot read mask image scan\.png$") as raised:
        MaskSource(tmp_path).get(tmp_path / "scan.dcm", (4, 4))
    assert isinstance(raised.value, ValueError)


POSITIONAL_OPTIONS = [
    pytest.param(lambda: overlay(RGB, GRID, "jet"),
                 "overlay takes image and heatmap positionally and every option by keyword; got 1 more positional "
                 "argument ('jet'): name it, as overlay(image, heatmap, cmap='jet') (its options: cmap, alpha, "
                 "interpolation, normalization, padded_hw, geometry)", id="overlay-cmap"),
    pytest.param(lambda: overlay(RGB, GRID, "viridis", 0.3),
                 "overlay takes image and heatmap positionally and every option by keyword; got 2 more positional "
                 "arguments ('viridis', 0.3): name each, as overlay(image, heatmap, cmap='viridis', alpha=0.3) (its "
                 "options: cmap, alpha, interpolation, normalization, padded_hw, geometry)", id="overlay-cmap-alpha"),
    pytest.param(lambda: normalize(GRID, 0),
                 "normalize takes saliency positionally and every option by keyword; got 1 more positional argument "
                 "(0): name it, as normalize(saliency, mode=…) (its options: mode, percentiles)", id="normalize"),
    pytest.param(lambda: to_original(GRID, None, "nearest"),
                 "to_original takes grid_map and geometry positionally and every option by keyword; got 1 more "
                 "positional argument ('nearest'): name it, as to_original(grid_map, geometry, "
                 "interpolation='nearest') (its options: interpolation)", id="to-original"),
    pytest.param(lambda: load_model("vitroll-shapes", "cpu"),
                 "load_model takes name positionally and every option by keyword; got 1 more positional argument "
                 "('cpu'): name it, as load_model(name, device='cpu') (its options: pretrained, checkpoint, "
                 "trust_checkpoint, num_classes, device)", id="load-model-device"),
]


@pytest.mark.parametrize("call, message", POSITIONAL_OPTIONS)
def test_an_option_given_positionally_is_refused_naming_its_keyword(call, message):
    """overlay(image, m, "jet"), normalize(m, 0) and load_model(name, "cpu") raised Python's bare TypeError (takes 2
    positional arguments but 3 were given), which names no keyword; now a VitrollError, still a TypeError, naming
    the keyword each value fits."""
    with pytest.raises(VitrollError) as caught:
        call()
    assert isinstance(caught.value, TypeError)
    assert str(caught.value) == message


def test_the_options_by_keyword_still_work_after_the_check():
    by_keyword = overlay(RGB, GRID, cmap="jet", alpha=0.25)
    assert by_keyword.shape == (8, 10, 3) and by_keyword.dtype == np.uint8
    np.testing.assert_array_equal(normalize(np.array([1.0, 3.0, 2.0]), mode="minmax"), [0.0, 1.0, 0.5])
