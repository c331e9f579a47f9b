"""Image–text maps: one map per image and text, ``S[i, t]`` (the image–text logit) explained on the vision tower.

Every registered method serves: the texts are bound to the model (:class:`~vitroll.adapters.image_text.PromptedModel`,
whose classes they become), and a class-specific method (``chefer``, ``grad_rollout``, the attributions) runs once
on the B·T image–text pairs — image ``i`` repeated for each text, ``target_class = t`` — so one forward and one
backward pass explain every pair. A method that takes no target (``rollout``, ``attention``, ``flow``) cannot
depend on the text: it runs once on the B images and its map stands for every text.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from vitroll.adapters.image_text import PromptedModel, Texts, text_inputs
from vitroll.errors import MethodOptionError
from vitroll.methods.base import Saliency, prepare_inputs
from vitroll.methods.image_batch import Images, image_batch
from vitroll.methods.registry import method_named


def prompted_saliency(prompted: PromptedModel, images: Images, method: str, **options: object) -> Saliency:
    """``method``'s maps of every image against every text bound to ``prompted``.

    Returns
    -------
    Saliency
        maps (B, T, h, w) float32 and the image–text logits (B, T), on the model's device.

    Raises
    ------
    MethodOptionError
        For ``target_class`` (the texts are the targets) or an option ``method`` does not take.
    """
    chosen = method_named(method)
    if "target_class" in options:
        raise MethodOptionError("image–text maps explain every text: the target of pair (i, t) is text t; "
                                "give the texts instead of target_class")
    batch = prepare_inputs(prompted, image_batch(prompted, images))  # checked before its rows are paired with texts
    num_texts = len(prompted.texts)
    if not chosen.takes("target_class"):
        saliency = chosen(prompted, batch, **options)
        return Saliency(saliency.maps.unsqueeze(1).expand(-1, num_texts, -1, -1), saliency.logits)
    pairs = batch.repeat_interleave(num_texts, dim=0)  # row i·T + t is image i against text t
    targets = torch.arange(num_texts).repeat(len(batch))
    saliency = chosen(prompted, pairs, target_class=targets, **options)
    return Saliency(saliency.maps.unflatten(0, (len(batch), num_texts)), saliency.logits[::num_texts])


def image_text_maps(model: nn.Module, images: Images, texts_or_input_ids: Texts, method: str = "chefer", *,
                    attention_mask: Optional[torch.Tensor] = None, tokenizer: Optional[object] = None,
                    **options: object) -> torch.Tensor:
    """Maps of where an image–text model looks for each text: ``S[i, t]`` (``logits_per_image[i, t]``) explained.

    Parameters
    ----------
    model : nn.Module
        transformers ``CLIPModel`` or ``SiglipModel``, an open_clip ``CLIP`` (ViT vision tower), or any model
        registered with :func:`~vitroll.adapters.image_text.register_dual_encoder`.
    images : Images
        A preprocessed batch (B, 3, H, W), or PIL images, paths or uint8 arrays.
    texts_or_input_ids : str, sequence of str, or Tensor (T, L)
        Strings are tokenised with ``tokenizer`` or the model's own (see
        :func:`~vitroll.adapters.image_text.text_inputs`).
    method : str
        ``chefer`` (Chefer et al. 2021b: ``R ← R + mean_h((∂S/∂A ⊙ A)⁺)·R`` over the vision layers, read out at the
        class row, or SigLIP's attention-pool row), ``grad_rollout``, any class-specific method, or a text-agnostic
        one (``rollout``) for contrast.
    attention_mask : Tensor (T, L), optional
        With input ids, for a model whose text tower reads one.
    tokenizer : optional
        Tokenises strings (default: the model's own).
    **options
        The method's options (``start_layer``, ``discard_ratio``, …), checked as for the method itself.

    Returns
    -------
    Tensor, shape (B, T, h, w), float32, on the model's device.
    """
    prompted = PromptedModel(model, text_inputs(model, texts_or_input_ids, attention_mask=attention_mask,
                                                tokenizer=tokenizer))
    return prompted_saliency(prompted, images, method, **options).maps
