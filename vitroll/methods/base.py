"""What every saliency method shares: its result, its call signature and the recording step.

A method is written once as ``compute(model, inputs, **options) -> Saliency`` (maps and the logits of the
same forward pass) and registered with :func:`~vitroll.methods.registry.register_method`, which reads its options
from that signature. ``inputs`` is anything :data:`~vitroll.methods.inputs.Inputs` allows (for vision models a
tensor, PIL images, paths, uint8 arrays; for text models token ids or strings); every method reaches the model
through :func:`prepare_inputs`, which converts it into the batch the model's family runs.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Callable, Iterator, NamedTuple, Optional, Protocol, Sequence, TypeVar

import torch
from torch import nn

from vitroll.capture import AttentionRecorder, TokenLayout, family_of
from vitroll.capture.families import call_model, check_module, registered_family
from vitroll.capture.fusion import HeadFusion
from vitroll.errors import InputValueError, OptionOutOfRange, OptionValueError, UnsupportedModelError
from vitroll.io.text import TokenBatch
from vitroll.methods.inputs import Batch, Inputs, model_batch
from vitroll.preprocess import Preprocessing, input_channels
from vitroll.wording import method_option


class Saliency(NamedTuple):
    """Result of one method call on a batch."""

    maps: torch.Tensor
    """(B, h, w) float32 on the model's device (some methods also offer (B, H, h, w) per head); for a text model
    token scores (B, L), padded positions 0."""
    logits: Optional[torch.Tensor]
    """(B, num_classes) from the same forward pass, or None for methods that run no forward (baselines)."""


class SaliencyMethod(Protocol):
    def __call__(self, model: nn.Module, inputs: Inputs, **options: object) -> Saliency: ...


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


def check_model(model: object) -> None:
    """Refuse, in one line, a ``model`` that is not an ``nn.Module`` (a model's name, or the arguments swapped) or
    whose weights are on the meta device (no values to compute with), before anything hooks or runs it."""
    check_module(model)
    if any(tensor.is_meta for tensor in itertools.chain(model.parameters(), model.buffers())):
        raise InputValueError(f"{type(model).__name__}'s weights are on the meta device, which holds no values: "
                              "model.to_empty(device='cpu') and load_state_dict(...) give them values first")


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's first parameter (CPU for a parameter-less model)."""
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def model_dtype(model: nn.Module) -> torch.dtype:
    """Floating dtype of the model's first parameter."""
    parameter = next(model.parameters(), None)
    return parameter.dtype if parameter is not None else torch.float32


def prepare_inputs(model: nn.Module, inputs: Inputs) -> Batch:
    """``inputs`` as a batch on the model's device: images (B, C, H, W) in the model's dtype (a tensor checked and
    moved, anything else converted first), or a :class:`~vitroll.io.text.TokenBatch`
    (:func:`~vitroll.methods.inputs.model_batch`)."""
    batch = model_batch(model, inputs)
    if isinstance(batch, TokenBatch):
        return batch.to(model_device(model))
    if batch.ndim != 4:
        one = "; images[None] is a batch of one" if batch.ndim == 3 else ""
        raise InputValueError(f"images must have shape (B, C, H, W); got {tuple(batch.shape)}{one}")
    _check_channels(model, batch)
    _check_normalised(model, batch)
    _check_image_size(model, tuple(batch.shape[-2:]))
    return batch.to(device=model_device(model), dtype=model_dtype(model))


def _check_channels(model: nn.Module, batch: torch.Tensor) -> None:
    """Refuse a batch (B, C, H, W) whose C is not the model's, naming both shapes, rather than the convolution's
    error from inside the model."""
    expected = input_channels(model)
    channels = batch.shape[1]
    if expected is None or channels == expected:
        return
    shape = tuple(batch.shape)
    if batch.shape[-1] == expected:
        advice = "it looks channels-last: images.permute(0, 3, 1, 2) puts the channels second"
    elif expected == 3 and channels == 4:
        advice = "images[:, :3] drops an alpha channel"
    elif expected in (1, 3):
        advice = (f"pass pictures as uint8 arrays, PIL images or paths to have them converted to "
                  f"{'grey' if expected == 1 else 'RGB'} and preprocessed")
    else:
        advice = (f"pictures are preprocessed to RGB or grey only, so give it a preprocessed tensor "
                  f"(B, {expected}, H, W)")
    raise InputValueError(f"images of shape {shape} have {channels} channel{'s' if channels != 1 else ''}; "
                          f"the model takes (B, {expected}, H, W): {advice}")


def _check_normalised(model: nn.Module, batch: torch.Tensor) -> None:
    """Refuse a batch with no negative value and values far above what the model's normalisation makes of pixels
    in [0, 1]: raw 0…255 pixels made float (their maps mean nothing, and nothing else would say so). Noise that
    strays beyond the normalised range (``torch.randn``) has negative values and passes."""
    try:
        preprocessing = Preprocessing.from_model(model)
    except UnsupportedModelError:
        return
    bounds = [(edge - mean) / std for mean, std in zip(preprocessing.mean, preprocessing.std) for edge in (0.0, 1.0)]
    low, high = min(bounds), max(bounds)
    smallest, largest = float(batch.detach().min()), float(batch.detach().max())
    if not (smallest >= 0 and largest > 10 * max(-low, high)):  # written so that a NaN (min and max NaN) passes
        return
    raise InputValueError(f"images range from {smallest:.4g} to {largest:.4g}, far beyond the {low:.2f}…{high:.2f} "
                          "the model's normalisation gives pixels: raw 0…255 pixels? pass them as uint8 arrays "
                          "(H, W, 3) or PIL images to have them preprocessed, or normalise them as "
                          "Preprocessing.from_model(model) does")


def _check_image_size(model: nn.Module, image_hw: tuple[int, int]) -> None:
    """Refuse images of a size the model cannot take, in its family's words rather than the model's own error."""
    family = registered_family(model)
    if family is None:
        return
    try:
        family.token_layout(model, image_hw)
    except ValueError as error:
        raise InputValueError(f"images of {image_hw[0]}×{image_hw[1]} do not fit the model: {error}") from None


def layout_input(batch: Batch) -> object:
    """What a family's ``token_layout`` reads from a batch: the input size (H, W) of images, the batch itself for
    tokens (padding and explained rows differ per text)."""
    return batch if isinstance(batch, TokenBatch) else tuple(batch.shape[-2:])


def model_logits(model: nn.Module, images: Batch) -> Optional[torch.Tensor]:
    """The logits (B, num_classes) of ``images`` (B, C, H, W) or of a TokenBatch, from the forward pass the model's
    family names
    (:attr:`~vitroll.capture.ModelFamily.logits`), or None for a backbone without a classification head (the
    forward still runs); ``model(images)`` for a classifier of no registered family (deletion/insertion scores any
    classifier)."""
    family = registered_family(model)
    return family.logits(model, images) if family is not None else call_model(model, images)


def class_logits(model: nn.Module, images: Batch) -> torch.Tensor:
    """:func:`model_logits` for everything that needs class scores (gradient methods, attributions, deletion and
    insertion, evaluation, sanity checks).

    Raises
    ------
    UnsupportedModelError
        For a backbone without a classification head, or a forward that returns something else than a tensor (a
        dict, a tuple) without a family's ``logits`` saying where the logits are, in one line.
    """
    logits = model_logits(model, images)
    if logits is None and getattr(registered_family(model), "image_text", None) is not None:
        raise UnsupportedModelError(
            f"{type(model).__name__} is an image–text model: its scores need texts; vitroll.image_text_maps(model, "
            "images, texts) explains them (rollout, attention and flow explain its vision tower alone)")
    if logits is None:
        raise UnsupportedModelError(
            f"{type(model).__name__} has no classification head: there are no class scores to explain or evaluate; "
            "rollout, attention and flow explain its attention")
    if not isinstance(logits, torch.Tensor):
        family = registered_family(model)
        raise UnsupportedModelError(
            f"{type(model).__name__} returned a {type(logits).__name__}, not logits (B, num_classes): say where they "
            f"are with vitroll.register_family({family.name if family else 'NAME'!r}, ..., "
            "logits=lambda model, images: model(images)[...])")
    return logits


def predict(model: nn.Module, images: Inputs, forward: Callable[[nn.Module, Batch], Optional[torch.Tensor]]
            = model_logits) -> tuple[Batch, Optional[torch.Tensor], TokenLayout]:
    """One plain forward in eval mode without gradients, for methods that record no attention.

    Returns the batch on the model's device (images also in its dtype), the logits (B, num_classes) (None for a
    backbone, or :func:`class_logits` as ``forward`` refuses it) and the token layout (the patch grid, or a
    sequence's real tokens).
    """
    images = prepare_inputs(model, images)
    with eval_mode(model), torch.no_grad():
        logits = forward(model, images)
    return images, logits, family_of(model).token_layout(model, layout_input(images))


def record_attention(
    model: nn.Module,
    images: Inputs,
    *,
    head_fusion: Optional[HeadFusion] = "mean",
    dtype: torch.dtype = torch.float32,
    max_attention_memory: Optional[int] = None,
    factored: bool = False,
) -> tuple[list[torch.Tensor], TokenLayout, Optional[torch.Tensor]]:
    """Run the model once in eval mode without gradients and record every layer's attention.

    ``max_attention_memory`` (bytes) is the attention memory budget while recording (default
    :func:`~vitroll.capture.recorder.default_attention_budget`: 1 GiB, more on a GPU with room): per-head
    probabilities are computed in query blocks within it; the recorded, head-fused maps take B·N²·4 bytes per layer.
    ``factored`` (head mean only) records
    the layers as :class:`~vitroll.capture.FactoredAttention` instead, O(N·D) per layer, once all layers' maps
    would exceed the budget (see :class:`AttentionRecorder`).

    Returns
    -------
    attentions : list of Tensor (or FactoredAttention)
        Per layer (B, N, N), or (B, H, N, N) when ``head_fusion`` is None.
    layout : TokenLayout
        Prefix tokens, readout and patch grid for this input size (or the texts' real tokens and readout).
    logits : Tensor, shape (B, num_classes), or None
        None for a backbone without a classification head.
    """
    if max_attention_memory is not None and max_attention_memory < 1:  # 0 read as the default, < 0 as 1-row blocks
        raise OptionValueError(f"{method_option('max_attention_memory')} must be ≥ 1 byte, or None for the default; "
                               f"got {max_attention_memory}")
    images = prepare_inputs(model, images)
    recorder = AttentionRecorder(model, head_fusion=head_fusion, dtype=dtype, factored=factored,
                                 chunk_bytes=max_attention_memory)
    with eval_mode(model), torch.no_grad(), recorder:
        logits = model_logits(model, images)
        return recorder.attentions, recorder.token_layout(layout_input(images)), logits


Layer = TypeVar("Layer")


def layers_from(layers: Sequence[Layer], start_layer: int) -> list[Layer]:
    """``layers[start_layer:]``, refusing a start that would leave no layer (a blank map) or count from the end.

    Raises
    ------
    OptionOutOfRange
        When ``start_layer`` is not in ``0 … len(layers) − 1``.
    """
    if not 0 <= start_layer < len(layers):
        raise OptionOutOfRange("start_layer", start_layer,
                               f" is out of range for a model with {len(layers)} layers (0…{len(layers) - 1})")
    return list(layers[start_layer:])
