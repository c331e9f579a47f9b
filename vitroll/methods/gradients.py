"""What the class-specific methods share: attention and its gradient with respect to one class score."""

from __future__ import annotations

import contextlib
from typing import Iterator, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from vitroll.capture import AttentionRecorder, TokenLayout
from vitroll.errors import GradientContextError, OptionOutOfRange, OptionValueError
from vitroll.io.text import TokenBatch
from vitroll.methods.base import class_logits, eval_mode, layout_input, prepare_inputs
from vitroll.methods.inputs import Batch, Inputs
from vitroll.wording import method_option

TargetClass = Union[None, int, Sequence[int], np.ndarray, torch.Tensor]
"""``None`` (each image's predicted class), one class for the whole batch, or one per image (B,) (a list, a NumPy
array of a data set's labels, a tensor)."""


class AttentionGradients(NamedTuple):
    attentions: list[torch.Tensor]
    """Per layer, forward order, (B, H, N, N) float32, detached."""
    gradients: list[torch.Tensor]
    """Per layer, ∂ score / ∂ attention, (B, H, N, N) float32."""
    layout: TokenLayout
    logits: torch.Tensor
    """(B, num_classes), detached."""
    targets: torch.Tensor
    """(B,) the class each image was explained for."""


class TargetOutOfRange(OptionOutOfRange):
    """``target_class`` (one class for a batch of ``batch``, or one per input) names a class a model of
    ``num_classes`` does not have; the message names it once, with the first input it was given for."""

    def __init__(self, target_class: TargetClass, batch: int, num_classes: int) -> None:
        given = torch.as_tensor(target_class).reshape(-1)
        targets = given.long().expand(batch)
        outside = ((targets < 0) | (targets >= num_classes)).nonzero().flatten().tolist()
        first = outside[0]
        where = "" if given.numel() == 1 else f" of input {first}"
        more = len(outside) - 1
        others = ("" if not where or not more else "; so is that of 1 other input" if more == 1
                  else f"; so are those of {more} other inputs")
        super().__init__("target_class", targets[first].item(), f"{where} is out of range for a model with "
                                                                f"{num_classes} classes (0…{num_classes - 1}){others}")
        self.num_classes = num_classes


def resolve_targets(logits: torch.Tensor, target_class: TargetClass) -> torch.Tensor:
    """Target class per image (B,) on the logits' device; checked against the number of classes.

    Raises
    ------
    OptionValueError
        For a number of classes that is neither one nor B, a value that is no whole number (a bool mask, strings),
        or a class out of range (:class:`TargetOutOfRange`: named once, with the first input it was given for).
    """
    batch, num_classes = logits.shape
    if target_class is None:
        return logits.argmax(dim=-1)
    dtype = getattr(target_class, "dtype", None)
    if (isinstance(target_class, np.ndarray) and dtype.kind not in "iuf"
            or isinstance(target_class, torch.Tensor) and (dtype == torch.bool or dtype.is_complex)):
        raise OptionValueError(f"{method_option('target_class')} must hold class indices (integers); got "
                               f"{type(target_class).__name__} of dtype {dtype}")
    given = torch.as_tensor(target_class, device=logits.device).reshape(-1)
    if given.is_floating_point() and not (given == given.round()).all():
        fraction = given[given != given.round()][0].item()
        raise OptionValueError(f"{method_option('target_class')} holds {fraction:g}, which is no class index")
    if given.numel() not in (1, batch):
        raise OptionValueError(f"{method_option('target_class')} has {given.numel()} entries for a batch of {batch}: "
                               "give one class for all, or one per input")
    targets = given.long().expand(batch)
    if bool(((targets < 0) | (targets >= num_classes)).any()):
        raise TargetOutOfRange(given.cpu(), batch, num_classes)
    return targets


@contextlib.contextmanager
def differentiable(model: nn.Module, batch: Batch) -> Iterator[Batch]:
    """The batch, made the start of an autograd graph even when the model's parameters need no gradient: images
    as a leaf that requires grad; for tokens (integer ids have no gradient), the input embeddings' output, made such
    a leaf by a forward hook while the context lasts."""
    if not isinstance(batch, TokenBatch):
        # a tensor made under torch.inference_mode() takes no requires_grad outside it; a copy does
        yield (batch.clone() if batch.is_inference() else batch.detach()).requires_grad_(True)
        return

    def start_graph(_module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        return output if output.requires_grad else output.detach().requires_grad_(True)

    handle = model.get_input_embeddings().register_forward_hook(start_graph)
    try:
        yield batch
    finally:
        handle.remove()


def refuse_inference_mode() -> None:
    """Raise :class:`~vitroll.errors.GradientContextError` (a RuntimeError) inside ``torch.inference_mode()``, where
    no backward pass can run (``torch.no_grad()`` is fine: gradient methods turn gradients on for themselves)."""
    if torch.is_inference_mode_enabled():
        raise GradientContextError("gradient methods cannot run inside torch.inference_mode(); use torch.no_grad() or "
                                   "nothing")


def attention_gradients(model: nn.Module, images: Inputs, target_class: TargetClass = None) -> AttentionGradients:
    """One forward and one backward pass: every layer's per-head attention and its gradient with respect to
    the logit of ``target_class``, summed over the batch (images do not interact, so each image gets its own).
    Both are in the token space of the recorded attention (:attr:`AttentionRecorder.attentions`); where a layer
    has no entries of its own (CaiT's padding) the gradient is zero, so ∇A ⊙ A is zero there too.

    Parameter ``.grad`` fields and ``requires_grad`` flags are left untouched.
    """
    refuse_inference_mode()
    batch = prepare_inputs(model, images)
    with eval_mode(model), torch.enable_grad(), differentiable(model, batch) as images, \
            AttentionRecorder(model, keep_graph=True) as recorder:
        logits = class_logits(model, images)
        attentions = recorder.attentions
        layout = recorder.token_layout(layout_input(images))
        targets = resolve_targets(logits.detach(), target_class)
        gradients = recorder.gradients(logits.gather(1, targets[:, None]).sum())
    return AttentionGradients(
        attentions=[a.detach().float() for a in attentions], gradients=[g.float() for g in gradients],
        layout=layout, logits=logits.detach(), targets=targets,
    )


def positive_weighted_heads(attention: torch.Tensor, gradient: torch.Tensor, clamp: str) -> torch.Tensor:
    """Fuse heads of gradient-weighted attention (B, H, N, N) → (B, N, N).

    ``clamp="before_mean"``: mean over heads of (∇A ⊙ A)⁺ (Chefer et al.); ``"after_mean"``: (mean over heads
    of ∇A ⊙ A)⁺ (jacobgil/vit-explain's grad rollout).
    """
    weighted = attention * gradient
    if clamp == "before_mean":
        return weighted.clamp(min=0).mean(dim=1)
    return weighted.mean(dim=1).clamp(min=0)


def class_row(layout: TokenLayout, batch: int, device: Optional[torch.device]) -> torch.Tensor:
    """The decision row vector (B, N) to start a class-row chain from."""
    return layout.readout_vector(device=device).expand(batch, -1).clone()
