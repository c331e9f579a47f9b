"""Hugging Face transformers' Vision Transformers, registered through the same public call a user has.

Capture goes through transformers' own attention interface: the attention modules of these models call
``ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager)``. vitroll registers one attention
function under the name ``"vitroll"``; while a recorder is attached, each recorded attention module gets its own
shallow copy of its config with ``_attn_implementation = "vitroll"`` (and its sink in a weak dictionary keyed by the
module), and gets its own config back on exit. The function runs the recorder's kernel, which computes the model's
output and the record in one pass, as timm's fused modules do. The model's other modules, other models and the
shared config are never switched, and no ``output_attentions=True`` forces the whole model onto its eager path.

Data2VecVision still picks its attention class when it is built: its SDPA class has its
``scaled_dot_product_attention`` call swapped for the same kernel; its eager class is read at the dropout that
receives the probabilities. Hierarchical and windowed models (Swin, PVT, Hiera, ViTDet, …), detectors and
segmenters (YOLOS, EoMT) and SigLIP 2's patch input are refused with the reason.

Nothing here imports transformers until a model is recorded: families and readouts name classes by dotted path.
"""

from __future__ import annotations

import copy
import re
from typing import Callable, Optional
from weakref import WeakKeyDictionary

import torch
from torch import nn

from vitroll.adapters.base import register_family
from vitroll.adapters.image_text import register_dual_encoder, warn_cut_texts
from vitroll.adapters.tokenizers import registered_tokenizer
from vitroll.adapters.transformers_preprocessing import image_config, transformers_preprocessing
from vitroll.capture.families import ImageTextScore, Logits, Readout, TextInputs, TokenLayout, add_refusal
from vitroll.capture.readouts import AttentionReadout, AttentionSink
from vitroll.capture.recorder import attach_sdpa_call
from vitroll.errors import OptionValueError, UnsupportedModelError
from vitroll.wording import model_loading

IMPLEMENTATION = "vitroll"
"""The name of vitroll's attention function in transformers' ``AttentionInterface``."""

_SINKS: "WeakKeyDictionary[nn.Module, AttentionSink]" = WeakKeyDictionary()
"""The sink of each attention module being recorded."""

_MODELS = "transformers.models"


def _vitroll_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None, dropout: float = 0.0,
                       **kwargs: object) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: queries (B, H, Q, D), keys and values (B, H, N, D) → the output
    (B, Q, H, D) and no weights (the record went to the module's sink)."""
    sink = _SINKS.get(module)
    if sink is None:  # a module that kept the name past its recording (a copy of the model): plain SDPA
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    cross = is_cross_attention(module)
    if dropout or (key.shape[2] != query.shape[2] and not cross):
        raise UnsupportedModelError(
            f"{type(module).__name__} attends with dropout or cached keys; vitroll records attention in eval mode "
            "without a cache only")
    if query.shape[1] % key.shape[1]:
        raise UnsupportedModelError(
            f"{type(module).__name__} has {query.shape[1]} query heads for {key.shape[1]} key/value heads, not a "
            "multiple: no grouping of the key/value heads gives each query head its own")
    if kwargs.get("softcap") is not None:
        raise UnsupportedModelError(
            f"{type(module).__name__} soft-caps its attention logits (softcap={kwargs['softcap']}: tanh before the "
            "softmax), which vitroll's attention kernel does not compute")
    if kwargs.get("s_aux") is not None:
        raise UnsupportedModelError(
            f"{type(module).__name__} adds attention sinks (a learned logit per head in the softmax), which vitroll's "
            "attention kernel does not compute")
    if key.shape[1] != query.shape[1]:  # grouped-query attention: a key/value head serves consecutive query heads
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    if attention_mask is None and getattr(module, "is_causal", False) and query.shape[2] > 1:
        # transformers leaves an unpadded causal batch's mask to the kernel's is_causal flag
        attention_mask = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device).tril()
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    return sink.attention(query, key, value, attention_mask, scale).transpose(1, 2).contiguous(), None


def is_cross_attention(module: nn.Module) -> bool:
    """Whether ``module`` attends from one sequence to another (a decoder's cross-attention: GPT-2's flag, BERT's
    ``BertCrossAttention`` class), whose queries and keys have different lengths by design."""
    return bool(getattr(module, "is_cross_attention", False)) or type(module).__name__.endswith("CrossAttention")


def _config_naming(config: object, implementation: str) -> object:
    """A shallow copy of ``config`` (and of its sub-configs, which the setter also writes) that names
    ``implementation``."""
    renamed = copy.copy(config)
    for name in getattr(config, "sub_configs", {}):
        if getattr(config, name, None) is not None:
            setattr(renamed, name, copy.copy(getattr(config, name)))
    renamed._attn_implementation = implementation
    return renamed


def attach_attention_interface(module: nn.Module, sink: AttentionSink) -> Callable[[], None]:
    """The readout of an attention module that goes through transformers' attention interface (see the module
    docstring): returns the function that gives the module its own config back."""
    from transformers import AttentionInterface

    if IMPLEMENTATION not in AttentionInterface._global_mapping:
        AttentionInterface.register(IMPLEMENTATION, _vitroll_attention)
    own = module.config
    module.config = _config_naming(own, IMPLEMENTATION)
    _SINKS[module] = sink

    def detach() -> None:
        module.config = own
        _SINKS.pop(module, None)

    return detach


INTERFACE_ATTENTION = {
    "vit": f"{_MODELS}.vit.modeling_vit.ViTAttention",
    "deit": f"{_MODELS}.deit.modeling_deit.DeiTAttention",
    "dinov2": f"{_MODELS}.dinov2.modeling_dinov2.Dinov2Attention",
    "dinov2-registers": f"{_MODELS}.dinov2_with_registers.modeling_dinov2_with_registers.Dinov2WithRegistersAttention",
    "dinov3": f"{_MODELS}.dinov3_vit.modeling_dinov3_vit.DINOv3ViTAttention",
    "ijepa": f"{_MODELS}.ijepa.modeling_ijepa.IJepaAttention",
    "beit": f"{_MODELS}.beit.modeling_beit.BeitAttention",
    "vit-msn": f"{_MODELS}.vit_msn.modeling_vit_msn.ViTMSNAttention",
    "vit-mae": f"{_MODELS}.vit_mae.modeling_vit_mae.ViTMAEAttention",
    "clip-vision": f"{_MODELS}.clip.modeling_clip.CLIPAttention",
    "siglip-vision": f"{_MODELS}.siglip.modeling_siglip.SiglipAttention",
    "metaclip2-vision": f"{_MODELS}.metaclip_2.modeling_metaclip_2.MetaClip2Attention",
    "aimv2-vision": f"{_MODELS}.aimv2.modeling_aimv2.Aimv2Attention",
    "mlcd-vision": f"{_MODELS}.mlcd.modeling_mlcd.MLCDAttention",
    "pixio": f"{_MODELS}.pixio.modeling_pixio.PixioAttention",
}
"""Attention classes that go through the attention interface, per family."""

AIMV2_POOL = f"{_MODELS}.aimv2.modeling_aimv2.Aimv2AttentionPoolingHead"
"""AIMv2's pooling head: its query (a learned token) calls ``F.scaled_dot_product_attention`` itself."""

_DATA2VEC = f"{_MODELS}.data2vec.modeling_data2vec_vision"
DATA2VEC_ATTENTION = (f"{_DATA2VEC}.Data2VecVisionSelfAttention", f"{_DATA2VEC}.Data2VecVisionSdpaSelfAttention")

HEADS = ("classifier", "cls_classifier", "distillation_classifier", "score")
"""Attribute names of the classification heads (DeiT's teacher model has two; decoders' sequence classifiers name
theirs ``score``)."""

_DEFAULT_LABEL = re.compile(r"LABEL_\d+")


def _modules_named(model: nn.Module, dotted: tuple[str, ...]) -> list[tuple[str, nn.Module]]:
    return [(name, module) for name, module in model.named_modules()
            if f"{type(module).__module__}.{type(module).__qualname__}" in dotted]


def attention_modules_of(*dotted: str) -> Callable[[nn.Module], list[nn.Module]]:
    """``model -> [attention module per layer]``: the modules of the classes ``dotted`` in forward (module) order."""
    return lambda model: [module for _name, module in _modules_named(model, dotted)]


def heads_then_layers_down(*dotted: str) -> Callable[[nn.Module], list[nn.Module]]:
    """``model -> [classification heads, encoder layers from the last to the first]``; an encoder layer is the
    element of a module list that holds an attention module of the classes ``dotted``."""

    def modules(model: nn.Module) -> list[nn.Module]:
        heads = [getattr(model, name) for name in HEADS if isinstance(getattr(model, name, None), nn.Module)]
        layers = []
        for name, _module in _modules_named(model, dotted):
            parts = name.split(".")
            last_index = max(i for i, part in enumerate(parts) if part.isdigit())
            layers.append(model.get_submodule(".".join(parts[:last_index + 1])))
        return heads + layers[::-1]

    return modules


def _logits(model: nn.Module, images: torch.Tensor) -> Optional[torch.Tensor]:
    """``model(pixel_values=images).logits``, or None for a backbone (its output has no ``logits``)."""
    return getattr(model(pixel_values=images, **size_options(model, images)), "logits", None)


def size_options(model: nn.Module, images: torch.Tensor) -> dict[str, bool]:
    """``interpolate_pos_encoding=True`` for an input of another size than ``config.image_size`` (non-square
    included): these models interpolate their position embeddings only when asked."""
    other_size = tuple(images.shape[-2:]) != _pair(image_config(model).image_size)
    return {"interpolate_pos_encoding": True} if other_size else {}


def _any_size_logits(model: nn.Module, images: torch.Tensor) -> Optional[torch.Tensor]:
    """DINOv2 interpolates its position embeddings for any input size by itself, DINOv3 and MLCD place their rotary
    embedding on any patch grid, native AIMv2 its sinusoidal one, Pixio interpolates (and none takes an option for
    it)."""
    return getattr(model(pixel_values=images), "logits", None)


def _check_unmasked(model: nn.Module) -> None:
    ratio = model.config.mask_ratio
    if ratio > 0:
        raise UnsupportedModelError(
            f"{type(model).__name__} with mask_ratio {ratio} keeps a random subset of the patches, so its tokens are "
            "not the patch grid; set model.config.mask_ratio = 0.0")


def _mae_logits(model: nn.Module, images: torch.Tensor) -> None:
    """ViT-MAE's encoder with its patches in grid order: the noise that orders them is the patch index (MAE shuffles
    the tokens by it even with nothing masked). It has no classification head."""
    _check_unmasked(model)
    grid = _grid(model, tuple(images.shape[-2:]))
    order = torch.arange(grid[0] * grid[1], device=images.device, dtype=images.dtype).expand(len(images), -1)
    model(pixel_values=images, noise=order, **size_options(model, images))


def config_class_names(model: nn.Module) -> Optional[list[str]]:
    """``config.id2label`` of a model with a classification head, unless the names are transformers' placeholders
    (LABEL_0, LABEL_1, …)."""
    if not any(isinstance(getattr(model, name, None), nn.Module) for name in HEADS):
        return None
    labels = model.config.id2label or {}
    names = [str(labels[index]) for index in sorted(labels)]
    return None if not names or all(_DEFAULT_LABEL.fullmatch(name) for name in names) else names


def _pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _grid(model: nn.Module, image_hw: tuple[int, int]) -> tuple[int, int]:
    """The patch grid of an input of ``image_hw`` (any size, position embeddings interpolated); raises ValueError for
    a size that is not whole patches (the embedding would crop it)."""
    patch = _pair(image_config(model).patch_size)
    if any(size % step for size, step in zip(image_hw, patch)):
        raise ValueError(f"{image_hw[0]}×{image_hw[1]} is not a multiple of the model's "
                         f"{patch[0]}×{patch[1]} patches")
    return image_hw[0] // patch[0], image_hw[1] // patch[1]


def _layout(prefix: Callable[[nn.Module], int], readout: Callable[[nn.Module], Readout], *,
            check: Callable[[nn.Module], None] = lambda _model: None
            ) -> Callable[[nn.Module, tuple[int, int]], TokenLayout]:
    def layout(model: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
        check(model)
        return TokenLayout(prefix(model), readout(model), _grid(model, image_hw))

    return layout


def _one(_model: nn.Module) -> int:
    return 1


def _class_token(_model: nn.Module) -> Readout:
    return "class_token"


def _patch_mean(_model: nn.Module) -> Readout:
    return "patch_mean"


def _prefix_mean(_model: nn.Module) -> Readout:
    return "prefix_mean"


def _deit_readout(model: nn.Module) -> Readout:
    """DeiTForImageClassificationWithTeacher averages the logits of its class and distillation tokens: both rows."""
    return "prefix_mean" if type(model).__name__ == "DeiTForImageClassificationWithTeacher" else "class_token"


def _dinov2_readout(model: nn.Module) -> Readout:
    """transformers' DINOv2 classifiers read the class token concatenated with the patch tokens' mean."""
    return "class_and_patch_mean" if type(model).__name__.endswith("ForImageClassification") else "class_token"


def _class_and_registers(model: nn.Module) -> int:
    """The class token and the register tokens (DINOv2 with registers, DINOv3)."""
    return 1 + model.config.num_register_tokens


def _mean_pooled(model: nn.Module) -> Readout:
    """BEiT and Data2VecVision pool the patch tokens' mean when ``use_mean_pooling`` (their default)."""
    return "patch_mean" if model.config.use_mean_pooling else "class_token"


def _siglip_readout(model: nn.Module) -> Readout:
    return "attention_pool" if getattr(model, "head", None) is not None else "patch_mean"


def _siglip_pool(model: nn.Module) -> list[nn.Module]:
    head = getattr(model, "head", None)
    return [head.attention] if head is not None else []


def _aimv2_layout(model: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
    """AIMv2: no class token; its pooling head's query attention, else (``use_head=False``) the patch mean. Native
    checkpoints place sinusoidal position embeddings on any grid; the others learned one embedding per patch of
    ``image_size`` and take that size only."""
    config = model.config
    if not config.is_native and tuple(image_hw) != _pair(config.image_size):
        size = _pair(config.image_size)
        raise ValueError(f"{type(model).__name__} has learned position embeddings for {size[0]}×{size[1]} images "
                         f"only (it is not a native-resolution AIMv2), not {image_hw[0]}×{image_hw[1]}")
    readout: Readout = "attention_pool" if config.use_head else "patch_mean"
    return TokenLayout(0, readout, _grid(model, image_hw))


def _aimv2_pool(model: nn.Module) -> list[nn.Module]:
    return [model.head] if model.config.use_head else []


def _register(name: str, classes: tuple[str, ...], attention: tuple[str, ...],
              token_layout: Callable[[nn.Module, tuple[int, int]], TokenLayout], *, notes: str,
              logits: Logits = _logits, readout_modules: Optional[Callable[[nn.Module], list[nn.Module]]] = None,
              pool_readouts: tuple[AttentionReadout, ...] = ()) -> None:
    """A family of ``classes`` whose attention modules (``attention``) go through the attention interface;
    ``pool_readouts`` read the modules ``readout_modules`` returns when they do not."""
    register_family(
        name, classes, attention_modules=attention_modules_of(*attention), token_layout=token_layout,
        preprocessing=transformers_preprocessing, randomizable=heads_then_layers_down(*attention), logits=logits,
        class_names=config_class_names, readout_modules=readout_modules,
        readout=[*(AttentionReadout(each, probs_module=None, fused_flag=None, attach=attach_attention_interface)
                   for each in attention), *pool_readouts],
        name_patterns=tuple(each.rpartition(".")[2] for each in classes), notes=notes,
    )


def _classes(module: str, *names: str) -> tuple[str, ...]:
    return tuple(f"{_MODELS}.{module}.{name}" for name in names)


_register("hf-vit", _classes("vit.modeling_vit", "ViTModel", "ViTForImageClassification"),
          (INTERFACE_ATTENTION["vit"],), _layout(_one, _class_token), notes="class token read out")
_register("hf-deit", _classes("deit.modeling_deit", "DeiTModel", "DeiTForImageClassification",
                              "DeiTForImageClassificationWithTeacher"),
          (INTERFACE_ATTENTION["deit"],), _layout(lambda _model: 2, _deit_readout),
          notes="class and distillation tokens skipped; the class token read out (…WithTeacher: both, as its head "
                "averages them)")
_register("hf-dinov2", _classes("dinov2.modeling_dinov2", "Dinov2Model", "Dinov2ForImageClassification",
                                "Dinov2Backbone"),
          (INTERFACE_ATTENTION["dinov2"],), _layout(_one, _dinov2_readout), logits=_any_size_logits,
          notes="class token read out (the classifier: half the class token, half the patch tokens' mean, as its "
                "head reads both)")
_register("hf-dinov2-registers",
          _classes("dinov2_with_registers.modeling_dinov2_with_registers", "Dinov2WithRegistersModel",
                   "Dinov2WithRegistersForImageClassification", "Dinov2WithRegistersBackbone"),
          (INTERFACE_ATTENTION["dinov2-registers"],),
          _layout(_class_and_registers, _dinov2_readout), logits=_any_size_logits,
          notes="register tokens skipped; class token read out (the classifier: half the class token, half the patch "
                "tokens' mean, as its head reads both)")
_register("hf-dinov3", _classes("dinov3_vit.modeling_dinov3_vit", "DINOv3ViTModel", "DINOv3ViTBackbone"),
          (INTERFACE_ATTENTION["dinov3"],),
          _layout(_class_and_registers, _class_token), logits=_any_size_logits,
          notes="rotary embedding included (applied before the kernel); register tokens skipped; class token read "
                "out; backbone: attention methods only")
_register("hf-ijepa", _classes("ijepa.modeling_ijepa", "IJepaModel", "IJepaForImageClassification"),
          (INTERFACE_ATTENTION["ijepa"],), _layout(lambda _model: 0, _patch_mean),
          notes="no class token: the classifier averages the patch tokens → patch mean")
_register("hf-beit", _classes("beit.modeling_beit", "BeitModel", "BeitForImageClassification", "BeitBackbone"),
          (INTERFACE_ATTENTION["beit"],), _layout(_one, _mean_pooled),
          notes="relative position bias included (it reaches the kernel as the mask); mean pooling → patch mean; "
                "backbone: attention methods only")
register_family(
    "hf-data2vec-vision", _classes("data2vec.modeling_data2vec_vision", "Data2VecVisionModel",
                                   "Data2VecVisionForImageClassification"),
    attention_modules=attention_modules_of(*DATA2VEC_ATTENTION), token_layout=_layout(_one, _mean_pooled),
    preprocessing=transformers_preprocessing, randomizable=heads_then_layers_down(*DATA2VEC_ATTENTION),
    logits=_logits, class_names=config_class_names,
    readout=[AttentionReadout(DATA2VEC_ATTENTION[0], probs_module="dropout", fused_flag=None),
             AttentionReadout(DATA2VEC_ATTENTION[1], probs_module=None, fused_flag=None, attach=attach_sdpa_call)],
    name_patterns=("Data2VecVisionModel", "Data2VecVisionForImageClassification"),
    notes="built before the attention interface: SDPA call swapped, eager path read at its dropout",
)
_register("hf-vit-msn", _classes("vit_msn.modeling_vit_msn", "ViTMSNModel", "ViTMSNForImageClassification"),
          (INTERFACE_ATTENTION["vit-msn"],), _layout(_one, _class_token), notes="class token read out")
_register("hf-vit-mae", _classes("vit_mae.modeling_vit_mae", "ViTMAEModel"), (INTERFACE_ATTENTION["vit-mae"],),
          _layout(_one, _class_token, check=_check_unmasked), logits=_mae_logits,
          notes="encoder only, with mask_ratio 0 (patches kept in grid order); backbone: attention methods only")
_register("hf-clip-vision", _classes("clip.modeling_clip", "CLIPVisionModel", "CLIPVisionModelWithProjection"),
          (INTERFACE_ATTENTION["clip-vision"],), _layout(_one, _class_token),
          notes="vision tower; backbone: attention methods only")
_register("hf-clip-classifier", _classes("clip.modeling_clip", "CLIPForImageClassification"),
          (INTERFACE_ATTENTION["clip-vision"],), _layout(_one, _patch_mean),
          notes="the vision tower with a classifier on the patch tokens' mean (class token skipped)")
_register("hf-siglip-vision", _classes("siglip.modeling_siglip", "SiglipVisionModel"),
          (INTERFACE_ATTENTION["siglip-vision"],), _layout(lambda _model: 0, _siglip_readout),
          readout_modules=_siglip_pool,
          notes="no class token; attention-pooling head → its probe's attention; backbone: attention methods only")
_register("hf-siglip-classifier", _classes("siglip.modeling_siglip", "SiglipForImageClassification"),
          (INTERFACE_ATTENTION["siglip-vision"],), _layout(lambda _model: 0, _patch_mean),
          notes="the vision tower with a classifier on the tokens' mean (its pooling head unused)")
_register("hf-metaclip2-vision", _classes("metaclip_2.modeling_metaclip_2", "MetaClip2VisionModel",
                                          "MetaClip2VisionModelWithProjection"),
          (INTERFACE_ATTENTION["metaclip2-vision"],), _layout(_one, _class_token),
          notes="MetaCLIP 2 vision tower (CLIP's); backbone: attention methods only")
_register("hf-metaclip2-classifier", _classes("metaclip_2.modeling_metaclip_2", "MetaClip2ForImageClassification"),
          (INTERFACE_ATTENTION["metaclip2-vision"],), _layout(_one, _patch_mean),
          notes="the MetaCLIP 2 vision tower with a classifier on the patch tokens' mean (class token skipped)")
_register("hf-aimv2-vision", _classes("aimv2.modeling_aimv2", "Aimv2VisionModel"),
          (INTERFACE_ATTENTION["aimv2-vision"],), _aimv2_layout, logits=_any_size_logits, readout_modules=_aimv2_pool,
          pool_readouts=(AttentionReadout(AIMV2_POOL, probs_module=None, fused_flag=None, attach=attach_sdpa_call),),
          notes="no class token; attention-pooling head → its query's attention; native checkpoints take any size; "
                "backbone: attention methods only")
_register("hf-mlcd-vision", _classes("mlcd.modeling_mlcd", "MLCDVisionModel"),
          (INTERFACE_ATTENTION["mlcd-vision"],), _layout(_one, _class_token), logits=_any_size_logits,
          notes="2D rotary embedding included (applied before the kernel; any size); class token read out; backbone: "
                "attention methods only")
_register("hf-pixio", _classes("pixio.modeling_pixio", "PixioModel", "PixioBackbone"),
          (INTERFACE_ATTENTION["pixio"],),
          _layout(lambda model: model.config.n_cls_tokens, _prefix_mean), logits=_any_size_logits,
          notes="its class tokens skipped and their rows' mean read out (it pools their mean); any size; backbone: "
                "attention methods only")


def _image_text_logits(model: nn.Module, images: torch.Tensor, texts: TextInputs) -> torch.Tensor:
    """``logits_per_image`` (B, T) of CLIPModel and SiglipModel, from their own forward."""
    return model(pixel_values=images, input_ids=texts.input_ids, attention_mask=texts.attention_mask,
                 **size_options(model, images)).logits_per_image


def _aimv2_image_text_logits(model: nn.Module, images: torch.Tensor, texts: TextInputs) -> torch.Tensor:
    """``logits_per_image`` (B, T) of Aimv2Model, from its own forward, which takes no size option (it would reach
    the text tower too): a native tower places its embedding on any grid, the others take ``image_size`` only."""
    return model(pixel_values=images, input_ids=texts.input_ids, attention_mask=texts.attention_mask).logits_per_image


def _text_context(model: nn.Module) -> tuple[int, int]:
    """A transformers text tower takes up to its position embeddings' count of tokens per text."""
    return 1, model.config.text_config.max_position_embeddings


def _tokenize_padded(padding: str) -> Callable[[nn.Module, list[str], Optional[object]], TextInputs]:
    """Tokenise with the model's transformers tokenizer, padded as its processor pads (``"longest"`` for CLIP, whose
    text tower pools the end-of-text token; ``"max_length"`` for SigLIP, which pools the last position)."""

    def tokenize(model: nn.Module, texts: list[str], tokenizer: Optional[object]) -> TextInputs:
        tokenizer = tokenizer or registered_tokenizer(model)
        if tokenizer is None:
            raise OptionValueError(f"{type(model).__name__} reads strings through its tokenizer: pass tokenizer="
                                   "AutoTokenizer.from_pretrained(<its folder or hub id>), or input_ids; from the "
                                   "command line, save the tokenizer in the model's folder "
                                   "(tokenizer.save_pretrained(FOLDER))")
        _, context = _text_context(model)
        encoded = tokenizer(texts, padding=padding, truncation=True, max_length=context, return_tensors="pt")
        # one token more than the context tells a text that was cut (without transformers' own long-input warning)
        longer = tokenizer(texts, truncation=True, max_length=context + 1)["input_ids"]
        cut = tuple(len(ids) > context for ids in longer)
        warn_cut_texts(texts, cut, context)
        return TextInputs(encoded["input_ids"], encoded.get("attention_mask"), tuple(texts), cut)

    return tokenize


IMAGE_TEXT_ARCHITECTURES: set[str] = set()
"""The classes of the image–text models registered below (``CLIPModel`` …), as a saved ``config.json`` names them
in ``architectures``: a command tells such a folder from an image model before building it."""


def _register_dual_encoder(name: str, module: str, class_name: str, notes: str, *,
                           logits: Callable = _image_text_logits, padding: str = "longest") -> None:
    """Register a transformers CLIP-like model ``module.class_name``: its image–text logits explained on its
    ``vision_model``, texts padded as its tokenizer was trained (``padding``)."""
    IMAGE_TEXT_ARCHITECTURES.add(class_name)
    register_dual_encoder(name, _classes(module, class_name), vision_tower=lambda model: model.vision_model,
                          image_text=ImageTextScore(logits, _tokenize_padded(padding), context=_text_context),
                          preprocessing=transformers_preprocessing, name_patterns=(class_name,), notes=notes)


_register_dual_encoder("hf-clip", "clip.modeling_clip", "CLIPModel",
                       "image–text: logits_per_image explained on the vision tower (class token read out)")
_register_dual_encoder("hf-siglip", "siglip.modeling_siglip", "SiglipModel",
                       "image–text: logits_per_image (with its bias) explained on the vision tower (its "
                       "attention-pool row read out)", padding="max_length")
_register_dual_encoder("hf-metaclip2", "metaclip_2.modeling_metaclip_2", "MetaClip2Model",
                       "image–text: logits_per_image explained on the vision tower (class token read out)")
_register_dual_encoder("hf-aimv2", "aimv2.modeling_aimv2", "Aimv2Model",
                       "image–text: logits_per_image explained on the vision tower (its pooling query's attention "
                       "read out)", logits=_aimv2_image_text_logits)

MODEL_TYPES = frozenset({"vit", "deit", "dinov2", "dinov2_with_registers", "dinov3_vit", "ijepa", "beit",
                         "data2vec-vision", "vit_msn", "vit_mae", "clip", "clip_vision_model", "siglip",
                         "siglip_vision_model", "metaclip_2", "metaclip_2_vision_model", "aimv2", "aimv2_vision_model",
                         "mlcd_vision_model", "pixio"})
"""The ``config.model_type`` values of the models registered above (CLIP, SigLIP, MetaCLIP 2 and AIMv2: their vision
towers too), which loading checks before it builds a model."""

_HIERARCHICAL = ("a hierarchical model has no single token sequence that rollout could follow from layer to layer; "
                 "use Grad-CAM (pip install grad-cam)")
_NO_ATTENTION = "it has no attention for vitroll to read; use Grad-CAM (pip install grad-cam)"
_VIT_LIKE = "vitroll explains image classifiers and backbones (ViT, DeiT, DINOv2/v3, BEiT, CLIP/SigLIP towers, …)"
_SIGLIP2 = ("SigLIP 2 (NaFlex) takes its images as pre-cut patches with their spatial shapes and a patch mask, not as "
            "an image tensor; vitroll explains SigLIP (model type siglip) and its vision tower")
_BLIP = ("{name} matches and captions through a text model that cross-attends to the image inside its own class, "
         "which vitroll does not read; it explains dual encoders (CLIP, SigLIP, MetaCLIP 2, AIMv2) and "
         "VisionEncoderDecoderModel captioners")
_REFUSED: tuple[tuple[str, Optional[str], str], ...] = (
    ("swin", f"{_MODELS}.swin.modeling_swin.SwinPreTrainedModel",
     f"Swin attends within shifted windows: {_HIERARCHICAL}"),
    ("swinv2", f"{_MODELS}.swinv2.modeling_swinv2.Swinv2PreTrainedModel",
     f"Swin V2 attends within shifted windows: {_HIERARCHICAL}"),
    ("convnext", f"{_MODELS}.convnext.modeling_convnext.ConvNextPreTrainedModel",
     f"ConvNeXt is a CNN: {_NO_ATTENTION}"),
    ("convnextv2", f"{_MODELS}.convnextv2.modeling_convnextv2.ConvNextV2PreTrainedModel",
     f"ConvNeXt V2 is a CNN: {_NO_ATTENTION}"),
    ("pvt", f"{_MODELS}.pvt.modeling_pvt.PvtPreTrainedModel", f"PVT attends to pooled keys in stages: {_HIERARCHICAL}"),
    ("segformer", f"{_MODELS}.segformer.modeling_segformer.SegformerPreTrainedModel",
     f"SegFormer attends to reduced keys in stages: {_HIERARCHICAL}"),
    ("pvt_v2", f"{_MODELS}.pvt_v2.modeling_pvt_v2.PvtV2PreTrainedModel",
     f"PVT v2 attends to pooled keys in stages: {_HIERARCHICAL}"),
    ("resnet", f"{_MODELS}.resnet.modeling_resnet.ResNetPreTrainedModel", f"ResNet is a CNN: {_NO_ATTENTION}"),
    ("regnet", f"{_MODELS}.regnet.modeling_regnet.RegNetPreTrainedModel", f"RegNet is a CNN: {_NO_ATTENTION}"),
    ("bit", f"{_MODELS}.bit.modeling_bit.BitPreTrainedModel", f"BiT is a CNN (a ResNet V2): {_NO_ATTENTION}"),
    ("efficientnet", f"{_MODELS}.efficientnet.modeling_efficientnet.EfficientNetPreTrainedModel",
     f"EfficientNet is a CNN: {_NO_ATTENTION}"),
    ("mobilenet_v1", f"{_MODELS}.mobilenet_v1.modeling_mobilenet_v1.MobileNetV1PreTrainedModel",
     f"MobileNet V1 is a CNN: {_NO_ATTENTION}"),
    ("mobilenet_v2", f"{_MODELS}.mobilenet_v2.modeling_mobilenet_v2.MobileNetV2PreTrainedModel",
     f"MobileNet V2 is a CNN: {_NO_ATTENTION}"),
    ("focalnet", f"{_MODELS}.focalnet.modeling_focalnet.FocalNetPreTrainedModel",
     f"FocalNet mixes its tokens by focal modulation (depth-wise convolutions and gates), not attention: "
     f"{_NO_ATTENTION}"),
    ("poolformer", f"{_MODELS}.poolformer.modeling_poolformer.PoolFormerPreTrainedModel",
     f"PoolFormer mixes its tokens by pooling, not attention: {_NO_ATTENTION}"),
    ("dinov3_convnext", f"{_MODELS}.dinov3_convnext.modeling_dinov3_convnext.DINOv3ConvNextPreTrainedModel",
     f"DINOv3's ConvNeXt is a CNN (DINOv3's ViTs, model type dinov3_vit, are supported): {_NO_ATTENTION}"),
    ("mobilevit", f"{_MODELS}.mobilevit.modeling_mobilevit.MobileViTPreTrainedModel",
     f"MobileViT attends across the patches of a feature map, once per pixel position inside a patch, between "
     f"convolutional stages: {_HIERARCHICAL}"),
    ("mobilevitv2", f"{_MODELS}.mobilevitv2.modeling_mobilevitv2.MobileViTV2PreTrainedModel",
     f"MobileViT V2 attends through separable linear attention (one context score per patch, no token-to-token "
     f"matrix) between convolutional stages: {_HIERARCHICAL}"),
    ("efficientformer", None,
     "EfficientFormer is no longer in transformers 5, and it attends only in its last stage, after convolutional "
     f"stages that pool the pixels: {_HIERARCHICAL}"),
    ("swiftformer", f"{_MODELS}.swiftformer.modeling_swiftformer.SwiftFormerPreTrainedModel",
     f"SwiftFormer attends through additive attention (one global query, no token-to-token matrix) in "
     f"convolutional stages: {_HIERARCHICAL}"),
    ("hiera", f"{_MODELS}.hiera.modeling_hiera.HieraPreTrainedModel",
     f"Hiera attends within mask units and pools its tokens between stages: {_HIERARCHICAL}"),
    ("levit", f"{_MODELS}.levit.modeling_levit.LevitPreTrainedModel",
     f"LeViT subsamples its tokens between stages: {_HIERARCHICAL}"),
    ("cvt", f"{_MODELS}.cvt.modeling_cvt.CvtPreTrainedModel",
     f"CvT attends through convolutional projections in stages: {_HIERARCHICAL}"),
    ("dinat", f"{_MODELS}.dinat.modeling_dinat.DinatPreTrainedModel",
     f"DiNAT attends within dilated neighbourhoods in stages: {_HIERARCHICAL}"),
    ("vitdet", f"{_MODELS}.vitdet.modeling_vitdet.VitDetPreTrainedModel",
     "ViTDet attends within windows in its windowed layers, so no layer-to-layer token sequence spans the image; "
     "use Grad-CAM (pip install grad-cam)"),
    ("yolos", f"{_MODELS}.yolos.modeling_yolos.YolosPreTrainedModel",
     "YOLOS is a detector: its detection tokens follow the patches and there is no class score per image; "
     f"{_VIT_LIKE}"),
    ("eomt", f"{_MODELS}.eomt.modeling_eomt.EomtPreTrainedModel",
     f"EoMT is a segmenter: its query tokens join in the last blocks and there is no class score per image; "
     f"{_VIT_LIKE}"),
    ("dpt", f"{_MODELS}.dpt.modeling_dpt.DPTPreTrainedModel",
     f"DPT is a dense predictor (depth, segmentation) that reassembles several layers' tokens: there is no class "
     f"score per image; {_VIT_LIKE}"),
    ("blip", f"{_MODELS}.blip.modeling_blip.BlipPreTrainedModel", _BLIP.format(name="BLIP")),
    ("blip-2", f"{_MODELS}.blip_2.modeling_blip_2.Blip2PreTrainedModel", _BLIP.format(name="BLIP-2")),
    ("siglip2", f"{_MODELS}.siglip2.modeling_siglip2.Siglip2PreTrainedModel", _SIGLIP2),
    ("siglip2_vision_model", None, _SIGLIP2),
)
"""Models refused with their reason: ``(config.model_type, model class or None, why)``."""

REFUSED_MODEL_TYPES = {model_type: why for model_type, _model_class, why in _REFUSED}
"""Why loading refuses a ``config.model_type``, for the types refused by name (and ``timm_wrapper``:
:func:`refusal_of_model_type`)."""

for _model_type, _model_class, _why in _REFUSED:
    if _model_class is not None:
        add_refusal(_model_class, _why)


def refusal_of_model_type(model_type: str) -> Optional[str]:
    """Why loading refuses a ``config.model_type``, for the types refused by name; None for any other. A
    ``timm_wrapper`` is told how to load it through timm in the words of where the user is (``--model ARCH
    --checkpoint FILE`` on the command line, ``load_model(ARCH, checkpoint=FILE)`` from Python), so it is worded
    when refused."""
    if model_type != "timm_wrapper":
        return REFUSED_MODEL_TYPES.get(model_type)
    return ("it is a timm model that transformers wraps, and vitroll explains it through timm: pass "
            f"{model_loading('hf-hub:ORG/NAME')} for its hub repository, or for a saved folder "
            f"{model_loading('ARCH', checkpoint='FOLDER/model.safetensors')} (ARCH: the architecture in its "
            "config.json)")
