"""Ground-truth testbed: synthetic shapes with target masks, and the small ViT vitroll ships trained on them."""

from vitroll.testbed.model import TESTBED_NAME, build_testbed_model, load_testbed_model
from vitroll.testbed.shapes import CLASSES, ShapesConfig, ShapeSample, arrays, sample, samples

__all__ = [
    "CLASSES", "TESTBED_NAME", "ShapeSample", "ShapesConfig", "arrays", "build_testbed_model", "load_testbed_model",
    "sample", "samples",
]
