"""The public registration call through which a model family from any source enters vitroll."""

from __future__ import annotations

import typing
from typing import Any, Callable, Optional, Sequence

import torch

from torch import nn

from vitroll.capture.families import (
    CaptionScore, ImageTextScore, InputKind, Logits, ModelFamily, Padding, Readout, TokenLayout, add_family,
    call_model,
)
from vitroll.capture.readouts import AttentionReadout, register_readout
from vitroll.errors import OptionValueError, UnsupportedModelError
from vitroll.preprocess import Preprocessing, register_preprocessing


def register_family(
    name: str,
    model_type: type | str | tuple[type | str, ...],
    *,
    attention_modules: Callable[[nn.Module], list[nn.Module]],
    token_layout: Callable[[nn.Module, Any], TokenLayout],
    preprocessing: Optional[Preprocessing | Callable[[nn.Module], Preprocessing]] = None,
    inputs: InputKind = "images",
    readout: AttentionReadout | Sequence[AttentionReadout] = (),
    readout_modules: Optional[Callable[[nn.Module], list[nn.Module]]] = None,
    assemble: Optional[Callable[[nn.Module, list[torch.Tensor], Padding], list[torch.Tensor]]] = None,
    randomizable: Optional[Callable[[nn.Module], list[nn.Module]]] = None,
    logits: Logits = call_model,
    class_names: Optional[Callable[[nn.Module], Optional[list[str]]]] = None,
    image_text: Optional[ImageTextScore] = None,
    captioner: Optional[CaptionScore] = None,
    input_embedding: Optional[Callable[[nn.Module], nn.Module]] = None,
    name_patterns: tuple[str, ...] = (),
    timm_modules: tuple[str, ...] = (),
    notes: str = "",
) -> ModelFamily:
    """Teach vitroll a model family: every method and command then explains its models.

    Parameters
    ----------
    name : str
        Short name shown to users; registering the same name again replaces the family.
    model_type : type or str, or a tuple of them
        The model class (subclasses match too), or its dotted path ``"package.module.Class"`` so that registering
        does not import the package; a tuple for several classes. Families registered later are matched first (a
        family for a subclass of a known model class takes those models over).
    attention_modules : callable
        ``model -> [attention module per layer]``, in forward order.
    token_layout : callable
        ``(model, (H, W)) -> TokenLayout`` for an input of that size: prefix tokens, readout row, patch grid. For a
        text family (``inputs="tokens"``), ``(model, TokenBatch) -> TokenLayout`` with ``grid=None`` and the
        batch's ``token_mask``.
    preprocessing : Preprocessing or callable
        The model's evaluation transform, or ``model -> Preprocessing`` when it depends on the model
        (its input size, say). Its geometry is what puts maps back on the original image. Required for image
        families; text families have none.
    inputs : {"images", "tokens"}
        What the models take: image batches (B, C, H, W), or token batches
        (:class:`~vitroll.io.text.TokenBatch`, built from ids and masks or from strings with a tokenizer).
    readout : AttentionReadout or sequence of them, optional
        How to read the probabilities out of the attention modules' types, when vitroll does not know those types
        yet (timm's attention modules and ``nn.MultiheadAttention`` are known). For a module that applies a
        submodule to its softmax output (``attn_drop``), ``AttentionReadout(MyAttention, probs_module="attn_drop",
        fused_flag=None)`` serves every method, gradient ones included.
    readout_modules : callable, optional
        ``model -> [modules]`` whose attention is the decision row (an attention-pooling head), for a layout whose
        readout is ``"attention_pool"``.
    assemble : callable, optional
        ``(model, records, padding) -> records`` for layers whose attention lives in different token spaces
        (:attr:`ModelFamily.assemble`).
    randomizable : callable, optional
        ``model -> [submodules]`` that ``vitroll sanity`` re-initialises in cascade, in that order: the classifier
        head first, then the blocks from the last to the first (``lambda m: [m.head, *reversed(m.blocks)]``).
        Without it, ``sanity`` refuses the family's models; every other command runs.
    logits : callable, optional
        ``(model, images (B, C, H, W)) -> logits (B, num_classes)``, the scores every method explains and every
        pipeline predicts from; by default ``model(images)``. For a model that returns an output object, say where
        its logits are: ``lambda model, images: model(images).logits``. A backbone without a classification head
        runs its forward and returns None: attention methods (rollout, attention, flow) explain it, and the ones that
        need class scores say it has none. A text family's takes the TokenBatch: a classifier's class logits, or a
        language model's next-token log-probabilities (B, vocabulary) at each text's explained position.
    class_names : callable, optional
        ``model -> [name per class]`` (or None) from what the model carries; ``--class-names FILE`` overrides it.
    image_text : ImageTextScore, optional
        For an image–text model (CLIP-like): how it scores images against texts; ``vitroll.image_text_maps`` and
        ``vitroll overlay --text`` explain that score. Its ``logits`` then run the vision tower and return None.
    captioner : CaptionScore, optional
        For a captioner (image encoder, text decoder with cross-attention): how it generates and scores a caption;
        ``vitroll.caption_maps`` and ``vitroll caption`` explain each generated token.
    input_embedding : callable, optional
        ``model -> module`` the images enter (its patch embedding: ``lambda m: m.patch_embed``), whose first
        ``nn.Conv2d`` gives the channels a tensor must have. Needed only when another ``Conv2d`` is registered before
        it (a dense head defined first): without it the model's first ``Conv2d`` is taken as the input convolution.
    name_patterns : tuple of str
        Model names of the family, for messages and ``vitroll models``.
    timm_modules : tuple of str
        ``timm.models`` modules whose models all belong to the family (``vitroll models PATTERN``).
    notes : str
        One line for ``vitroll models``.

    Returns
    -------
    ModelFamily
        The registered family.
    """
    if (preprocessing is None) != (inputs == "tokens"):
        raise OptionValueError(f"family {name!r}: an image family needs its preprocessing; a text family takes none")
    model_types = model_type if isinstance(model_type, tuple) else (model_type,)

    def checked_layout(model: nn.Module, layout_input: Any) -> TokenLayout:
        layout = token_layout(model, layout_input)
        if not isinstance(layout, TokenLayout):
            raise UnsupportedModelError(f"family {name!r}: token_layout returned a {type(layout).__name__}, not a "
                                        "vitroll.TokenLayout(num_prefix_tokens, readout, grid)")
        if layout.readout not in typing.get_args(Readout):
            raise UnsupportedModelError(f"family {name!r}: token_layout's readout {layout.readout!r} is none of "
                                        f"{', '.join(typing.get_args(Readout))}")
        return layout

    family = ModelFamily(name=name, model_types=model_types, name_patterns=name_patterns, timm_modules=timm_modules,
                         attention_modules=attention_modules, token_layout=checked_layout, inputs=inputs,
                         readout_modules=readout_modules, assemble=assemble, randomizable=randomizable,
                         logits=logits, class_names=class_names, image_text=image_text, captioner=captioner,
                         input_embedding=input_embedding, notes=notes)
    for each in [readout] if isinstance(readout, AttentionReadout) else readout:
        register_readout(each)
    if preprocessing is not None:
        fixed = preprocessing if isinstance(preprocessing, Preprocessing) else None
        register_preprocessing(family.matches, preprocessing if fixed is None else lambda _model: fixed)
    add_family(family)
    return family
