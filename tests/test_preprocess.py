"""vitroll's preprocessing reproduces timm's eval transform exactly, and reports the geometry it used."""

from __future__ import annotations

import numpy as np
import pytest
import timm
from PIL import Image
from timm.data import create_transform, resolve_data_config

from vitroll.preprocess import Preprocessing


@pytest.mark.parametrize("model_name,kwargs", [
    ("vit_tiny_patch16_224", {}),
    ("deit_tiny_patch16_224", {}),
    ("vit_tiny_patch16_224", {"img_size": (224, 160)}),
])
@pytest.mark.parametrize("original_hw", [(300, 451), (640, 427), (224, 224), (97, 503)])
@pytest.mark.parametrize("crop_mode", ["center", "squash"])
def test_matches_timm_transform(model_name, kwargs, original_hw, crop_mode):
    model = timm.create_model(model_name, **kwargs)
    config = resolve_data_config({}, model=model)
    config["crop_mode"] = crop_mode
    if "img_size" in kwargs:  # timm's pretrained_cfg keeps the registry size; vitroll uses the size the model was built for
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
    (dict(crop_mode="centre"), "crop_mode must be one of center, squash; got 'centre'"),
])
def test_settings_that_cannot_preprocess_are_refused_when_made(settings, message):
    with pytest.raises(ValueError) as raised:  # were a ZeroDivisionError, inf pixels, or a silent centre crop
        Preprocessing(**{**dict(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3), **settings})
    assert str(raised.value) == message
    assert Preprocessing(input_size=(np.int64(32), 48), mean=(0.5,), std=(0.5,), crop_pct=1.15).crop_pct == 1.15
