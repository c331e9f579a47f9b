"""Saliency methods; each is registered in :data:`METHODS` under its name."""

from vitroll.methods.attributions import gradient_shap, integrated_gradients
from vitroll.methods.base import METHODS, Saliency, SaliencyMethod, record_attention, register_method
from vitroll.methods.baselines import center, random_map
from vitroll.methods.chefer import chefer
from vitroll.methods.flow import flow
from vitroll.methods.grad_rollout import grad_rollout
from vitroll.methods.gradients import attention_gradients
from vitroll.methods.image_batch import Images, image_batch
from vitroll.methods.rollout import attention, discard_lowest, rollout, rollout_matrix, rollout_vector

__all__ = [
    "METHODS", "Images", "Saliency", "SaliencyMethod", "attention", "attention_gradients", "center", "chefer",
    "discard_lowest", "flow", "grad_rollout", "gradient_shap", "image_batch", "integrated_gradients", "random_map",
    "record_attention", "register_method", "rollout", "rollout_matrix", "rollout_vector",
]
