"""The texts a saliency method accepts for a text model, and their conversion into one :class:`TokenBatch`.

A method takes, for a model of a text family: token ids (B, L) (or (L,) for one text) with ``attention_mask=``
(all ones when left out), a tokenizer's output (a mapping with ``input_ids``, ``attention_mask`` and, for sentence
pairs, ``token_type_ids``, which reach the model as they are), a
:class:`~vitroll.io.text.TokenBatch`, or strings — one or a list — which the ``tokenizer=`` given (else the one
:func:`~vitroll.adapters.transformers_text.use_tokenizer` attached, as :func:`vitroll.load_model` does) splits into
tokens, special tokens added, padded on the right. ``readout=`` and ``position=`` choose the explained row
(:class:`~vitroll.io.text.TokenBatch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Optional, Sequence, Union

import torch
from torch import nn

from vitroll.adapters.tokenizers import registered_tokenizer
from vitroll.errors import InputTypeError, InputValueError, OptionValueError
from vitroll.io.text import TextReadout, TokenBatch, encode_texts, refuse_unknown_ids

Texts = Union[TokenBatch, torch.Tensor, Mapping[str, torch.Tensor], str, list[str], tuple[str, ...]]
"""What every method takes for a text model (see the module docstring)."""

Position = Union[int, Sequence[int], torch.Tensor]
"""The explained position: one for every text, or one per text, counted among the real tokens (−1: the last)."""


def max_positions(model: nn.Module) -> Optional[int]:
    """The longest sequence the model's position embeddings cover, when its config says. RoBERTa and XLM-RoBERTa
    number their positions from ``pad_token_id + 1``, so their 514 position embeddings cover 512 tokens."""
    config = getattr(model, "config", None)
    longest = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if longest and getattr(config, "model_type", None) in ("roberta", "xlm-roberta"):
        longest -= (getattr(config, "pad_token_id", None) or 0) + 1
    return longest


def text_batch(model: nn.Module, texts: Texts, *, attention_mask: Optional[torch.Tensor] = None,
               tokenizer: Optional[Any] = None, readout: Optional[TextReadout] = None,
               position: Optional[Position] = None) -> TokenBatch:
    """``texts`` as one :class:`TokenBatch` for ``model``, on the CPU unless given as tensors elsewhere.

    Raises
    ------
    ValueError
        For strings without a tokenizer, an empty batch, a mask of another shape than the ids, float ids, a mask
        given twice, a text longer than the model's position embeddings, or an id outside its vocabulary (a tokenizer
        of another model).
    TypeError
        For a value of any other type.
    """
    if isinstance(texts, TokenBatch):
        if attention_mask is not None:
            raise OptionValueError("a TokenBatch carries its attention_mask; do not pass attention_mask= as well")
        batch = texts
    elif isinstance(texts, (str, list, tuple)):
        if attention_mask is not None:
            raise OptionValueError("strings are padded by their tokenizer; attention_mask= is for token ids")
        tokenizer = tokenizer if tokenizer is not None else registered_tokenizer(model)
        if tokenizer is None:
            raise OptionValueError("strings need a tokenizer: pass tokenizer=AutoTokenizer.from_pretrained(...) (or "
                                   "load the model with vitroll.load_model, which attaches the tokenizer saved with "
                                   "it)")
        input_ids, mask, _ = encode_texts(tokenizer, [texts] if isinstance(texts, str) else texts)
        batch = TokenBatch(input_ids, mask)
    elif isinstance(texts, torch.Tensor) or isinstance(texts, Mapping):
        segments = None
        if isinstance(texts, Mapping):
            if "input_ids" not in texts:
                raise InputTypeError("a mapping of texts needs input_ids (a tokenizer's output with "
                                     "return_tensors='pt')")
            if attention_mask is None:
                attention_mask = texts.get("attention_mask")
            segments = texts.get("token_type_ids")
            texts = torch.as_tensor(texts["input_ids"])
        ids = texts[None] if texts.ndim == 1 else texts
        if attention_mask is None:
            attention_mask = torch.ones_like(ids)
        else:
            attention_mask = torch.as_tensor(attention_mask, device=ids.device)
            attention_mask = attention_mask[None] if attention_mask.ndim == 1 and texts.ndim == 1 else attention_mask
        if segments is not None:
            segments = torch.as_tensor(segments, device=ids.device)
            segments = segments[None] if segments.ndim == 1 and texts.ndim == 1 else segments
        batch = TokenBatch(ids, attention_mask, token_type_ids=segments)
    else:
        raise InputTypeError(f"texts has type {type(texts).__name__}; a text model takes token ids (B, L) with "
                             "attention_mask=, a tokenizer's output, a TokenBatch, or strings with tokenizer=")
    if len(batch) == 0:
        raise InputValueError(f"input_ids is an empty batch of shape {tuple(batch.shape)}: there is nothing to explain")
    if position is not None:
        position = torch.as_tensor(position, dtype=torch.long).reshape(-1)
        batch = replace(batch, position=position.expand(len(batch)) if position.numel() == 1 else position)
    if readout is not None:
        batch = replace(batch, readout=readout)
    longest = max_positions(model)
    if longest is not None and batch.shape[1] > longest:
        counts = batch.real.sum(dim=-1)
        text = int(counts.argmax())
        which = "the text has" if len(batch) == 1 else f"text {text} has"
        padded = f" (padded to {batch.shape[1]})" if int(counts[text]) != batch.shape[1] else ""
        raise InputValueError(f"{which} {int(counts[text])} tokens{padded}; the model takes at most {longest} (its "
                              "position embeddings): shorten it")
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    refuse_unknown_ids(batch.input_ids, getattr(embedding, "num_embeddings", None), "input_ids",
                       "; is the tokenizer this model's?")
    return batch
