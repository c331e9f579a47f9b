"""Hugging Face transformers' text models: BERT-style encoders and decoder-only language models, through the same seam.

Their attention modules go through transformers' attention interface like the vision models'
(:func:`~vitroll.adapters.transformers.attach_attention_interface`), so the capture kernel receives the model's own
attention mask: padded keys get zero attention, a sliding window hides the keys outside it, and a causal mask (built
by the kernel when transformers leaves it to the ``is_causal`` flag of an unpadded batch) hides later tokens.
Grouped key/value heads are repeated to the query heads they serve, so records have one map per query head.

The layout is a sequence (``grid=None``): scores (B, L) over every position, padding 0. Its decision row:

* encoders (BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, ModernBERT, DeBERTa-v2, ALBERT;
  ``…ForSequenceClassification`` and the bare ``…Model``): the class token's row by default (what the classifier
  head reads), or with ``readout="token_mean"`` the mean of the real tokens' rows (mean-pooled sentence embeddings,
  as sentence-transformers pools them, and as a ModernBERT classifier with ``classifier_pooling="mean"`` pools,
  whose default it is). ModernBERT's local layers attend within a sliding window, which its mask carries;
  DeBERTa-v2 computes its attention itself and is read at the dropout that receives its probabilities (see
  :data:`_PROBABILITIES_MODULE`); ALBERT's attention modules, shared by the layers of a group, are recorded once per
  call (see :func:`_albert_layers`);
* language models (GPT-2, Llama, Qwen2/3, Mistral, Gemma, Gemma 2 without attention soft-capping, Gemma 3's text
  model, Phi, GPT-NeoX, OPT; ``…ForCausalLM``, ``GPT2LMHeadModel`` and the bare ``…Model``): the row of the
  explained position, the last real token by default. The score that gradient methods explain is the
  log-probability of the next token there, log_softmax of the LM head's logits
  (B, vocabulary): the predicted token, or the token id given as ``target_class``;
* their ``…ForSequenceClassification``: the row of the token the head reads, the last real token that is not the
  padding id (as transformers pools), or the position given; the score is the class logit;
* masked language models (``…ForMaskedLM`` of the encoders above, as BERT's, RoBERTa's, DistilBERT's base checkpoints
  are saved): the same at the explained position, by default the text's first mask token (``[MASK]``, ``<mask>``):
  the log-probability of the token predicted there.
"""

from __future__ import annotations

from typing import Any, Callable, Optional
from weakref import WeakKeyDictionary

import torch
from torch import nn

from vitroll.adapters.base import register_family
from vitroll.adapters.tokenizers import registered_tokenizer
from vitroll.adapters.transformers import (
    attach_attention_interface, attention_modules_of, config_class_names, heads_then_layers_down,
)
from vitroll.capture.families import TokenLayout, add_refusal, registered_family
from vitroll.capture.readouts import AttentionReadout
from vitroll.errors import InputValueError, OptionValueError
from vitroll.io.text import NoMaskToken, TokenBatch, decoded_pieces

_MODELS = "transformers.models"

def _encoder_layout(model: nn.Module, batch: TokenBatch) -> TokenLayout:
    # ModernBERT's classifier may pool the mean of the tokens; a bidirectional decoder (EmbeddingGemma) embeds by it
    pooled = ("token_mean" if getattr(model.config, "classifier_pooling", None) == "mean"
              or _is_bidirectional_embedder(model) else "class_token")
    readout = batch.readout or (pooled if batch.position is None else "position")  # a position alone is read
    if readout == "class_token" and not bool(batch.real[:, 0].all()):
        raise InputValueError("the class token (position 0) is padding in some texts: pad encoder inputs on the right")
    positions = batch.explained_positions() if readout == "position" else None
    return TokenLayout(0, readout, None, token_mask=batch.real, positions=positions)


def _position_layout(batch: TokenBatch, positions: Callable[[], torch.Tensor], explained: str,
                     other_readout: str) -> TokenLayout:
    """The layout that reads one row per text, at ``positions()`` (B,); another ``readout`` option is refused, in
    words saying how the model is ``explained`` and what an ``other_readout`` would do."""
    if batch.readout not in (None, "position"):  # the option's mistake, the same for every text: one error
        raise OptionValueError(f"{explained} (readout='position'); a {batch.readout!r} readout {other_readout}")
    return TokenLayout(0, "position", None, token_mask=batch.real, positions=positions())


def _is_bidirectional_embedder(model: nn.Module) -> bool:
    """Whether ``model`` is a bare decoder made to attend both ways (Gemma 3's ``use_bidirectional_attention``, as
    EmbeddingGemma is saved): every token sees every other, and it embeds a text by the mean of its tokens."""
    return bool(getattr(model.config, "use_bidirectional_attention", False)) and not hasattr(model, "lm_head")


def _decoder_layout(model: nn.Module, batch: TokenBatch) -> TokenLayout:
    if _is_bidirectional_embedder(model):
        return _encoder_layout(model, batch)
    return _position_layout(batch, batch.explained_positions, "a causal language model is explained at one position",
                            "mixes rows that see different prefixes")


def _decoder_classifier_layout(model: nn.Module, batch: TokenBatch) -> TokenLayout:
    return _position_layout(batch, lambda: _classifier_positions(model, batch),
                            "a causal sequence classifier reads one token's row",
                            "mixes rows that see different prefixes")


def _classifier_positions(model: nn.Module, batch: TokenBatch) -> torch.Tensor:
    """(B,) the token each text is classified at: the position given, else the one the head reads, as transformers'
    ``…ForSequenceClassification`` picks it: the last real token whose id is not the padding token's (a text that
    ends in its padding id, such as an end-of-text token that pads too, is read before it)."""
    if batch.position is not None:
        return batch.explained_positions()
    read = batch.real
    if model.config.pad_token_id is not None:
        not_padding_id = batch.real & (batch.input_ids != model.config.pad_token_id)
        read = torch.where(not_padding_id.any(dim=-1, keepdim=True), not_padding_id, batch.real)  # else its last
    indices = torch.arange(read.shape[-1], device=read.device)
    return torch.where(read, indices, -1).argmax(dim=-1)


def _decoder_classifier_logits(model: nn.Module, batch: TokenBatch) -> torch.Tensor:
    """The class logits (B, num_classes): the head on the hidden state of each text's classified token. Computed here
    rather than by the model, which refuses batches when its config has no padding token, and numbers left padding
    into its positions."""
    position_ids = (batch.attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)
    hidden = model.base_model(**batch.model_inputs(), position_ids=position_ids, use_cache=False).last_hidden_state
    positions = _classifier_positions(model, batch).to(hidden.device)
    return model.score(hidden[torch.arange(len(hidden), device=hidden.device), positions])


def _masked_layout(model: nn.Module, batch: TokenBatch) -> TokenLayout:
    return _position_layout(batch, lambda: _masked_positions(model, batch),
                            "a masked language model is explained at the token it predicts",
                            "reads rows its prediction does not")


def _masked_positions(model: nn.Module, batch: TokenBatch) -> torch.Tensor:
    """(B,) the index of each text's explained token: the position given, else its first mask token.

    Raises
    ------
    NoMaskToken
        For texts without a mask token.
    OptionValueError
        When no position is given and the model has no tokenizer that names its mask token.
    """
    if batch.position is not None:
        return batch.explained_positions()
    tokenizer = registered_tokenizer(model)
    if getattr(tokenizer, "mask_token_id", None) is None:
        raise OptionValueError("a masked language model is explained at its mask token, and no tokenizer attached to "
                               "the model names one: attach it (vitroll.use_tokenizer) or give position=")
    masked = (batch.input_ids == tokenizer.mask_token_id) & batch.real
    unmasked = (~masked.any(dim=-1)).nonzero().flatten().tolist()
    if unmasked:
        raise NoMaskToken(tokenizer.mask_token, unmasked)
    return masked.long().argmax(dim=-1)


def _encoder_logits(model: nn.Module, batch: TokenBatch) -> Optional[torch.Tensor]:
    """The class logits (B, num_classes), or None for a bare encoder."""
    return getattr(model(**batch.model_inputs()), "logits", None)


def _language_model_logits(model: nn.Module, batch: TokenBatch) -> Optional[torch.Tensor]:
    """The next-token log-probabilities (B, vocabulary) at each text's explained position, or None for a bare decoder.

    Position ids count real tokens only, so left padding changes nothing (GPT-2 would number the padding too)."""
    position_ids = (batch.attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)
    output = model(**batch.model_inputs(), position_ids=position_ids, use_cache=False)
    logits = getattr(output, "logits", None)
    return None if logits is None else _log_probabilities_at(logits, batch.explained_positions())


def _masked_language_model_logits(model: nn.Module, batch: TokenBatch) -> torch.Tensor:
    """The log-probabilities (B, vocabulary) of the token at each text's explained position (its first mask)."""
    return _log_probabilities_at(model(**batch.model_inputs()).logits, _masked_positions(model, batch))


def _log_probabilities_at(logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """log_softmax of a language model's logits (B, L, vocabulary) at one position (B,) per text: (B, vocabulary)."""
    rows = logits[torch.arange(len(logits), device=logits.device), positions.to(logits.device)]
    return rows.float().log_softmax(dim=-1)


def _vocabulary(model: nn.Module) -> Optional[list[str]]:
    """The tokens of the attached tokenizer as text (:func:`~vitroll.io.text.decoded_pieces`: ``"é"``, not its
    byte-level form ``"Ã©"``), in id order (the "classes" of a language model), or None."""
    tokenizer = registered_tokenizer(model)
    if tokenizer is None:
        return None
    ids = list(range(model.config.vocab_size))
    cached = _DECODED.get(model)
    if cached is not None and cached[0] is tokenizer and len(cached[1]) == len(ids):
        return list(cached[1])
    names = decoded_pieces(tokenizer, ids)
    _DECODED[model] = (tokenizer, names)
    return list(names)


_DECODED: "WeakKeyDictionary[nn.Module, tuple[Any, list[str]]]" = WeakKeyDictionary()
"""Each language model's decoded vocabulary with the tokenizer it was decoded with: decoding GPT-2's 50,257 tokens
takes about a second, and a run over many texts asks for them once per batch."""


def _register(name: str, module: str, attention: str, classes: tuple[str, ...], *,
              token_layout: Callable[[nn.Module, TokenBatch], TokenLayout],
              logits: Callable[[nn.Module, TokenBatch], Optional[torch.Tensor]],
              class_names: Callable[[nn.Module], Optional[list[str]]], notes: str,
              probs_module: Optional[str] = None,
              attention_modules: Optional[Callable[[nn.Module], list[nn.Module]]] = None) -> None:
    """Register ``classes`` of ``module``, their ``attention`` modules read through the attention interface, or
    with ``probs_module`` at the output of that submodule (a model that computes its attention itself).
    ``attention_modules`` lists them per layer where the modules' order is not the layers' (ALBERT's)."""
    dotted = f"{_MODELS}.{module}.{attention}"
    readout = (AttentionReadout(dotted, probs_module=probs_module, fused_flag=None) if probs_module else
               AttentionReadout(dotted, probs_module=None, fused_flag=None, attach=attach_attention_interface))
    register_family(
        name, tuple(f"{_MODELS}.{module}.{each}" for each in classes), inputs="tokens",
        attention_modules=attention_modules or attention_modules_of(dotted), token_layout=token_layout, logits=logits,
        randomizable=heads_then_layers_down(dotted), class_names=class_names, readout=readout,
        name_patterns=classes, notes=notes,
    )


_ENCODERS = {
    "bert": ("bert.modeling_bert", "BertSelfAttention", ("BertModel", "BertForSequenceClassification")),
    "roberta": ("roberta.modeling_roberta", "RobertaSelfAttention",
                ("RobertaModel", "RobertaForSequenceClassification")),
    "xlm-roberta": ("xlm_roberta.modeling_xlm_roberta", "XLMRobertaSelfAttention",
                    ("XLMRobertaModel", "XLMRobertaForSequenceClassification")),
    "modernbert": ("modernbert.modeling_modernbert", "ModernBertAttention",
                   ("ModernBertModel", "ModernBertForSequenceClassification")),
    "deberta-v2": ("deberta_v2.modeling_deberta_v2", "DisentangledSelfAttention",
                   ("DebertaV2Model", "DebertaV2ForSequenceClassification")),
    "distilbert": ("distilbert.modeling_distilbert", "DistilBertSelfAttention",
                   ("DistilBertModel", "DistilBertForSequenceClassification")),
    "electra": ("electra.modeling_electra", "ElectraSelfAttention",
                ("ElectraModel", "ElectraForSequenceClassification")),
    "albert": ("albert.modeling_albert", "AlbertAttention", ("AlbertModel", "AlbertForSequenceClassification")),
}
_MASKED_LANGUAGE_MODELS = {"bert": "BertForMaskedLM", "roberta": "RobertaForMaskedLM",
                           "xlm-roberta": "XLMRobertaForMaskedLM", "modernbert": "ModernBertForMaskedLM",
                           "deberta-v2": "DebertaV2ForMaskedLM",
                           "distilbert": "DistilBertForMaskedLM", "electra": "ElectraForMaskedLM",
                           "albert": "AlbertForMaskedLM"}
"""Each encoder's masked language model class, registered as its own family (``hf-KIND-mlm``)."""
_PROBABILITIES_MODULE = {"deberta-v2": "dropout"}
"""The submodule whose output is the attention probabilities (B, H, N, N), for the encoders that compute their
attention themselves rather than through the attention interface. DeBERTa-v2's disentangled attention adds
content-to-position and position-to-content terms to its scores, but the softmax of those scores still mixes the
tokens' content values alone, so its rows are the token-to-token weights rollout follows, as BERT's are."""


def _albert_layers(model: nn.Module) -> list[nn.Module]:
    """ALBERT's attention module of each layer, in call order: layer i runs the inner layers of group
    ⌊i · groups / layers⌋ (transformers' ``AlbertTransformer``), so a group's modules, their weights shared, recur
    once per layer they run in; the recorder records each call as its layer."""
    encoder = next(each for each in model.modules() if type(each).__name__ == "AlbertTransformer")
    layers, groups = encoder.config.num_hidden_layers, encoder.albert_layer_groups
    return [inner.attention for i in range(layers)
            for inner in groups[int(i / (layers / len(groups)))].albert_layers]


_ATTENTION_MODULES = {"albert": _albert_layers}
"""The attention modules per layer, for the encoders whose module order is not their layers'."""
EAGER_MODEL_TYPES = frozenset({*_PROBABILITIES_MODULE, "gemma2"})
"""The ``config.model_type`` values built with eager attention: they have no SDPA path."""
for _kind, (_module, _attention, _classes) in _ENCODERS.items():
    _register(f"hf-{_kind}", _module, _attention, _classes, token_layout=_encoder_layout, logits=_encoder_logits,
              class_names=config_class_names, probs_module=_PROBABILITIES_MODULE.get(_kind),
              attention_modules=_ATTENTION_MODULES.get(_kind),
              notes="text encoder: class token's row (readout='token_mean': mean of the real tokens' rows)")
    _register(f"hf-{_kind}-mlm", _module, _attention, (_MASKED_LANGUAGE_MODELS[_kind],),
              token_layout=_masked_layout, logits=_masked_language_model_logits, class_names=_vocabulary,
              probs_module=_PROBABILITIES_MODULE.get(_kind), attention_modules=_ATTENTION_MODULES.get(_kind),
              notes="masked language model: the masked token's row (its first mask); score: that token's log-prob")
_MASKED_FAMILIES = frozenset(f"hf-{kind}-mlm" for kind in _MASKED_LANGUAGE_MODELS)
_DECODERS = {
    "gpt2": ("gpt2.modeling_gpt2", "GPT2Attention", ("GPT2Model", "GPT2LMHeadModel"), "GPT2ForSequenceClassification"),
    **{kind: (module, attention, (f"{prefix}Model", f"{prefix}ForCausalLM"), f"{prefix}ForSequenceClassification")
       for kind, (module, attention, prefix) in {
           "llama": ("llama.modeling_llama", "LlamaAttention", "Llama"),
           "qwen2": ("qwen2.modeling_qwen2", "Qwen2Attention", "Qwen2"),
           "qwen3": ("qwen3.modeling_qwen3", "Qwen3Attention", "Qwen3"),
           "mistral": ("mistral.modeling_mistral", "MistralAttention", "Mistral"),
           "gemma": ("gemma.modeling_gemma", "GemmaAttention", "Gemma"),
           "phi": ("phi.modeling_phi", "PhiAttention", "Phi"),
           "gpt_neox": ("gpt_neox.modeling_gpt_neox", "GPTNeoXAttention", "GPTNeoX"),
           "opt": ("opt.modeling_opt", "OPTAttention", "OPT"),
           "gemma2": ("gemma2.modeling_gemma2", "Gemma2Attention", "Gemma2"),
       }.items()},
    "gemma3_text": ("gemma3.modeling_gemma3", "Gemma3Attention", ("Gemma3TextModel", "Gemma3ForCausalLM"),
                    "Gemma3TextForSequenceClassification"),
}
"""Decoder-only language models that go through the attention interface (grouped-query attention and sliding windows
included: the window is in the mask the model builds; Gemma 2 and 3's query_pre_attn_scalar is the scaling the kernel
receives), by ``config.model_type``: module, attention class, the bare model and language model classes, the sequence
classifier class. Gemma 3 is its text model (``gemma3_text``). Gemma 2 soft-caps its attention logits by default
(``attn_logit_softcapping``), which the capture refuses; a Gemma 2 without it, and Gemma 3 (which has none), are
read."""
_FAMILY_NAMES = {"gpt_neox": "gpt-neox", "gemma3_text": "gemma3"}
"""A decoder's family name where it is not its model type's: ``hf-NAME``."""
for _kind, (_module, _attention, _classes, _classifier) in _DECODERS.items():
    _name = _FAMILY_NAMES.get(_kind, _kind)
    _register(f"hf-{_name}", _module, _attention, _classes,
              token_layout=_decoder_layout, logits=_language_model_logits, class_names=_vocabulary,
              notes="causal language model: the explained position's row (last real token); score: next token's "
                    "log-prob")
    _register(f"hf-{_name}-classifier", _module, _attention, (_classifier,),
              token_layout=_decoder_classifier_layout, logits=_decoder_classifier_logits,
              class_names=config_class_names,
              notes="causal sequence classifier: the row of the token its head reads (the last real one that is not "
                    "the padding token)")

MODEL_CLASSES = {**{kind: (*classes, _MASKED_LANGUAGE_MODELS[kind]) for kind, (_, _, classes) in _ENCODERS.items()},
                 **{kind: (*classes, classifier) for kind, (_, _, classes, classifier) in _DECODERS.items()}}
"""The transformers classes registered above, by ``config.model_type``, the bare model first: what loading checks a
folder against."""
MODEL_TYPES = frozenset(MODEL_CLASSES)
"""The ``config.model_type`` values of the text models registered above."""

_ENCODER_DECODER = ("an encoder–decoder model (its decoder cross-attends to its encoder's tokens), and vitroll "
                    "reads the attention of encoders and decoders of one stack")
_REFUSED = (
    ("gemma3", (f"{_MODELS}.gemma3.modeling_gemma3.Gemma3ForConditionalGeneration",
                f"{_MODELS}.gemma3.modeling_gemma3.Gemma3Model"),
     "Gemma 3's image–text model is not read; its text model is: Gemma3ForCausalLM (model type gemma3_text, as "
     "Gemma 3 1B is saved), or from Python the image–text model's model.model.language_model"),
    *((kind, tuple(f"{_MODELS}.{kind}.modeling_{kind}.{prefix}{head}"
                   for head in ("Model", "ForConditionalGeneration", "ForSequenceClassification",
                                "ForQuestionAnswering")),
       f"{name} is {_ENCODER_DECODER}")
      for kind, prefix, name in (("t5", "T5", "T5"), ("mt5", "MT5", "mT5"), ("bart", "Bart", "BART"),
                                 ("mbart", "MBart", "mBART"))),
)
REFUSED_MODEL_TYPES = {model_type: why for model_type, _model_classes, why in _REFUSED}
"""Why loading refuses a text ``config.model_type``, for the types refused by name."""
for _model_type, _model_classes, _why in _REFUSED:
    for _model_class in _model_classes:
        add_refusal(_model_class, _why)


def soft_capping_refusal(config: object) -> Optional[str]:
    """Why a text model of a supported type is refused for what its config turns on, or None: attention logits
    soft-capped (Gemma 2's default), which the capture refuses once the model runs."""
    cap = getattr(config, "attn_logit_softcapping", None)
    if cap is None:
        return None
    return (f"its attention logits are soft-capped (attn_logit_softcapping={cap}: tanh before the softmax), which "
            "vitroll's attention kernel does not compute; a Gemma 2 without soft-capping, and Gemma 3, are explained")


def prediction_kind(model: nn.Module) -> str:
    """What a text model predicts: ``"next token"`` (a causal language model), ``"masked token"`` (a masked language
    model) or ``"prediction"`` (a class; none for a bare encoder)."""
    if bool(getattr(model, "can_generate", lambda: False)()):
        return "next token"
    family = registered_family(model)
    return "masked token" if family is not None and family.name in _MASKED_FAMILIES else "prediction"
