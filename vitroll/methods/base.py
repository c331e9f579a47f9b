"""What every saliency method shares: the call signature, the method registry and the recording step.

A method is a plain function ``method(model, images, **options) -> Tensor (B, h, w)`` registered under a
name with :func:`register_method`; pipelines and the CLI look methods up in :data:`METHODS`.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional, Protocol

import torch
from torch import nn

from vitroll.capture import AttentionRecorder, TokenLayout


class SaliencyMethod(Protocol):
    def __call__(self, model: nn.Module, images: torch.Tensor, **options: object) -> torch.Tensor: ...


METHODS: dict[str, SaliencyMethod] = {}


def register_method(name: str) -> Callable[[SaliencyMethod], SaliencyMethod]:
    """Register a saliency method under ``name`` (used by pipelines and the CLI's ``--method``)."""

    def decorate(method: SaliencyMethod) -> SaliencyMethod:
        METHODS[name] = method
        return method

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


def prepare_images(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Check a batch (B, C, H, W) and move it to the model's device and dtype."""
    if images.ndim != 4:
        raise ValueError(f"images must have shape (B, C, H, W); got {tuple(images.shape)}")
    return images.to(device=model_device(model), dtype=model_dtype(model))


def record_attention(
    model: nn.Module,
    images: torch.Tensor,
    *,
    head_fusion: Optional[str] = "mean",
    dtype: torch.dtype = torch.float32,
) -> tuple[list[torch.Tensor], TokenLayout, torch.Tensor]:
    """Run the model once in eval mode without gradients and record every layer's attention.

    Returns
    -------
    attentions : list of Tensor
        Per layer (B, N, N), or (B, H, N, N) when ``head_fusion`` is None.
    layout : TokenLayout
        Prefix tokens, readout and patch grid for this input size.
    logits : Tensor, shape (B, num_classes)
    """
    images = prepare_images(model, images)
    with eval_mode(model), torch.no_grad(), AttentionRecorder(model, head_fusion=head_fusion, dtype=dtype) as recorder:
        logits = model(images)
        return recorder.attentions, recorder.token_layout(tuple(images.shape[-2:])), logits
