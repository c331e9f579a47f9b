"""Saliency methods; each is registered in :data:`METHODS` under its name."""

from vitroll.methods.base import METHODS, Saliency, SaliencyMethod, record_attention, register_method
from vitroll.methods.rollout import attention, discard_lowest, rollout, rollout_matrix, rollout_vector

__all__ = [
    "METHODS", "Saliency", "SaliencyMethod", "attention", "discard_lowest", "record_attention", "register_method", "rollout",
    "rollout_matrix", "rollout_vector",
]
