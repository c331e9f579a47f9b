"""Every method takes images as users hold them: PIL images, paths, uint8 arrays, lists of them; tensors as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from vitroll import (
    ImageReadError, Preprocessing, attention, center, chefer, flow, grad_rollout, gradient_shap, integrated_gradients,
    load_image, occlusion, random_map, rollout,
)
from vitroll.io.images import finite_unit, upright_rgb
from vitroll.methods.image_batch import ACCEPTED, image_batch
from vitroll.wording import worded_for_the_command_line

SAMPLES = Path(__file__).resolve().parents[1] / "sample_images"
VERBS = [rollout, attention, flow, grad_rollout, chefer, integrated_gradients, gradient_shap, occlusion, random_map,
         center]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(2)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=5).eval()


def preprocessed(model, images: list[Image.Image]) -> torch.Tensor:
    """The batch a user would build by hand: the model's own transform, image by image, stacked."""
    return torch.stack([Preprocessing.from_model(model)(image)[0] for image in images])


def rotated_jpeg(tmp_path) -> Path:
    """A 40×24 JPEG whose EXIF says to display it rotated by 90° (upright: 24×40)."""
    array = np.random.default_rng(1).integers(0, 256, (24, 40, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.jpg"
    Image.fromarray(array).save(path, exif=exif)
    return path


@pytest.mark.parametrize("method", VERBS, ids=[verb.__name__ for verb in VERBS])
def test_paths_pil_images_and_arrays_give_the_maps_of_their_preprocessed_tensor(model, tmp_path, method):
    photo = SAMPLES / "cat.jpg"
    grey = np.random.default_rng(0).integers(0, 256, (50, 30), dtype=np.uint8)
    rgb = np.random.default_rng(1).integers(0, 256, (20, 70, 3), dtype=np.uint8)
    rotated = rotated_jpeg(tmp_path)
    images = [str(photo), Image.open(SAMPLES / "rocket.jpg"), grey, rgb, rotated, Image.open(rotated)]
    expected_inputs = [load_image(photo), load_image(SAMPLES / "rocket.jpg"), Image.fromarray(grey).convert("RGB"),
                       Image.fromarray(rgb), load_image(rotated), load_image(rotated)]

    maps = method(model, images)

    expected = method(model, preprocessed(model, expected_inputs))
    assert maps.shape == (6, 2, 2) and maps.device == next(model.parameters()).device
    assert torch.equal(maps, expected)


def test_one_image_is_a_batch_of_one_in_any_form(model):
    photo = SAMPLES / "coffee.jpg"
    expected = rollout(model, preprocessed(model, [load_image(photo)]))
    assert expected.shape == (1, 2, 2)
    for form in (str(photo), photo, Image.open(photo), np.asarray(load_image(photo)), (photo,), [str(photo)]):
        assert torch.equal(rollout(model, form), expected), type(form).__name__


def test_a_grey_array_is_the_same_image_as_its_rgb_copy(model):
    grey = np.random.default_rng(3).integers(0, 256, (33, 47), dtype=np.uint8)
    assert torch.equal(chefer(model, grey), chefer(model, np.repeat(grey[..., None], 3, axis=-1)))


def test_pil_modes_are_converted_like_files(model, tmp_path):
    rgba = Image.new("RGBA", (40, 40), (255, 0, 0, 0))  # fully transparent: composited on white, as load_image does
    rgba.save(tmp_path / "clear.png")
    assert torch.equal(image_batch(model, rgba), image_batch(model, tmp_path / "clear.png"))
    assert torch.equal(image_batch(model, rgba), image_batch(model, np.full((40, 40, 3), 255, dtype=np.uint8)))


def test_tensors_are_taken_as_they_are(model):
    batch = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    assert image_batch(model, batch) is batch
    with pytest.raises(ValueError, match=r"^images must have shape \(B, C, H, W\); got \(3, 32, 32\); "
                                         r"images\[None\] is a batch of one$"):
        rollout(model, batch[0])


@pytest.mark.parametrize("images,error,message", [
    ({"image": "cat.jpg"}, TypeError, f"images has type dict; accepted: {ACCEPTED}"),
    (42, TypeError, f"images has type int; accepted: {ACCEPTED}"),
    (b"cat.jpg", TypeError, f"images has type bytes; accepted: {ACCEPTED}"),
    ([], ValueError, f"images is an empty list; accepted: {ACCEPTED}"),
    ((), ValueError, f"images is an empty tuple; accepted: {ACCEPTED}"),
    ([str(SAMPLES / "cat.jpg"), torch.zeros(3, 32, 32)], TypeError, f"images[1] has type Tensor; accepted: {ACCEPTED}"),
    ([[str(SAMPLES / "cat.jpg")]], TypeError, f"images[0] has type list; accepted: {ACCEPTED}"),
    (np.zeros((8, 8, 3)), ValueError,
     f"images is a float64 array of shape (8, 8, 3), not a uint8 image (H, W, 3) or a uint8 or uint16 grey image "
     f"(H, W); accepted: {ACCEPTED}; (images * 255).round().astype(np.uint8) converts values in [0, 1]"),
    ([np.zeros((8, 8, 4), dtype=np.uint8)], ValueError,
     "images[0] is a uint8 array of shape (8, 8, 4), RGB with alpha, which vitroll does not guess how to show: "
     "Image.fromarray(images[0]) puts it on white as image files are, images[0][..., :3] drops the alpha"),
    (np.zeros((8, 8, 2), dtype=np.uint8), ValueError,
     "images is a uint8 array of shape (8, 8, 2), grey with alpha, which vitroll does not guess how to show: "
     "Image.fromarray(images) puts it on white as image files are, images[..., 0] drops the alpha"),
    (np.zeros((8, 8, 4), dtype=np.float32), ValueError,
     f"images is a float32 array of shape (8, 8, 4), not a uint8 image (H, W, 3) or a uint8 or uint16 grey image "
     f"(H, W); accepted: {ACCEPTED}"),
    (np.zeros((2, 8, 8, 3), dtype=np.uint8), ValueError,
     f"images is a uint8 array of shape (2, 8, 8, 3), not a uint8 image (H, W, 3) or a uint8 or uint16 grey image "
     f"(H, W); accepted: {ACCEPTED}; list(images) passes a stacked batch as its images"),
    (np.zeros((8, 8, 3), dtype=np.int64), ValueError,
     f"images is an int64 array of shape (8, 8, 3), not a uint8 image (H, W, 3) or a uint8 or uint16 grey image "
     f"(H, W); accepted: {ACCEPTED}"),
    (np.zeros((0, 30, 3), dtype=np.uint8), ValueError,
     "an image of 0×30 pixels (H×W) is empty: there is nothing to preprocess"),
    ([Image.new("RGB", (5, 0))], ValueError, "an image of 0×5 pixels (H×W) is empty: there is nothing to preprocess"),
])
def test_anything_else_is_refused_naming_what_is_accepted(model, images, error, message):
    with pytest.raises(error) as raised:
        rollout(model, images)
    assert str(raised.value) == message


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.complex64])
def test_a_tensor_not_of_real_floats_is_refused_as_not_preprocessed(model, dtype):
    """A complex tensor was taken, its imaginary part dropped with a torch warning."""
    pixels = torch.randint(0, 256, (2, 3, 32, 32)).to(dtype)
    with pytest.raises(ValueError) as raised:
        rollout(model, pixels)
    assert str(raised.value) == (
        f"images is a {dtype} tensor: a tensor must be the model's preprocessed float input "
        "(Preprocessing.from_model(model).batch gives it); pass raw pixels as a uint8 NumPy array (H, W, 3) or a PIL "
        "image to have them preprocessed")


@pytest.mark.parametrize("method", VERBS, ids=[verb.__name__ for verb in VERBS])
def test_an_empty_batch_is_refused_as_an_empty_list_is(model, method):
    """Six verbs gave maps (0, 2, 2); occlusion, random_map and the attributions failed inside (stack of an empty
    list, a division by zero)."""
    with pytest.raises(ValueError) as raised:
        method(model, torch.zeros(0, 3, 32, 32))
    assert str(raised.value) == "images is an empty batch of shape (0, 3, 32, 32): there is nothing to explain"


@pytest.mark.parametrize("method", [rollout, chefer, random_map])
def test_raw_pixels_made_float_are_refused_naming_their_range_and_the_models(model, method):
    """A float tensor of 0…255 pixels gave maps of nothing without a word."""
    pixels = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32) % 256
    with pytest.raises(ValueError) as raised:
        method(model, pixels)
    assert str(raised.value) == (
        "images range from 0 to 255, far beyond the -1.00…1.00 the model's normalisation gives pixels: raw 0…255 "
        "pixels? pass them as uint8 arrays (H, W, 3) or PIL images to have them preprocessed, or normalise them as "
        "Preprocessing.from_model(model) does")
    noise = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 20  # strays, but not pixels
    assert method(model, noise).shape == (2, 2, 2)
    assert method(model, pixels / 255).shape == (2, 2, 2)  # within 10× of the range: not refused


def test_a_normalised_batch_with_a_nan_is_not_taken_for_raw_pixels(model):
    """A NaN made min() and max() NaN, every comparison False, so the batch was refused as "raw 0…255 pixels?"."""
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    images[0, 0, 0, 0] = float("nan")
    assert random_map(model, images).shape == (2, 2, 2)


def test_the_conversions_an_alpha_array_refusal_names_give_its_picture(model):
    rgba = np.zeros((32, 32, 4), dtype=np.uint8)
    rgba[..., 0], rgba[:16, :, 3] = 200, 255  # top half opaque red, bottom half transparent
    on_white = np.asarray(upright_rgb(Image.fromarray(rgba)))
    assert on_white[0, 0].tolist() == [200, 0, 0] and on_white[-1, -1].tolist() == [255, 255, 255]
    assert torch.equal(rollout(model, Image.fromarray(rgba)), rollout(model, on_white))
    assert torch.equal(rollout(model, rgba[..., :3]), rollout(model, Image.fromarray(rgba).convert("RGB")))
    grey_alpha = np.stack([np.full((32, 32), 90, np.uint8), np.full((32, 32), 255, np.uint8)], axis=-1)
    assert torch.equal(rollout(model, Image.fromarray(grey_alpha)), rollout(model, grey_alpha[..., 0]))


CHANNEL_MISTAKES = [
    ((2, 1, 32, 32), "images of shape (2, 1, 32, 32) have 1 channel; the model takes (B, 3, H, W): pass "
                     "pictures as uint8 arrays, PIL images or paths to have them converted to RGB and preprocessed"),
    ((2, 4, 32, 32), "images of shape (2, 4, 32, 32) have 4 channels; the model takes (B, 3, H, W): "
                     "images[:, :3] drops an alpha channel"),
    ((1, 32, 32, 3), "images of shape (1, 32, 32, 3) have 32 channels; the model takes (B, 3, H, W): it looks "
                     "channels-last: images.permute(0, 3, 1, 2) puts the channels second"),
]


@pytest.mark.parametrize("method", VERBS, ids=[verb.__name__ for verb in VERBS])
@pytest.mark.parametrize("shape,message", CHANNEL_MISTAKES, ids=["grey", "rgba", "channels-last"])
def test_a_tensor_with_other_channels_is_refused_naming_both_shapes(model, method, shape, message):
    with pytest.raises(ValueError) as raised:
        method(model, torch.randn(shape))
    assert str(raised.value) == message


@pytest.mark.parametrize("in_chans", [3, 1])
def test_a_linear_patch_embedding_is_checked_for_channels_like_a_convolution(in_chans):
    """NaFlexViT embeds its patches with an nn.Linear: without a Conv2d its channels were unknown, so a grey tensor
    given to an RGB model failed inside it (mat1 and mat2 shapes cannot be multiplied) and a grey NaFlexViT was given
    RGB pictures."""
    model = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, patch_size=8, depth=1, embed_dim=32,
                              num_heads=2, num_classes=3, in_chans=in_chans).eval()
    other = 4 - in_chans  # 1 for RGB, 3 for grey
    with pytest.raises(ValueError, match=rf"have {other} channels?; the model takes \(B, {in_chans}, H, W\)"):
        rollout(model, torch.randn(1, other, 32, 48))
    assert Preprocessing.from_model(model).channels == in_chans
    assert rollout(model, [np.zeros((40, 60, 3), np.uint8)]).shape[0] == 1


def test_a_model_built_for_one_channel_takes_pictures_in_grey_and_refuses_rgb_tensors():
    """Pictures were preprocessed to RGB whatever the model took, so a grey model refused every picture."""
    grey_model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=5,
                                   in_chans=1).eval()
    picture = np.asarray(Image.open(SAMPLES / "cat.jpg").convert("RGB"))
    grey = np.asarray(Image.fromarray(picture).convert("L").resize((32, 32), Image.Resampling.BICUBIC))
    # its pretrained_cfg's centre crop of 0.9 crops nothing from a square picture resized to 35×35: crop it ourselves
    preprocessing = Preprocessing.from_model(grey_model, crop_pct=1.0, crop_mode="squash")
    assert preprocessing.channels == 1
    tensor = torch.from_numpy((grey / 255.0 - 0.5) / 0.5).float()[None, None]
    assert torch.allclose(preprocessing(Image.fromarray(picture))[0], tensor[0], atol=1e-6)
    assert torch.allclose(rollout(grey_model, tensor),
                          rollout(grey_model, preprocessing(Image.fromarray(picture))[0][None]))
    with pytest.raises(ValueError) as raised:
        rollout(grey_model, torch.randn(2, 3, 32, 32))
    assert str(raised.value) == (
        "images of shape (2, 3, 32, 32) have 3 channels; the model takes (B, 1, H, W): pass pictures as uint8 "
        "arrays, PIL images or paths to have them converted to grey and preprocessed")


def test_a_grey_preprocessing_normalises_by_the_luma_of_rgb_means():
    imagenet = Preprocessing(input_size=(4, 4), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), channels=1)
    mean, std = imagenet.normalisation()
    assert mean.shape == std.shape == (1,)
    assert mean[0] == pytest.approx(0.299 * 0.485 + 0.587 * 0.456 + 0.114 * 0.406)
    assert std[0] == pytest.approx(0.299 * 0.229 + 0.587 * 0.224 + 0.114 * 0.225)
    tensor, _ = imagenet(Image.new("RGB", (8, 8), (255, 0, 0)))
    assert tensor.shape == (1, 4, 4) and torch.allclose(tensor, torch.full((1, 4, 4), (76 / 255 - mean[0]) / std[0]))


@pytest.mark.parametrize("method", [rollout, chefer])
def test_a_tensor_of_another_size_is_refused_in_vitrolls_words(model, method):
    with pytest.raises(ValueError) as raised:
        method(model, torch.randn(1, 3, 40, 40))
    assert str(raised.value) == (
        "images of 40×40 do not fit the model: VisionTransformer was built for 32×32 inputs; build it for this size "
        "with img_size=(40, 40), or for any size with dynamic_img_size=True")


def test_a_padding_model_whose_size_is_not_whole_patches_is_refused_in_vitrolls_words():
    """timm pads a dynamic_img_pad model's 100 px input to 7×7 patches of 16, but without dynamic_img_size its
    position embeddings are for 6×6: its forward failed with a tensor-size traceback."""
    model = timm.create_model("vit_tiny_patch16_224", img_size=100, dynamic_img_pad=True, depth=1,
                              num_classes=3).eval()
    with pytest.raises(ValueError) as raised:
        rollout(model, torch.randn(1, 3, 100, 100))
    assert str(raised.value) == (
        "images of 100×100 do not fit the model: VisionTransformer pads a 100×100 input to a 7×7 grid of 16×16 "
        "patches, but its position embeddings are for 6×6; build it with dynamic_img_size=True, or with an img_size of "
        "whole patches")
    dynamic = timm.create_model("vit_tiny_patch16_224", img_size=100, dynamic_img_pad=True, dynamic_img_size=True,
                                depth=1, num_classes=3).eval()
    assert rollout(dynamic, torch.randn(1, 3, 100, 100)).shape == (1, 7, 7)


@pytest.mark.parametrize("size", [(40, 40), (36, 36)])
def test_a_size_refusal_names_keywords_from_python_and_flags_on_the_command_line(model, size):
    """The refusal named --img-size and --dynamic-img-size to a Python user, who has no flags: from Python it names
    the keyword arguments that build the model, and only the command line (the same check) names its flags."""
    padding = timm.create_model("vit_tiny_patch16_224", img_size=36, patch_size=8, dynamic_img_pad=True, depth=1,
                                embed_dim=32, num_heads=2, num_classes=3).eval()
    refusing = model if size == (40, 40) else padding
    with pytest.raises(ValueError) as from_python:
        rollout(refusing, torch.randn(1, 3, *size))
    assert "--" not in str(from_python.value) and "img_size" in str(from_python.value)
    with worded_for_the_command_line(), pytest.raises(ValueError) as on_the_command_line:
        rollout(refusing, torch.randn(1, 3, *size))
    flags = {(40, 40): "with --img-size 40 40, or for any size with --dynamic-img-size",
             (36, 36): "build it with --dynamic-img-size, or with an --img-size of whole patches"}
    assert str(on_the_command_line.value).endswith(flags[size])
    with pytest.raises(ValueError) as after:  # the command line's wording ends with it
        rollout(refusing, torch.randn(1, 3, *size))
    assert str(after.value) == str(from_python.value)


def test_a_missing_or_broken_file_is_an_image_read_error(model, tmp_path):
    (tmp_path / "notes.png").write_text("hello")
    with pytest.raises(ImageReadError) as missing:
        grad_rollout(model, [SAMPLES / "cat.jpg", tmp_path / "gone.jpg"])
    assert str(missing.value) == f"{tmp_path / 'gone.jpg'}: no such file"
    with pytest.raises(ImageReadError) as broken:
        rollout(model, str(tmp_path / "notes.png"))
    assert str(broken.value) == f"{tmp_path / 'notes.png'}: not an image Pillow can read"


def test_accepted_message_names_every_accepted_form():
    for form in ("tensor (B, C, H, W)", "PIL image", "path (str or os.PathLike)", "uint8 array (H, W, 3) or (H, W)",
                 "uint16 array (H, W)",
                 "list or tuple"):
        assert form in ACCEPTED


@settings(max_examples=25, deadline=None)
@given(height=st.integers(1, 90), width=st.integers(1, 90), grey=st.booleans(), seed=st.integers(0, 2**16))
def test_any_uint8_array_is_preprocessed_by_the_models_transform(model, height, width, grey, seed):
    shape = (height, width) if grey else (height, width, 3)
    array = np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)
    batch = image_batch(model, [array, Image.fromarray(array)])
    expected = preprocessed(model, [Image.fromarray(array).convert("RGB")] * 2)
    assert batch.shape == (2, 3, 32, 32) and batch.dtype == torch.float32
    assert torch.equal(batch, expected)


def test_a_16_bit_grey_array_gives_the_maps_of_its_pil_image_and_png_file(model, tmp_path):
    """A uint16 (H, W) array was refused while the same pixels as a PIL I;16 image or a 16-bit PNG were taken
    (stretched to their range)."""
    grey = (np.random.default_rng(4).integers(0, 4096, (40, 36))).astype(np.uint16)  # 12-bit, as scanners give
    Image.fromarray(grey).save(tmp_path / "grey16.png")
    assert Image.open(tmp_path / "grey16.png").mode == "I;16"
    expected = chefer(model, tmp_path / "grey16.png")
    for form in (grey, grey[..., None], grey.astype(">u2"), Image.fromarray(grey)):
        assert torch.equal(chefer(model, form), expected), (form.dtype, form.shape) if hasattr(form, "shape") else form
    stretched = finite_unit(grey) * 255
    assert torch.equal(image_batch(model, grey), image_batch(model, stretched.round().astype(np.uint8)))


def test_a_grey_array_with_a_channel_axis_is_the_grey_image(model):
    grey = np.random.default_rng(5).integers(0, 256, (33, 47), dtype=np.uint8)
    assert torch.equal(rollout(model, grey[..., None]), rollout(model, Image.fromarray(grey)))


def test_a_16_bit_colour_array_is_refused_naming_the_conversions(model):
    """Pillow holds no 16-bit colour image and reads a 16-bit colour PNG at its high byte, while 16-bit grey is
    stretched to its range: which one an array means is the user's to say."""
    rgb = np.full((8, 8, 3), 4095, dtype=np.uint16)
    with pytest.raises(ValueError) as raised:
        rollout(model, [rgb])
    assert str(raised.value) == (
        "images[0] is a uint16 colour array of shape (8, 8, 3), which vitroll does not guess how to scale: "
        "(images[0] >> 8).astype(np.uint8) reads it as Pillow reads a 16-bit colour PNG, "
        "(images[0] / images[0].max() * 255).round().astype(np.uint8) stretches it to its maximum")
    assert torch.equal(rollout(model, (rgb >> 8).astype(np.uint8)), rollout(model, np.full((8, 8, 3), 15, np.uint8)))
