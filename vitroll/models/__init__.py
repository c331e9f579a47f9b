"""Loading models, one module per source: timm names and ``hf-hub:`` (:mod:`~vitroll.models.timm`), the Hugging Face
hub reached or not (:mod:`~vitroll.models.hub`), ``torchvision:`` names, ``open_clip:`` architectures, transformers
folders and hub ids, the shipped testbed models; :func:`load_model` over them all (:mod:`~vitroll.models.load`), the
model's class names and where its weights came from."""

from vitroll.models.classes import class_names
from vitroll.models.hub import hub_reachable
from vitroll.models.load import load_model
from vitroll.models.provenance import ModelProvenance, has_random_weights
from vitroll.models.timm import check_model_name
from vitroll.models.transformers import SHIPPED_TRANSFORMERS, is_transformers_name

__all__ = [
    "ModelProvenance", "SHIPPED_TRANSFORMERS", "check_model_name", "class_names", "has_random_weights",
    "hub_reachable", "is_transformers_name", "load_model",
]
