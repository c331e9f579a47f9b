"""vitroll's preprocessing reproduces timm's eval transform exactly, and reports the geometry it used."""

from __future__ import annotations

import numpy as np
import pytest
import timm
from PIL import Image
from timm.data import create_transform, resolve_data_config

from vitroll.errors import OptionValueError
from vitroll.preprocess import _PIL_INTERPOLATION, FULL_RESIZE_LIMIT, Preprocessing


@pytest.mark.parametrize("model_name,kwargs", [
    ("vit_tiny_patch16_224", {}),
    ("deit_tiny_patch16_224", {}),
    ("vit_tiny_patch16_224", {"img_size": (224, 160)}),
])
@pytest.mark.parametrize("original_hw", [(300, 451), (640, 427), (224, 224), (97, 503)])
@pytest.mark.parametrize("crop_mode", ["center", "squash", "border"])
def test_matches_timm_transform(model_name, kwargs, original_hw, crop_mode):
    model = timm.create_model(model_name, **kwargs)
    config = resolve_data_config({}, model=model)
    config["crop_mode"] = crop_mode
    # timm's pretrained_cfg keeps the registry size; vitroll uses the size the model was built for
    if "img_size" in kwargs:
        config["input_size"] = (3, *kwargs["img_size"])
    timm_transform = create_transform(**config)
    ours = Preprocessing.from_model(model, crop_mode=crop_mode)
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (*original_hw, 3), dtype=np.uint8))
    tensor, geometry = ours(image)
    expected = timm_transform(image)
    assert tensor.shape == expected.shape
    assert (tensor - expected).abs().max().item() < 1e-5
    assert geometry.original_hw == original_hw and geometry.input_hw == tuple(expected.shape[1:])


def test_overrides_ignore_none():
    base = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3)
    assert base.with_overrides(crop_pct=None, crop_mode="squash").crop_mode == "squash"
    assert base.with_overrides(crop_pct=None).crop_pct == base.crop_pct


def test_input_size_follows_the_built_model_not_the_pretrained_cfg():
    model = timm.create_model("vit_tiny_patch16_224", img_size=96)
    assert model.pretrained_cfg["input_size"] == (3, 224, 224)
    assert Preprocessing.from_model(model).input_size == (96, 96)


@pytest.mark.parametrize("settings, message", [
    (dict(crop_pct=0), "crop_pct must be a finite number > 0; got 0"),
    (dict(std=(0.5, 0.0, 0.5)), "std must not be 0 (the pixels are divided by it); got (0.5, 0.0, 0.5)"),
    (dict(mean=(0.5, 0.5)), "mean must be 1 or 3 finite numbers (one per channel); got (0.5, 0.5)"),
    (dict(input_size=(0, 224)), "input_size must be (H, W), two integers ≥ 1; got (0, 224)"),
    (dict(crop_mode="centre"), "crop_mode must be one of center, squash, border; got 'centre'"),
])
def test_settings_that_cannot_preprocess_are_refused_when_made(settings, message):
    with pytest.raises(OptionValueError) as raised:  # were a ZeroDivisionError, inf pixels, or a silent centre crop
        Preprocessing(**{**dict(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3), **settings})
    assert str(raised.value) == message
    assert Preprocessing(input_size=(np.int64(32), 48), mean=(0.5,), std=(0.5,), crop_pct=1.15).crop_pct == 1.15


@pytest.mark.parametrize("interpolation", ["bicubic", "bilinear", "lanczos", "hamming"])
@pytest.mark.parametrize("original_hw", [(3, 700), (900, 5), (2, 260)])
@pytest.mark.parametrize("crop_pct", [0.875, 1.15])
def test_an_extreme_strip_is_preprocessed_as_its_whole_resized_copy_would_be(interpolation, original_hw, crop_pct):
    pre = Preprocessing(input_size=(64, 48), mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=crop_pct,
                        interpolation=interpolation)
    geometry = pre.geometry(original_hw)
    assert geometry.resized_hw[0] * geometry.resized_hw[1] > FULL_RESIZE_LIMIT * 64 * 48  # only the crop is resampled
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (*original_hw, 3), dtype=np.uint8))
    top, left = geometry.crop_top_left
    whole = image.resize(geometry.resized_hw[::-1], _PIL_INTERPOLATION[interpolation])
    expected = np.asarray(whole.crop((left, top, left + 48, top + 64)), dtype=np.float32) / 255.0
    tensor, _ = pre(image)
    difference = np.abs(tensor.numpy().transpose(1, 2, 0) * 0.5 + 0.5 - expected) * 255.0
    assert difference.max() < 1.01 and (difference > 0.5).mean() < 0.05  # a level of 255 in a few pixels


def _bicubic(x: np.ndarray) -> np.ndarray:
    """Pillow's bicubic kernel (a = -0.5)."""
    x = np.abs(x)
    return np.where(x < 1, (1.5 * x - 2.5) * x * x + 1, np.where(x < 2, (((x - 5) * x + 8) * x - 4) * -0.5, 0.0))


def test_a_long_strip_is_not_resized_whole(monkeypatch):
    """A 1×100000 strip (a PNG of a few hundred bytes) resized whole was a 248×24800000 copy (25 GB) of which the
    crop took 224×224; only the crop is resampled now, to the pixels the whole copy would have."""
    resize = Image.Image.resize

    def crop_sized_resize(self, size, *args, **kwargs):
        assert size[0] * size[1] <= 224 * 224, f"resized whole, to {size[0]}×{size[1]}"
        return resize(self, size, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "resize", crop_sized_resize)
    pre = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.9)
    for original_hw in [(1, 100_000), (100_000, 1)]:
        strip = np.zeros((*original_hw, 3), dtype=np.uint8)
        strip.reshape(-1, 3)[50_000:] = (10, 200, 30)  # the second half green: the centre crop straddles the change
        tensor, geometry = pre(Image.fromarray(strip))
        green = np.rint((tensor[1].numpy() * 0.5 + 0.5) * 255.0)
        along, across = (green[112, :], green[:, 112]) if original_hw[0] == 1 else (green[:, 112], green[112, :])
        assert geometry.resized_hw == ((248, 24_800_000) if original_hw[0] == 1 else (24_800_000, 248))
        centres = (geometry.crop_top_left[original_hw[0] == 1] + np.arange(224) + 0.5) / 248  # in original pixels
        weights = _bicubic(centres[:, None] - (np.arange(49_990, 50_010) + 0.5))
        expected = weights @ np.where(np.arange(49_990, 50_010) >= 50_000, 200.0, 0.0) / weights.sum(axis=1)
        assert np.abs(along - np.clip(expected, 0, 255)).max() <= 1  # black into green, as the whole copy has it
        assert (across == across[0]).all()


@pytest.mark.parametrize("original_hw,crop_mode,crop_pct,share", [
    ((40, 600), "center", 0.875, 35 * 35 / (40 * 600)), ((600, 40), "center", 1.0, 1 / 15),
    ((224, 224), "center", 0.875, 0.875 ** 2), ((40, 600), "squash", 1.0, 1.0), ((480, 640), "center", 1.0, 0.75),
])
def test_seen_share_is_the_part_of_the_image_inside_the_model_input(original_hw, crop_mode, crop_pct, share):
    pre = Preprocessing(input_size=(224, 224), mean=(0.5,), std=(0.5,), crop_pct=crop_pct, crop_mode=crop_mode)
    assert pre.geometry(original_hw).seen_share() == pytest.approx(share, rel=0.02)


def test_the_readme_seen_shares_of_a_strip():
    """README's ``seen`` of a 600×40 strip said 0.05 (the middle 35×35 pixels, a crop_pct of 0.875): its annotate
    example's vit_base_patch16_224 crops at 0.9 (36×36 pixels), the default vitroll-shapes not at all (40×40)."""
    from vitroll.testbed.model import load_testbed_model

    vit_base = Preprocessing.from_model(timm.create_model("vit_base_patch16_224", pretrained=False))
    shapes = Preprocessing.from_model(load_testbed_model())
    assert vit_base.crop_pct == 0.9 and shapes.crop_pct == 1.0
    assert vit_base.geometry((40, 600)).seen_share() == pytest.approx(36 * 36 / (40 * 600), abs=5e-4)  # 0.054
    assert shapes.geometry((40, 600)).seen_share() == pytest.approx(40 * 40 / (40 * 600), abs=5e-4)  # 0.067


@pytest.mark.parametrize("channels", [3, 1])
def test_border_letterboxes_a_strip_so_the_model_and_its_map_cover_all_of_it(channels):
    """A 600×40 strip was centre-cropped to its middle 40×40 pixels (or squashed 15 times taller): ``border`` fits it
    into the input at its own aspect ratio, padded with the mean colour, which normalises to 0."""
    from vitroll.maps import to_original

    pre = Preprocessing(input_size=(224, 224), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), crop_pct=1.0,
                        crop_mode="border", channels=channels)
    strip = Image.fromarray(np.full((40, 600, 3), 255, np.uint8))
    tensor, geometry = pre(strip)
    assert geometry.resized_hw == (15, 224) and geometry.crop_top_left == (-104, 0) and geometry.seen_share() == 1.0
    band = np.zeros(224, bool)
    band[104:119] = True
    assert np.abs(tensor[:, ~band].numpy()).max() < 0.01  # mean colour: 0 after normalisation
    assert (tensor[:, band].numpy() > 2.0).all()  # white
    assert not np.isnan(to_original(np.ones((14, 14), np.float32), geometry)).any()
