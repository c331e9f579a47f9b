"""Model families: which modules hold a model's token attention and how its tokens are laid out.

One :class:`ModelFamily` entry per kind of model, each added through :func:`vitroll.register_family`: timm's in
:mod:`vitroll.adapters.timm`, torchvision's in :mod:`vitroll.adapters.torchvision`, and any a user registers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import os
import sys
from typing import Any, Callable, Literal, Optional, Sequence

import torch
from torch import nn

from vitroll.errors import InputTypeError, OptionValueError, RecorderUsageError, UnsupportedModelError
from vitroll.registry import Registry
from vitroll.wording import with_article

Readout = Literal["class_token", "patch_mean", "attention_pool", "token_mean", "prefix_mean", "class_and_patch_mean",
                  "position"]
Padding = Literal["identity", "zeros"]
"""What :attr:`ModelFamily.assemble` puts where a layer has no entries of its own: the identity for attention (the
tokens pass through that layer unchanged), zeros for gradients (those entries are no attention the model computed,
so the score does not depend on them)."""

InputKind = Literal["images", "tokens"]
"""What a family's models take: image batches (B, C, H, W), or token batches (:class:`vitroll.io.text.TokenBatch`)."""


@dataclass(frozen=True)
class TokenLayout:
    """Where the explained tokens sit in a model's token sequence, for one input.

    An image layout has a patch ``grid``: its values come out as maps (..., h, w). A sequence layout (text) has
    ``grid=None`` and a ``token_mask``: its values come out as scores (..., L) over every position, padding 0.

    Attributes
    ----------
    num_prefix_tokens : int
        Tokens before the patch tokens: class, distillation and register tokens (0 for sequences, whose scores
        cover every position).
    readout : {"class_token", "patch_mean", "attention_pool", "token_mean", "prefix_mean", "class_and_patch_mean", \
               "position"}
        Which row of the attention is the model's "decision" row: the class token's (index 0); for models
        that average the patch tokens, the mean of their rows (``"patch_mean"``); for models that average every
        token, prefix tokens included (timm's ``pool_include_prefix``; a text's real tokens), the mean of all rows
        (``"token_mean"``); for models that average their several class tokens (Pixio), the mean of the prefix
        tokens' rows (``"prefix_mean"``); for models whose head reads the class token concatenated with the patch
        tokens' mean (transformers' DINOv2 classifiers), half the class token's row and half the patch tokens' mean
        row (``"class_and_patch_mean"``); for models with an attention-pooling head (``global_pool='map'``), the pooling
        query's own attention over the tokens; for a language model, the row of the explained ``positions``.
    grid : (int, int) or None
        Patch grid (h, w); ``h * w`` patch tokens follow the prefix tokens. None for a sequence.
    pool_weights : Tensor, shape (B, N), optional
        The pooling query's attention (heads and latent queries averaged); set when ``readout`` is
        ``"attention_pool"``.
    token_mask : Tensor, shape (B, N), bool, optional
        True for real tokens, False for padding; set for sequences.
    positions : Tensor, shape (B,), optional
        Index of each sequence's explained token; set when ``readout`` is ``"position"``.
    padded_hw : (int, int), optional
        For a model that pads its input up to whole patches, right and bottom (timm's ``dynamic_img_pad``): the
        padded input (H', W') = grid × patch, which the grid cuts into equal patches, the input's own pixels the
        first H × W of it (the last row and column of patches partly padding). None: the grid cuts the input itself.
    """

    num_prefix_tokens: int
    readout: Readout
    grid: Optional[tuple[int, int]]
    pool_weights: Optional[torch.Tensor] = field(default=None, compare=False, repr=False)
    token_mask: Optional[torch.Tensor] = field(default=None, compare=False, repr=False)
    positions: Optional[torch.Tensor] = field(default=None, compare=False, repr=False)
    padded_hw: Optional[tuple[int, int]] = None

    def __post_init__(self) -> None:
        if (self.grid is None) == (self.token_mask is None):
            raise OptionValueError("a TokenLayout has either a patch grid (images) or a token_mask (sequences)")
        if self.readout == "position" and self.positions is None:
            raise OptionValueError("a 'position' readout needs the explained positions")

    def padded(self, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels`` (..., H, W) of an input as the model pads them, with zeros right and bottom up to
        :attr:`padded_hw` (unchanged without it): the pixels the grid cuts into equal patches."""
        if self.padded_hw is None:
            return pixels
        height, width = pixels.shape[-2:]
        return torch.nn.functional.pad(pixels, (0, self.padded_hw[1] - width, 0, self.padded_hw[0] - height))

    @property
    def num_tokens(self) -> int:
        if self.token_mask is not None:
            return self.token_mask.shape[-1]
        return self.num_prefix_tokens + self.grid[0] * self.grid[1]

    def readout_vector(self, *, device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The row vector that selects the decision row of an (N, N) matrix: shape (N,), or (B, N) per input
        (attention pooling, sequences read at a position or as the mean of their real tokens)."""
        if self.readout == "attention_pool":
            if self.pool_weights is None:
                raise RecorderUsageError("an attention_pool layout needs the recorded pool_weights")
            return self.pool_weights.to(device=device, dtype=dtype)
        if self.readout == "position":
            return torch.nn.functional.one_hot(self.positions.to(device), self.num_tokens).to(dtype)
        v = torch.zeros(self.num_tokens, device=device, dtype=dtype)
        if self.readout == "class_token":
            v[0] = 1.0
            return v
        if self.readout == "class_and_patch_mean":
            v[0] = 0.5
            v[self.num_prefix_tokens:] = 0.5 / (self.num_tokens - self.num_prefix_tokens)
            return v
        if self.readout == "prefix_mean":
            v[:self.num_prefix_tokens] = 1.0
        else:
            v[self.num_prefix_tokens if self.readout == "patch_mean" else 0:] = 1.0
        if self.token_mask is not None:
            v = v * self.token_mask.to(device=device, dtype=dtype)
        return v / v.sum(dim=-1, keepdim=True)

    def readout_row(self, matrices: torch.Tensor) -> torch.Tensor:
        """Decision row of matrices (B, N, N) or per head (B, H, N, N) → (B, N) or (B, H, N)."""
        v = self.readout_vector(device=matrices.device, dtype=matrices.dtype)
        if v.ndim == 1:
            return v @ matrices
        v = v.reshape(v.shape[0], *([1] * (matrices.ndim - 2)), v.shape[-1])  # (B, [1,] 1, N)
        return (v @ matrices).squeeze(-2)

    def patch_values(self, token_values: torch.Tensor) -> torch.Tensor:
        """Values over tokens (B, ..., N) as the layout's result: the patch grid (B, ..., h, w), prefix tokens
        dropped; for a sequence every position (B, ..., N), padded positions set to exactly 0."""
        if self.token_mask is None:
            return token_values[..., self.num_prefix_tokens:].reshape(*token_values.shape[:-1], *self.grid)
        mask = self.token_mask.to(token_values.device)
        mask = mask.reshape(mask.shape[0], *([1] * (token_values.ndim - 2)), mask.shape[-1])
        return token_values.masked_fill(~mask, 0.0)


def padded_to_patches(image_hw: tuple[int, int], patch_hw: Optional[tuple[int, int]]
                      ) -> Optional[tuple[int, int]]:
    """``image_hw`` padded up to whole patches of ``patch_hw`` (a model's ``dynamic_img_pad``), or None when it
    already is whole patches or there is no ``patch_hw``."""
    if patch_hw is None:
        return None
    padded = tuple(-(-int(size) // int(patch)) * int(patch) for size, patch in zip(image_hw, patch_hw))
    return None if padded == tuple(image_hw) else padded


def call_model(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """``model(images)``: the logits (B, num_classes) of a model whose forward returns them."""
    return model(images)


Logits = Callable[[nn.Module, Any], Optional[torch.Tensor]]
"""``(model, images (B, C, H, W)) -> logits (B, num_classes)``: runs the model's forward pass and returns its class
scores, or None for a backbone without a classification head (its attention is still recorded in that pass). A
family of text models takes a :class:`~vitroll.io.text.TokenBatch` instead of images."""


@dataclass(frozen=True)
class TextInputs:
    """Tokenised texts for an image–text model, one row per text.

    Attributes
    ----------
    input_ids : Tensor, shape (T, L), int64
    attention_mask : Tensor, shape (T, L), or None
        None where the model's tokenizer gives none (open_clip, SigLIP's padding to its full length).
    labels : tuple of str
        What each text is called in messages and file names: the text itself, or ``input_ids[t]``.
    cut : tuple of bool
        Whether each text was longer than the text tower's context, ``L`` tokens then, and cut to it; empty where
        the ids were given, not texts.
    """

    input_ids: torch.Tensor
    attention_mask: Optional[torch.Tensor]
    labels: tuple[str, ...]
    cut: tuple[bool, ...] = ()

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class ImageTextScore:
    """How an image–text model (a dual encoder) scores images against texts: the score its maps explain.

    Attributes
    ----------
    logits : callable
        ``(model, images (B, C, H, W), texts) -> (B, T)``: the image–text logits, ``logits_per_image`` (the scaled
        cosine similarity, plus the bias for SigLIP), from the model's own forward pass, which records the vision
        tower's attention.
    tokenize : callable
        ``(model, texts, tokenizer or None) -> TextInputs``: the strings through ``tokenizer``, else the model's own
        (one registered with it, or its library's default); raises ValueError when it has none.
    takes_attention_mask : bool
        Whether the text tower reads an attention mask beside the input ids.
    context : callable or None
        ``model -> (fewest, most)``: how many tokens per text the text tower takes (open_clip's exactly its context
        length, transformers' up to its position embeddings); None: not checked.
    """

    logits: Callable[[nn.Module, torch.Tensor, TextInputs], torch.Tensor]
    tokenize: Callable[[nn.Module, Sequence[str], Optional[object]], TextInputs]
    takes_attention_mask: bool = True
    context: Optional[Callable[[nn.Module], tuple[int, int]]] = None


AttentionRole = Literal["encoder", "self", "cross"]
"""What one attention module of an encoder–decoder model is: the image encoder's self-attention, the text decoder's
(causal) self-attention, or the decoder's cross-attention from its tokens to the encoder's."""


@dataclass(frozen=True)
class CaptionScore:
    """How a captioner (an image encoder with a text decoder that cross-attends to it) generates and scores a
    caption: the scores its per-token maps explain.

    Attributes
    ----------
    roles : callable
        ``model -> [AttentionRole per attention module]``, aligned with the family's ``attention_modules``.
    encoder_layout : callable
        ``(model, (H, W)) -> TokenLayout`` of the encoder's tokens: prefix tokens and patch grid.
    generate : callable
        ``(model, images (B, C, H, W), max_new_tokens) -> (B, K)``: the greedy caption's token ids, without the
        decoder's start token, padded with the pad token after the end token.
    token_logits : callable
        ``(model, images, caption_ids (B, K)) -> (B, K, vocabulary)``: teacher-forced, the logits that predicted
        each caption token (position k reads the start token and tokens 0 … k−1); its forward pass is recorded.
    special_ids : callable
        ``model -> (start, end, pad)`` token ids.
    """

    roles: Callable[[nn.Module], list[AttentionRole]]
    encoder_layout: Callable[[nn.Module, tuple[int, int]], TokenLayout]
    generate: Callable[[nn.Module, torch.Tensor, int], torch.Tensor]
    token_logits: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
    special_ids: Callable[[nn.Module], tuple[int, int, int]]


@dataclass(frozen=True)
class ModelFamily:
    """How to find and read the attention of one kind of model.

    Attributes
    ----------
    name : str
        Short name shown to users.
    model_types : tuple of (type or str)
        Model classes of the family (subclasses match too); a class may be named ``"package.module.Class"``, so that
        registering a family does not import its package (a model of that class exists only once it is imported).
    name_patterns : tuple of str
        timm name patterns of the family, for messages and ``vitroll models``.
    timm_modules : tuple of str
        ``timm.models`` modules whose models all belong to the family (``timm.list_models(module=…)``).
    attention_modules : callable
        ``model -> [attention module per layer]`` in forward order.
    token_layout : callable
        ``(model, (H, W)) -> TokenLayout`` for image families; ``(model, TokenBatch) -> TokenLayout`` for text
        families (the layout depends on each text's padding and explained row).
    inputs : {"images", "tokens"}
        What the family's models take (:data:`InputKind`).
    readout_modules : callable, optional
        ``model -> [modules]`` whose attention is the readout (the attention-pooling head); usually none.
    assemble : callable, optional
        ``(model, records, padding) -> records`` bringing per-layer records (..., Q, M) that live in different
        token spaces into one (..., N, N) space (CaiT's class-attention stage), the rest filled as ``padding``
        says (:data:`Padding`).
    randomizable : callable, optional
        ``model -> [submodules]`` that a cascading randomisation check re-initialises, in that order: the
        classifier head first, then the blocks from the last to the first. Without it ``vitroll sanity`` refuses
        the family's models.
    logits : callable
        ``(model, images (B, C, H, W)) -> (B, num_classes) or None`` (:data:`Logits`): the forward pass whose scores
        are explained (default ``model(images)``; a model that returns an output object or a dict says here where its
        logits are; a backbone runs its forward and returns None).
    class_names : callable, optional
        ``model -> [name per class] or None`` from what the model carries (its pretrained config, its labels).
    image_text : ImageTextScore, optional
        For an image–text model: how it scores images against texts (its ``logits`` then run the vision tower
        alone and return None: texts are needed for a score).
    captioner : CaptionScore, optional
        For a captioner: how it generates and scores captions (maps per generated token).
    input_embedding : callable, optional
        ``model -> module`` the images enter (the patch embedding, a hybrid's stem): its first ``Conv2d`` gives the
        channels the model takes. Without it, the model's first ``Conv2d`` does.
    notes : str
        One line for the README / ``vitroll models``.
    """

    name: str
    model_types: tuple[type | str, ...]
    name_patterns: tuple[str, ...]
    timm_modules: tuple[str, ...]
    attention_modules: Callable[[nn.Module], list[nn.Module]]
    token_layout: Callable[[nn.Module, Any], TokenLayout]
    inputs: InputKind = "images"
    readout_modules: Optional[Callable[[nn.Module], list[nn.Module]]] = None
    assemble: Optional[Callable[[nn.Module, list[torch.Tensor], Padding], list[torch.Tensor]]] = None
    randomizable: Optional[Callable[[nn.Module], list[nn.Module]]] = None
    logits: Logits = call_model
    class_names: Optional[Callable[[nn.Module], Optional[list[str]]]] = None
    image_text: Optional[ImageTextScore] = None
    captioner: Optional[CaptionScore] = None
    input_embedding: Optional[Callable[[nn.Module], nn.Module]] = None
    notes: str = ""

    def matches(self, model: nn.Module) -> bool:
        """Whether ``model`` is an instance of one of :attr:`model_types`."""
        return any(isinstance(model, model_type) for model_type in self._imported_types())

    def _imported_types(self) -> list[type]:
        return imported_types(self.model_types)


def imported_types(model_types: tuple[type | str, ...]) -> list[type]:
    """The classes among ``model_types`` (classes, or dotted paths ``"package.module.Class"``) that exist: a dotted
    path names a class only once its module is imported, which it is whenever a model of that class exists."""
    imported = []
    for model_type in model_types:
        if isinstance(model_type, str):
            module_name, _, class_name = model_type.rpartition(".")
            model_type = getattr(sys.modules.get(module_name), class_name, None)
        if model_type is not None:
            imported.append(model_type)
    return imported


FAMILIES: Registry[ModelFamily] = Registry()
"""Registered families in registration order (:func:`vitroll.register_family`; timm's are in
:mod:`vitroll.adapters.timm`, registered when this is first read: :mod:`vitroll.registry`)."""


def add_family(family: ModelFamily) -> None:
    """Add ``family`` (replacing one of the same name, in its place); it is matched before the families registered
    earlier, so a family of subclasses of a known model class takes those models over."""
    names = [known.name for known in FAMILIES]
    if family.name in names:
        FAMILIES[names.index(family.name)] = family
    else:
        FAMILIES.append(family)


REFUSALS: Registry[tuple[type | str, str | Callable[[str], str]]] = Registry()
"""(model class or dotted path, reason) of the model kinds vitroll refuses with that reason (:func:`add_refusal`);
a built-in reason that names a module inside the model is a function of the refused model's path (``model``)."""


class Refusal(UnsupportedModelError):
    """A refusal naming modules by their path from the model the user passed (``model.visual.trunk[1]``).

    Raised for a model inside another (a dual encoder's vision tower, a tower's timm trunk), it names paths from that
    inner model; :meth:`within` re-roots it at the inner model's path in the outer one.
    """

    def __init__(self, message: Callable[[str], str], path: str = "model") -> None:
        super().__init__(message(path))
        self.message, self.path = message, path

    def within(self, path: str) -> "Refusal":
        """The same refusal with the refused model at ``path`` (``model.visual``) instead of ``model``."""
        return Refusal(self.message, path + self.path[len("model"):])

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return UnsupportedModelError, (str(self),)


def module_path(model: nn.Module, module: nn.Module, path: str = "model") -> str:
    """How ``module`` inside ``model`` (itself spelt ``path``) is reached in Python: ``model.visual.trunk[1]``."""
    return _python_path(next(name for name, inner in model.named_modules() if inner is module), path)


def _python_path(name: str, path: str) -> str:
    """The dotted module ``name`` (``visual.trunk.1``) spelt in Python from ``path``: ``model.visual.trunk[1]``."""
    return path + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in name.split(".") if part)


def add_refusal(model_type: type | str, reason: str) -> None:
    """Refuse models of ``model_type`` (a class, subclasses included, or its dotted path ``"package.module.Class"``)
    with ``reason``, one line saying why their attention cannot be explained (windows or stages, not one token
    sequence), instead of the list of supported families."""
    REFUSALS.append((model_type, reason))


REFUSALS.append(("torch._dynamo.eval_frame.OptimizedModule",
                 lambda path: "a torch.compile'd model runs a compiled graph that attention hooks do not see; explain "
                              f"the model it wraps, {path}._orig_mod (the same weights)"))


for _wrapper in ("torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel"):
    REFUSALS.append((_wrapper, lambda path: "a data-parallel wrapper runs copies of the model in threads, one per "
                                            "device, which attention hooks do not follow; explain the model it "
                                            f"wraps, {path}.module (the same weights)"))


def _spelt(reason: str | Callable[[str], str], path: str) -> str:
    return reason(path) if callable(reason) else reason


def refusal_of_module(module_name: str) -> Optional[str]:
    """The reason refusing the model classes that the module ``module_name`` defines, when one of them is refused by
    its dotted path (:func:`add_refusal`): a model can then be refused by its name, before it is built."""
    return next((_spelt(reason, "model") for model_type, reason in REFUSALS
                 if isinstance(model_type, str) and model_type.rpartition(".")[0] == module_name), None)


def refusal_of(model: nn.Module, path: str = "model") -> Optional[str]:
    """The one-line reason ``model`` (spelt ``path`` in it) is refused (:func:`add_refusal`), or None when its kind is
    not refused. A model of no registered family that holds one (a normaliser and a ViT in ``nn.Sequential``) is
    refused naming it."""
    for model_type, reason in REFUSALS:
        if any(isinstance(model, known) for known in imported_types((model_type,))):
            return f"{type(model).__name__}: {_spelt(reason, path)}"
    if registered_family(model) is None:
        for name, module in model.named_modules():
            if name and registered_family(module) is not None:
                return (f"{type(model).__name__} is of no registered model family, but the {type(module).__name__} it "
                        f"holds is: explain {_python_path(name, path)}, whose own preprocessing vitroll "
                        "applies to images (a tensor must be its input), or register the wrapper with "
                        "vitroll.register_family")
    return None


def refuse_if_refused(model: nn.Module) -> None:
    """Raise the :class:`Refusal` of ``model`` when :func:`refusal_of` refuses it (its paths re-rooted by
    :meth:`Refusal.within` where it sits inside another model)."""
    if refusal_of(model) is not None:
        raise Refusal(lambda path: refusal_of(model, path))


def check_module(model: object) -> None:
    """Refuse, in one line, a ``model`` that is not an ``nn.Module`` (a model's name, or the arguments swapped)."""
    if not isinstance(model, nn.Module):
        advice = (f"load it first with vitroll.load_model({os.fspath(model)!r})"
                  if isinstance(model, (str, os.PathLike)) else "the arguments are (model, images)")
        raise InputTypeError(f"model is {with_article(type(model).__name__)}, not a torch.nn.Module: {advice}")


def registered_family(model: nn.Module) -> Optional[ModelFamily]:
    """The registered family of ``model`` (the latest registered that matches), or None; every lookup of a model's
    family passes here, so a ``model`` that is not an ``nn.Module`` is refused here (:func:`check_module`)."""
    check_module(model)
    return next((family for family in reversed(FAMILIES) if family.matches(model)), None)


def family_of(model: nn.Module) -> ModelFamily:
    """The registered family of ``model`` (the latest registered that matches); raises
    :class:`UnsupportedModelError` naming the supported ones."""
    family = registered_family(model)
    if family is not None:
        return family
    refuse_if_refused(model)
    raise UnsupportedModelError(unsupported_message(type(model).__name__))


def unsupported_message(what: str, *, timm_only: bool = False) -> str:
    """The one line that refuses ``what`` (a model class, or a model name and where it comes from) as no model of a
    registered family, listing the families (with ``timm_only``, for a timm name, those of timm models, and where the
    others are listed)."""
    families = [f for f in FAMILIES if f.timm_modules] if timm_only else FAMILIES
    supported = ", ".join(f"{f.name} ({', '.join(f.name_patterns)})" if f.name_patterns else f.name for f in families)
    listed = (f"supported timm families: {supported} (`vitroll models` lists their names and the torchvision, "
              "Hugging Face and open_clip families)" if timm_only else f"supported families: {supported}")
    return (f"{what} has no token attention that vitroll can read; {listed}. "
            "For CNNs and windowed-attention models (Swin, ConvNeXt, ResNet) use Grad-CAM (pip install grad-cam).")
