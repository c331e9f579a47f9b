"""What every saliency method shares: the call signature, the method registry and the recording step.

A method is written once as ``compute(model, images, **options) -> Saliency`` (maps and the logits of the
same forward pass) and registered with :func:`register_method`. The registry :data:`METHODS` keeps that
function for pipelines, which need the predictions too; the decorator returns the public verb, which takes
the same arguments and returns only the maps (B, h, w). ``images`` is anything :data:`Images` allows (a tensor,
PIL images, paths, uint8 arrays); every method reaches the model through :func:`prepare_images`, which converts it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Callable, Iterator, NamedTuple, Optional, Protocol

import torch
from torch import nn

from vitroll.capture import AttentionRecorder, TokenLayout, family_of
from vitroll.methods.image_batch import Images, image_batch


class Saliency(NamedTuple):
    """Result of one method call on a batch."""

    maps: torch.Tensor
    """(B, h, w) float32 on the model's device (some methods also offer (B, H, h, w) per head)."""
    logits: Optional[torch.Tensor]
    """(B, num_classes) from the same forward pass, or None for methods that run no forward (baselines)."""


class SaliencyMethod(Protocol):
    def __call__(self, model: nn.Module, images: Images, **options: object) -> Saliency: ...


METHODS: dict[str, SaliencyMethod] = {}


def register_method(name: str) -> Callable[[SaliencyMethod], Callable[..., torch.Tensor]]:
    """Register ``compute`` under ``name`` (for pipelines and ``--method``); return the maps-only public verb."""

    def decorate(compute: SaliencyMethod) -> Callable[..., torch.Tensor]:
        METHODS[name] = compute

        @functools.wraps(compute)
        def maps_only(model: nn.Module, images: Images, **options: object) -> torch.Tensor:
            return compute(model, images, **options).maps

        # help() and type checkers read these: compute's parameters, but the maps (B, h, w) as the return
        maps_only.__signature__ = inspect.signature(compute).replace(return_annotation="torch.Tensor")
        maps_only.__annotations__ = {**compute.__annotations__, "return": "torch.Tensor"}
        return maps_only

    return decorate


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Run ``model`` in eval mode and give every submodule its own ``training`` flag back afterwards."""
    flags = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's first parameter (CPU for a parameter-less model)."""
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def model_dtype(model: nn.Module) -> torch.dtype:
    """Floating dtype of the model's first parameter."""
    parameter = next(model.parameters(), None)
    return parameter.dtype if parameter is not None else torch.float32


def prepare_images(model: nn.Module, images: Images) -> torch.Tensor:
    """``images`` as a batch (B, C, H, W) on the model's device and dtype: a tensor checked and moved, anything else
    converted first (:func:`~vitroll.methods.image_batch.image_batch`)."""
    batch = image_batch(model, images)
    if batch.ndim != 4:
        raise ValueError(f"images must have shape (B, C, H, W); got {tuple(batch.shape)}")
    return batch.to(device=model_device(model), dtype=model_dtype(model))


def predict(model: nn.Module, images: Images) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """One plain forward in eval mode without gradients, for methods that record no attention.

    Returns the images on the model's device and dtype, the logits (B, num_classes) and the patch grid (h, w).
    """
    images = prepare_images(model, images)
    with eval_mode(model), torch.no_grad():
        logits = model(images)
    return images, logits, family_of(model).token_layout(model, tuple(images.shape[-2:])).grid


def record_attention(
    model: nn.Module,
    images: Images,
    *,
    head_fusion: Optional[str] = "mean",
    dtype: torch.dtype = torch.float32,
    max_attention_memory: Optional[int] = None,
    factored: bool = False,
) -> tuple[list[torch.Tensor], TokenLayout, torch.Tensor]:
    """Run the model once in eval mode without gradients and record every layer's attention.

    ``max_attention_memory`` (bytes) is the attention memory budget while recording (default
    :data:`~vitroll.capture.recorder.DEFAULT_CHUNK_BYTES`): per-head probabilities are computed in query blocks
    within it; the recorded, head-fused maps take B·N²·4 bytes per layer. ``factored`` (head mean only) records
    the layers as :class:`~vitroll.capture.FactoredAttention` instead, O(N·D) per layer, once all layers' maps
    would exceed the budget (see :class:`AttentionRecorder`).

    Returns
    -------
    attentions : list of Tensor (or FactoredAttention)
        Per layer (B, N, N), or (B, H, N, N) when ``head_fusion`` is None.
    layout : TokenLayout
        Prefix tokens, readout and patch grid for this input size.
    logits : Tensor, shape (B, num_classes)
    """
    images = prepare_images(model, images)
    recorder = AttentionRecorder(model, head_fusion=head_fusion, dtype=dtype, factored=factored,
                                 chunk_bytes=max_attention_memory or None)
    with eval_mode(model), torch.no_grad(), recorder:
        logits = model(images)
        return recorder.attentions, recorder.token_layout(tuple(images.shape[-2:])), logits
