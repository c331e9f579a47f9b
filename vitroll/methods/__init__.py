"""Saliency methods; each is registered in :data:`METHODS` under its name."""

from vitroll.methods.attributions import gradient_shap, integrated_gradients, occlusion
from vitroll.methods.base import Saliency, SaliencyMethod, record_attention
from vitroll.methods.baselines import center, random_map
from vitroll.methods.caption import CAPTION_METHODS, CaptionMaps, caption_maps
from vitroll.methods.chefer import chefer
from vitroll.methods.flow import flow
from vitroll.methods.grad_rollout import grad_rollout
from vitroll.methods.gradients import attention_gradients
from vitroll.methods.image_batch import Images, image_batch
from vitroll.methods.image_text import image_text_maps, prompted_saliency
from vitroll.methods.registry import (
    METHODS, Method, MethodOption, check_shared_options, method_named, methods_taking, register_method,
)
from vitroll.methods.rollout import attention, discard_lowest, rollout, rollout_matrix, rollout_vector

__all__ = [
    "CAPTION_METHODS", "CaptionMaps", "METHODS", "Images", "Method", "MethodOption", "Saliency", "SaliencyMethod",
    "attention", "attention_gradients", "caption_maps", "center", "check_shared_options", "chefer",
    "discard_lowest", "flow", "grad_rollout", "gradient_shap", "image_batch", "image_text_maps",
    "integrated_gradients", "method_named", "methods_taking", "occlusion", "prompted_saliency", "random_map",
    "record_attention", "register_method", "rollout", "rollout_matrix", "rollout_vector",
]
