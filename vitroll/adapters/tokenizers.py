"""Which tokenizer turns strings into tokens for a model: one registry for text and image–text models alike."""

from __future__ import annotations

from typing import Any, Optional
from weakref import WeakKeyDictionary

from torch import nn

_TOKENIZERS: "WeakKeyDictionary[nn.Module, Any]" = WeakKeyDictionary()


def use_tokenizer(model: nn.Module, tokenizer: Any) -> None:
    """Make ``tokenizer`` (a transformers tokenizer, or an open_clip one) the one that turns strings into tokens for
    ``model`` whenever no ``tokenizer=`` is given; held for as long as the model lives. :func:`vitroll.load_model`
    does this with the tokenizer saved beside the model.

    Parameters
    ----------
    model : nn.Module
        A text or image–text model; held weakly (the tokenizer goes with it).
    tokenizer : Any
        A transformers tokenizer (``PreTrainedTokenizerBase``) or an open_clip tokenizer: strings → input ids (T, L).
    """
    _TOKENIZERS[model] = tokenizer


def registered_tokenizer(model: nn.Module) -> Optional[Any]:
    """The tokenizer :func:`use_tokenizer` gave ``model``, or None."""
    return _TOKENIZERS.get(model)
