"""The testbed model: a small timm VisionTransformer trained on :mod:`vitroll.testbed.shapes`, shipped with vitroll.

Its weights (``shapes_vit.safetensors``, written by ``scripts/train_shapes.py``) and model card
(``MODEL_CARD.md``) live next to this file, so the README's first command and the tests have a model whose
attention means something, offline.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from vitroll.checkpoints import load_state, read_checkpoint
from vitroll.errors import ModelLoadError
from vitroll.testbed.shapes import CLASSES, ShapesConfig

TESTBED_NAME = "vitroll-shapes"
"""What ``--model`` accepts for the shipped model (also the default when no ``--model`` is given)."""

WEIGHTS = Path(__file__).with_name("shapes_vit.safetensors")

ARCHITECTURE = dict(
    img_size=64, patch_size=8, embed_dim=128, depth=4, num_heads=4, mlp_ratio=2.0, num_classes=len(CLASSES),
    global_pool="token", class_token=True,
)
"""Keyword arguments of ``timm.models.vision_transformer.VisionTransformer`` for the testbed model."""

DATA = ShapesConfig()
"""The images it is trained and evaluated on (full clutter)."""


def build_testbed_model() -> nn.Module:
    """The testbed architecture, randomly initialised, with its preprocessing and class names in ``pretrained_cfg``."""
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(**ARCHITECTURE)
    size = ARCHITECTURE["img_size"]
    model.pretrained_cfg = dict(
        architecture=TESTBED_NAME, input_size=(3, size, size), mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5),
        crop_pct=1.0, interpolation="bilinear", num_classes=len(CLASSES), label_names=list(CLASSES),
    )
    return model


def load_testbed_model(device: str = "cpu") -> nn.Module:
    """The shipped, trained testbed model in eval mode on ``device``."""
    if not WEIGHTS.is_file():
        raise ModelLoadError(f"{WEIGHTS}: the testbed weights are missing; run scripts/train_shapes.py")
    model = build_testbed_model()
    load_state(model, read_checkpoint(WEIGHTS), WEIGHTS)
    return model.eval().to(device)
