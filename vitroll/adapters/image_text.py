"""Image–text models (CLIP-like dual encoders) in the adapter seam.

A dual encoder's attention lives in its vision tower, a model of a registered family (transformers'
``CLIPVisionModel``, open_clip's ``VisionTransformer``); :func:`register_dual_encoder` registers the dual encoder as
a family that records that tower and adds how the model scores images against texts (:class:`ImageTextScore`).

The score being explained is the image–text logit ``S[i, t]``. :class:`PromptedModel` binds tokenised texts to the
model, so that its forward maps images (B, C, H, W) to logits (B, T): the texts become its classes, and every
class-specific method (chefer, grad_rollout, …) explains ``S[i, t]`` as the logit of class ``t``, through the same
code that explains a classifier.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Callable, Optional, Sequence, Union

import torch
from torch import nn

from vitroll.adapters.base import register_family
from vitroll.capture.families import (FAMILIES, ImageTextScore, ModelFamily, Refusal, TextInputs, TokenLayout,
                                      family_of, module_path)
from vitroll.errors import InputTypeError, InputValueError, OptionValueError, UnsupportedModelError
from vitroll.io.text import refuse_unknown_ids
from vitroll.preprocess import Preprocessing

Texts = Union[str, Sequence[str], torch.Tensor]
"""What :func:`text_inputs` takes: one string, a list or tuple of strings, or input ids (T, L) (or (L,) for one)."""


def quoted_start(text: str) -> str:
    """``text`` quoted, cut to its first 37 characters and ``…`` where longer than 40: a text a line names."""
    return repr(text if len(text) <= 40 else text[:37] + "…")


def warn_cut_texts(texts: Sequence[str], cut: Sequence[bool], context: int) -> None:
    """One ``vitroll: warning:`` line on stderr naming the texts (``cut`` True) that the text tower's context of
    ``context`` tokens cuts short: their maps explain only the beginning of them."""
    names = [quoted_start(text) for text, was_cut in zip(texts, cut) if was_cut]
    if names:
        print(f"vitroll: warning: {', '.join(names)} {'is' if len(names) == 1 else 'are'} longer than the text "
              f"tower's {context} tokens and cut to them; shorten {'it' if len(names) == 1 else 'them'} to explain "
              "every word", file=sys.stderr)


def image_text_score(model: nn.Module) -> ImageTextScore:
    """How ``model`` scores images against texts.

    Raises
    ------
    UnsupportedModelError
        For a model of a family without one (a classifier, a vision tower), naming the image–text families.
    """
    family = family_of(model)
    if family.image_text is None:
        known = ", ".join(f"{f.name} ({', '.join(f.name_patterns)})" for f in FAMILIES
                          if f.image_text is not None and f.name_patterns)
        raise UnsupportedModelError(f"{type(model).__name__} ({family.name}) is not an image–text model: it has no "
                                    f"texts to score images against; image–text models: {known}")
    return family.image_text


def inner_model_capture(inner: Callable[[nn.Module], nn.Module], passed_inner: bool = False) -> dict[str, object]:
    """:func:`register_family`'s capture arguments for a model whose attention is that of ``inner(model)``, a model
    of a registered family: its modules, token layout, readout modules and preprocessing. A refusal of the inner
    model names modules by their path in ``model`` (``model.visual.trunk[1]``), or in the inner model itself where
    that is the one the user passed (``passed_inner``: vitroll wrapped it)."""

    def through_inner(model: nn.Module, read: Callable[[nn.Module, ModelFamily], object]) -> object:
        tower = inner(model)
        try:
            return read(tower, family_of(tower))
        except Refusal as refusal:
            raise refusal.within("model" if passed_inner else module_path(model, tower)) from None

    def attention_modules(model: nn.Module) -> list[nn.Module]:
        return through_inner(model, lambda tower, family: family.attention_modules(tower))

    def token_layout(model: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
        return through_inner(model, lambda tower, family: family.token_layout(tower, image_hw))

    def readout_modules(model: nn.Module) -> list[nn.Module]:
        return through_inner(model, lambda tower, family: family.readout_modules(tower) if family.readout_modules
                             else [])

    def preprocessing(model: nn.Module) -> Preprocessing:
        return through_inner(model, lambda tower, family: Preprocessing.from_model(tower))

    return dict(attention_modules=attention_modules, token_layout=token_layout, readout_modules=readout_modules,
                preprocessing=preprocessing)


def register_dual_encoder(name: str, model_type: Union[type, str, tuple[Union[type, str], ...]], *,
                          vision_tower: Callable[[nn.Module], nn.Module], image_text: ImageTextScore,
                          name_patterns: tuple[str, ...], notes: str,
                          preprocessing: Optional[Callable[[nn.Module], Preprocessing]] = None) -> None:
    """Register an image–text model whose vision tower ``vision_tower(model)`` is a model of a registered family.

    Its attention is the tower's; run alone (rollout, attention, flow), it runs the tower's forward and has no class
    scores; against texts it scores as ``image_text`` says (:func:`vitroll.image_text_maps`). Its preprocessing is
    the tower's unless ``preprocessing`` (``model -> Preprocessing``) says otherwise (an image processor saved with
    the whole model).

    Parameters
    ----------
    name : str
        Short name shown to users; registering the same name again replaces the family.
    model_type : type or str, or a tuple of them
        The model class (subclasses match too), or its dotted path ``"package.module.Class"``; a tuple for several.
    vision_tower : callable
        ``model -> nn.Module``: its vision tower, itself a model of a registered family, taking images (B, C, H, W).
    image_text : ImageTextScore
        How the model scores images (B, C, H, W) against T texts: logits (B, T), and how it tokenizes.
    name_patterns : tuple of str
        Model names of the family, for messages and ``vitroll models``.
    notes : str
        One line for ``vitroll models``.
    preprocessing : callable, optional
        ``model -> Preprocessing``, when it is not the vision tower's.
    """

    def tower_forward(model: nn.Module, images: torch.Tensor) -> None:
        tower = vision_tower(model)
        family_of(tower).logits(tower, images)

    capture = inner_model_capture(vision_tower)
    if preprocessing is not None:
        capture["preprocessing"] = preprocessing
    register_family(name, model_type, **capture, logits=tower_forward, image_text=image_text,
                    name_patterns=name_patterns, notes=notes)


class PromptedModel(nn.Module):
    """An image–text model with its texts bound: ``forward(images (B, C, H, W))`` gives the image–text logits
    (B, T), so the texts are its classes and ``target_class=t`` explains ``S[:, t]``.

    Parameters
    ----------
    model : nn.Module
        An image–text model (:func:`register_dual_encoder`): transformers ``CLIPModel``, ``SiglipModel``, an
        open_clip ``CLIP``.
    texts : TextInputs
        From :func:`text_inputs`; moved to the images' device on each forward.
    """

    def __init__(self, model: nn.Module, texts: TextInputs) -> None:
        super().__init__()
        self.model = model
        self.texts = texts
        self._score = image_text_score(model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The image–text logits of ``images`` (B, C, H, W) against the bound texts: (B, T).

        Parameters
        ----------
        images : torch.Tensor, shape (B, C, H, W)
            Preprocessed images, on the model's device.

        Returns
        -------
        torch.Tensor, shape (B, T)
            ``S[b, t]``, image ``b``'s logit for text ``t`` (the model's ``logits_per_image``).
        """
        mask = self.texts.attention_mask
        texts = replace(self.texts, input_ids=self.texts.input_ids.to(images.device),
                        attention_mask=None if mask is None else mask.to(images.device))
        return self._score.logits(self.model, images, texts)


register_family("image-text-prompted", PromptedModel,
                **inner_model_capture(lambda prompted: prompted.model, passed_inner=True),
                logits=lambda prompted, images: prompted(images),
                class_names=lambda prompted: list(prompted.texts.labels),
                notes="an image–text model with its texts bound (vitroll.image_text_maps, overlay --text)")


def text_inputs(model: nn.Module, texts_or_input_ids: Texts, *, attention_mask: Optional[torch.Tensor] = None,
                tokenizer: Optional[object] = None) -> TextInputs:
    """The texts for ``model``: strings tokenised with ``tokenizer`` or the model's own, or input ids checked.

    Parameters
    ----------
    texts_or_input_ids : str, sequence of str, or Tensor (T, L) / (L,) of integers
    attention_mask : Tensor (T, L), optional
        Only with input ids, for a model whose text tower reads one.
    tokenizer : optional
        A transformers tokenizer, or an open_clip tokenizer (``open_clip.get_tokenizer(name)``); default: the one
        :func:`~vitroll.adapters.tokenizers.use_tokenizer` registered, else open_clip's default BPE for an open_clip
        model of its vocabulary.

    Raises
    ------
    TypeError
        For texts of another type, or input ids that are not integers.
    ValueError
        For no texts, an empty string, strings without a tokenizer or with one that is no tokenizer (its name), ids
        or a mask of the wrong shape, ids outside the text tower's vocabulary, or a mask for a model that takes none.
    UnsupportedModelError
        For a model that is not an image–text model.
    """
    score = image_text_score(model)
    if isinstance(texts_or_input_ids, torch.Tensor):
        return _checked_ids(model, texts_or_input_ids, attention_mask, score)
    if attention_mask is not None:
        raise OptionValueError("attention_mask goes with input_ids; strings are tokenised with their own mask")
    texts = [texts_or_input_ids] if isinstance(texts_or_input_ids, str) else texts_or_input_ids
    expected = "texts_or_input_ids must be a string, a list of strings or input ids (T, L)"
    if not isinstance(texts, (list, tuple)):
        raise InputTypeError(f"{expected}; got {type(texts_or_input_ids).__name__}")
    other = next((index for index, text in enumerate(texts) if not isinstance(text, str)), None)
    if other is not None:
        raise InputTypeError(f"texts_or_input_ids[{other}] is {type(texts[other]).__name__}, not a string: {expected}")
    if not texts:
        raise InputValueError("texts_or_input_ids is empty: give at least one text")
    blank = [index for index, text in enumerate(texts) if not text.strip()]
    if blank:
        raise InputValueError(f"text {blank[0]} ({texts[blank[0]]!r}) is blank: a blank text has nothing to explain")
    if tokenizer is not None and not callable(tokenizer):
        loads = (f"AutoTokenizer.from_pretrained({tokenizer!r}) loads one" if isinstance(tokenizer, str)
                 else "pass AutoTokenizer.from_pretrained(<its folder or hub id>)")
        raise OptionValueError(f"tokenizer must be a tokenizer, not {type(tokenizer).__name__} {tokenizer!r}: {loads} "
                               "(open_clip: open_clip.get_tokenizer(MODEL_NAME))")
    inputs = score.tokenize(model, list(texts), tokenizer)
    _check_length(model, inputs.input_ids, score, "the tokenizer gives",
                  "pass the tokenizer made for this model (open_clip: open_clip.get_tokenizer(MODEL_NAME))")
    return inputs


def _checked_ids(model: nn.Module, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor],
                 score: ImageTextScore) -> TextInputs:
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise InputTypeError(f"input_ids must be integer token ids; got {input_ids.dtype}")
    ids = input_ids[None] if input_ids.ndim == 1 else input_ids
    if ids.ndim != 2 or 0 in ids.shape:
        raise InputValueError(f"input_ids must have shape (T, L) with T, L ≥ 1; got {tuple(input_ids.shape)}")
    if attention_mask is not None:
        if not score.takes_attention_mask:
            raise OptionValueError(f"{type(model).__name__}'s text tower takes no attention_mask (it reads its input "
                                   "ids up to the end-of-text token); pass input_ids alone")
        attention_mask = attention_mask[None] if attention_mask.ndim == 1 else attention_mask
        if attention_mask.shape != ids.shape:
            raise InputValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, input_ids "
                                  f"{tuple(ids.shape)}; they must match")
    refuse_unknown_ids(ids, _text_vocabulary(model), "input_ids")
    _check_length(model, ids, score, "input_ids have", "give ids of that length")
    return TextInputs(ids.long(), attention_mask, tuple(f"input_ids[{t}]" for t in range(len(ids))))


def _check_length(model: nn.Module, input_ids: torch.Tensor, score: ImageTextScore, what: str, remedy: str) -> None:
    """Refuse texts (T, L) of a length the text tower cannot take, before any image is read (its own error is a
    tensor size mismatch deep in the forward); ``what`` says where they came from, ``remedy`` what to do."""
    if score.context is None:
        return
    fewest, most = score.context(model)
    length = input_ids.shape[1]
    if not fewest <= length <= most:
        takes = f"exactly {most}" if fewest == most else f"{fewest} to {most}"
        raise InputValueError(f"{what} {length} tokens per text; {type(model).__name__}'s text tower takes {takes} "
                              f"(its context); {remedy}")


def _text_vocabulary(model: nn.Module) -> Optional[int]:
    """How many tokens the text tower embeds, where the model says (transformers' ``text_config``, open_clip's
    ``vocab_size``)."""
    text_config = getattr(getattr(model, "config", None), "text_config", None)
    return getattr(text_config, "vocab_size", None) or getattr(model, "vocab_size", None)
