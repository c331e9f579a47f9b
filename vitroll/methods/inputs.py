"""Everything a saliency method accepts, turned into the batch the model's family runs: image tensors
(:mod:`~vitroll.methods.image_batch`) or token batches (:mod:`~vitroll.methods.text_batch`), chosen by what the
family's models take (:attr:`~vitroll.capture.ModelFamily.inputs`), the only place that asks."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch
from torch import nn

from vitroll.capture.families import family_of
from vitroll.errors import OptionValueError
from vitroll.io.text import TextReadout, TokenBatch
from vitroll.methods.image_batch import Images, image_batch
from vitroll.methods.text_batch import Position, Texts, text_batch

Inputs = Union[Images, Texts]
"""Images (:data:`~vitroll.methods.image_batch.Images`) for a vision model, texts
(:data:`~vitroll.methods.text_batch.Texts`) for a text model."""

Batch = Union[torch.Tensor, TokenBatch]
"""A batch as the model's family runs it: images (B, C, H, W) or a :class:`~vitroll.io.text.TokenBatch`."""


def model_batch(model: nn.Module, inputs: Inputs, *, attention_mask: Optional[torch.Tensor] = None,
                tokenizer: Optional[Any] = None, readout: Optional[TextReadout] = None,
                position: Optional[Position] = None) -> Batch:
    """``inputs`` as one batch for ``model``: a :class:`TokenBatch` for a text model (the keywords as in
    :func:`~vitroll.methods.text_batch.text_batch`), else images (:func:`~vitroll.methods.image_batch.image_batch`).

    Raises
    ------
    ValueError
        For text keywords given with a vision model.
    UnsupportedModelError
        For a model of no registered family.
    """
    family = family_of(model)  # a model of no family is refused as that, not told what it "takes"
    if family.inputs == "tokens":
        return text_batch(model, inputs, attention_mask=attention_mask, tokenizer=tokenizer, readout=readout,
                          position=position)
    given = [name for name, value in (("attention_mask", attention_mask), ("tokenizer", tokenizer),
                                      ("readout", readout), ("position", position)) if value is not None]
    if given:
        raise OptionValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for text models; "
                               f"{type(model).__name__} takes images")
    return image_batch(model, inputs)
