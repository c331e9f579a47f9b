"""Hugging Face transformers models: which names are theirs, and loading one from a ``save_pretrained`` folder or a
hub id (from the local cache when the hub is unreachable) with its image processor or tokenizer registered."""

from __future__ import annotations

import functools
import json
import pickle
import re
from pathlib import Path
from typing import Mapping, Optional

import torch
from torch import nn

from vitroll.adapters.transformers import (
    IMAGE_TEXT_ARCHITECTURES, MODEL_TYPES as TRANSFORMERS_MODEL_TYPES, refusal_of_model_type,
)
from vitroll.adapters.transformers_preprocessing import use_image_processor
from vitroll.adapters.tokenizers import use_tokenizer
from vitroll.adapters.transformers_text import (
    EAGER_MODEL_TYPES as TEXT_EAGER_MODEL_TYPES, MODEL_CLASSES as TEXT_MODEL_CLASSES, MODEL_TYPES as TEXT_MODEL_TYPES,
    REFUSED_MODEL_TYPES as TEXT_REFUSED_MODEL_TYPES, soft_capping_refusal,
)
from vitroll.adapters.captioner import (
    DECODER_MODEL_TYPES as CAPTIONER_DECODER_TYPES, MODEL_TYPES as CAPTIONER_MODEL_TYPES,
)
from vitroll.checkpoints import file_sha256, mismatch_error
from vitroll.errors import ModelLoadError
from vitroll.models import hub
from vitroll.models.open_clip import OPEN_CLIP_PREFIX
from vitroll.models.torchvision import TORCHVISION_PREFIX
from vitroll.testbed.captioner_model import FOLDER as CAPTION_FOLDER
from vitroll.testbed.image_text_model import FOLDER as PAIRS_FOLDER
from vitroll.testbed.text_model import FOLDERS as TEXT_TESTBED_FOLDERS
from vitroll.wording import argument, arguments, model_loading, on_the_command_line

TRANSFORMERS_PREFIX = "transformers:"
TRANSFORMERS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                        "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
"""A saved tokenizer has one of these (``tokenizer_config.json`` alone does not make one: from a config alone,
transformers 5 builds a tokenizer that knows no words)."""
_TOKENIZER_SETTINGS_FILES = (*_TOKENIZER_FILES, "merges.txt", "added_tokens.json", "special_tokens_map.json",
                             "tokenizer_config.json")
"""What a saved tokenizer reads: its words, merges, special tokens and options (lower-casing, accents)."""


SHIPPED_TRANSFORMERS = {
    "vitroll-clip-shapes": PAIRS_FOLDER,
    "vitroll-caption-shapes": CAPTION_FOLDER,
    "vitroll-text-keyword": TEXT_TESTBED_FOLDERS["keyword"],
    "vitroll-text-shortcut": TEXT_TESTBED_FOLDERS["shortcut"],
}
"""The transformers testbed models shipped with vitroll (:mod:`vitroll.testbed`), by the name ``--model`` takes."""


def is_transformers_name(name: str) -> bool:
    """Whether ``--model NAME`` names a Hugging Face transformers model: the ``transformers:`` prefix always; an
    existing folder (a ``save_pretrained`` folder); a bare ``ORG/NAME`` that is neither an existing path nor a timm
    name (a transformers hub id)."""
    if name in SHIPPED_TRANSFORMERS or name.startswith(TRANSFORMERS_PREFIX) or Path(name).is_dir():
        return True
    if (hub.is_hub_name(name) or name.startswith((TORCHVISION_PREFIX, OPEN_CLIP_PREFIX)) or name.count("/") != 1
            or Path(name).exists()):
        return False
    import timm

    return not timm.is_model(name)


def transformers_source(name: str) -> str:
    """The folder or hub id that ``from_pretrained`` reads for ``--model NAME``."""
    shipped = SHIPPED_TRANSFORMERS.get(name)
    return str(shipped) if shipped is not None else name.removeprefix(TRANSFORMERS_PREFIX)


def _saved_config(path: Path) -> "dict | str":
    """The ``config.json`` at ``path`` as a dict, or why it is not a transformers configuration (words to follow its
    path); parsed once per version of the file (:func:`saved_kind` reads it before a command loads the model,
    :func:`load_transformers` again inside the load)."""
    status = path.stat()
    return _parsed_config(str(path.resolve()), status.st_mtime_ns, status.st_size)


@functools.lru_cache(maxsize=8)
def _parsed_config(path: str, modified_ns: int, size: int) -> "dict | str":
    """:func:`_saved_config` for one version of the file, told by its modification time and size."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return "is not UTF-8 text"
    except json.JSONDecodeError as error:
        return (f"is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno}); save the model again "
                "with save_pretrained")
    if not isinstance(config, dict) or "model_type" not in config:
        return "has no model_type, so it is not a transformers config.json; save the model again with save_pretrained"
    if not isinstance(config["model_type"], str):  # a list or a dict cannot even be looked up among the types
        return (f"has model_type {json.dumps(config['model_type'])}, which is not a name (\"vit\"); save the model "
                "again with save_pretrained")
    own_code = sorted(key for key in config.get("auto_map") or {} if key == "AutoConfig" or key.startswith("AutoModel"))
    if own_code:  # transformers would run the folder's Python files (trust_remote_code), or ask on the terminal
        return (f"builds the model from the folder's own Python code (auto_map: {', '.join(own_code)}), which "
                "vitroll does not run; vitroll explains the model types transformers ships (`vitroll models` lists "
                "them)")
    return config


def _check_config_file(name: str, path: Path) -> None:
    """Refuse a ``config.json`` that is not a transformers configuration, naming the file and what is wrong with it
    (transformers' own errors for it speak of the hub and the cache)."""
    config = _saved_config(path)
    if isinstance(config, str):
        raise ModelLoadError(f"{name}: {path} {config}")


def saved_kind(name: str) -> Optional[tuple[str, str]]:
    """What the ``config.json`` of the ``save_pretrained`` folder ``--model NAME`` says the model is, read before
    anything is built: ``("text", ARCHITECTURE)`` for a text model, ``("captioner", ARCHITECTURE)`` for a captioner,
    ``("image-text", ARCHITECTURE)`` for an image–text model (``CLIPModel``; not its vision tower alone); None for any
    other model, a hub id or a config that cannot be read (the loader refuses it, naming why)."""
    path = Path(transformers_source(name)) / "config.json"
    if not is_transformers_name(name) or not path.is_file():
        return None
    config = _saved_config(path)
    kind = config.get("model_type") if isinstance(config, dict) else None
    architectures = config.get("architectures") if isinstance(config, dict) else None
    architecture = str((architectures or [kind])[0]) if isinstance(architectures, (list, type(None))) else ""
    if kind in TEXT_MODEL_TYPES | CAPTIONER_MODEL_TYPES:
        return ("text" if kind in TEXT_MODEL_TYPES else "captioner"), architecture
    if architecture in IMAGE_TEXT_ARCHITECTURES:
        return "image-text", architecture
    return None


ENCODER_HEADS = ("ForPreTraining", "ForMaskedImageModeling", "ForSemanticSegmentation")
"""How the classes of vision models saved with a pre-training or segmentation head end: vitroll explains their
encoder, a backbone."""


def load_transformers(name: str, state: Optional[Mapping[str, torch.Tensor]], checkpoint: object) -> nn.Module:
    """Build a transformers model from a ``save_pretrained`` folder or a hub id (from the local cache when the hub
    cannot be reached), with ``state`` on top of its config when given; register its image processor, or for a text
    model its tokenizer."""
    try:
        import transformers
    except ImportError:
        raise ModelLoadError(f'{name}: Hugging Face transformers is not installed; pip install "vitroll[hf]"') from None
    source = transformers_source(name)
    folder = Path(source)
    local = folder.is_dir()
    if local and not (folder / "config.json").is_file():
        raise ModelLoadError(f"{name}: no config.json in {folder}; give a folder written by save_pretrained")
    if local:
        _check_config_file(name, folder / "config.json")
        # before transformers reads it: a type it no longer ships (EfficientFormer) would be told to upgrade
        _refuse_unsupported_type(name, _saved_config(folder / "config.json"))
    offline = not local and not hub.hub_reachable()
    try:
        with hub.cache_only(offline):
            config = transformers.AutoConfig.from_pretrained(source, local_files_only=offline or local,
                                                              trust_remote_code=False)
    except Exception as error:  # hub errors come in many types (OSError, HTTP errors, ValueError)
        if local:
            reason = " ".join(line.strip() for line in str(error).splitlines())
            raise ModelLoadError(f"{name}: {folder / 'config.json'} is not a configuration transformers can read "
                                 f"({reason or type(error).__name__})") from None
        # a cached config.json that transformers refuses is told as a local one is, not as missing from the cache
        if (cached := _cached_config(source)) is not None:
            _check_config_file(name, cached)
            _refuse_unsupported_type(name, _saved_config(cached))
        where = ("is not in the local cache and the hub cannot be reached" if offline
                 else f"could not be read ({type(error).__name__})")
        raise ModelLoadError(f"{name}: the transformers configuration {where}; run once with network access or "
                             "pass a save_pretrained folder") from None
    kind = config.model_type
    _refuse_unsupported_type(name, config.to_dict())
    _refuse_unread_text_head(name, config)
    if kind in TEXT_MODEL_TYPES and (why := soft_capping_refusal(config)) is not None:
        raise ModelLoadError(f"{name}: transformers model type {kind!r} is not supported with this config: {why}")
    _refuse_unread_captioner(name, config)
    if local and state is None and not any((folder / f).is_file() for f in TRANSFORMERS_WEIGHTS):
        _refuse_unnamed_weights(name, folder)
        raise ModelLoadError(f"{name}: {folder} has a config.json but no weights (model.safetensors or "
                             f"pytorch_model.bin); pass {argument('checkpoint', placeholder='FILE')} for a state "
                             "dict on top of the config")
    implementation = "eager" if kind in TEXT_EAGER_MODEL_TYPES else "sdpa"
    config._attn_implementation = implementation
    if kind == "vit_mae":  # saved for pre-training (0.75): vitroll explains the encoder on every patch, in grid order
        config.mask_ratio = 0.0
    auto = _auto_classes(transformers, config)
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # a weight-loading bar per model would drown vitroll's lines
    try:
        with hub.cache_only(offline):
            for index, cls in enumerate(auto):
                try:
                    if state is not None:
                        model = _from_state(transformers, cls, config, state, checkpoint)
                    else:
                        model = cls.from_pretrained(source, config=config, attn_implementation=implementation,
                                                    local_files_only=offline or local, trust_remote_code=False)
                    break
                except ValueError:  # this auto class has no mapping for the config (a backbone without a head)
                    if index == len(auto) - 1:
                        raise
    except ModelLoadError:
        raise
    except pickle.UnpicklingError:  # transformers reads pytorch_model.bin with weights_only=True
        weights = folder / "pytorch_model.bin" if local else "its pytorch_model.bin"
        trusted = (arguments({"checkpoint": str(weights), "trust_checkpoint": True}) if local else
                   f"{argument('checkpoint', placeholder='FILE')} (FILE: its pytorch_model.bin in the Hugging Face "
                   f"cache) with {argument('trust_checkpoint', True)}")
        raise ModelLoadError(f"{name}: {weights} holds Python objects besides tensors, and unpickling them can run "
                             "arbitrary code, so vitroll refused; if you trust its source, save the model again with "
                             f"save_pretrained (model.safetensors), or pass {trusted}") from None
    except Exception as error:
        raise ModelLoadError(f"{name}: cannot load the transformers model ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''})") from None
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    if type(model).__name__.endswith(ENCODER_HEADS):
        model = model.base_model
    if kind in TEXT_MODEL_TYPES:
        _use_tokenizer_of(model, source, offline=offline or local, needed_by="the text model")
    elif kind in CAPTIONER_MODEL_TYPES:
        _use_processor_of(model, source, offline=offline or local)
        _use_tokenizer_of(model, source, offline=offline or local, needed_by="the captioner")
    else:
        _use_processor_of(model, source, offline=offline or local)
        if len(auto) == 1 and auto[0] in _image_text_classes(transformers).values():
            _use_tokenizer_of(model, source, offline=offline or local)
    return model


_WEIGHTS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def _cached_config(repo: str) -> Optional[Path]:
    """The ``config.json`` of hub repository ``repo`` in the local Hugging Face cache, or None when it is not there
    (or ``repo`` is no valid hub id)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(repo, "config.json")
    except ValueError:  # huggingface_hub's HFValidationError: not a hub id
        return None
    return Path(cached) if isinstance(cached, str) else None


def _refuse_unsupported_type(name: str, config: Mapping[str, object]) -> None:
    """Refuse a configuration (``config.json`` as a dict) whose ``model_type`` no vitroll family reads, saying why
    and listing the supported types. A model around a backbone that one reads (Depth Anything's DINOv2) is told how to
    explain that backbone: from Python as ``model.backbone``, from the command line saved as a folder of its own."""
    kind = config["model_type"]
    if kind in TRANSFORMERS_MODEL_TYPES | TEXT_MODEL_TYPES | CAPTIONER_MODEL_TYPES:
        return
    backbone = config.get("backbone_config")
    backbone = backbone.get("model_type") if isinstance(backbone, Mapping) else None
    why = (refusal_of_model_type(kind) or TEXT_REFUSED_MODEL_TYPES.get(kind)
           or (_supported_backbone(backbone) if backbone in TRANSFORMERS_MODEL_TYPES else None)
           or "no vitroll family reads its attention")
    supported = ", ".join(sorted(TRANSFORMERS_MODEL_TYPES | TEXT_MODEL_TYPES | CAPTIONER_MODEL_TYPES))
    raise ModelLoadError(f"{name}: transformers model type {kind!r} is not supported: {why}; the supported model "
                         f"types are {supported}")


def _supported_backbone(kind: str) -> str:
    """Why a model around a backbone of model type ``kind``, which vitroll reads, is refused, and how to explain the
    backbone in the words of where the user is."""
    saved = ("save it with model.backbone.save_pretrained(FOLDER) and the image processor with "
             "processor.save_pretrained(FOLDER)")
    ways = (f"{saved} in Python, then pass {model_loading('FOLDER')}" if on_the_command_line() else
            f"load the model with transformers and explain model.backbone, or {saved}, then "
            f"{model_loading('FOLDER')}")
    return (f"vitroll reads the attention of its backbone (model type {kind!r}), not what the model makes of the "
            f"backbone's features; to explain the backbone, {ways}")


def _refuse_unnamed_weights(name: str, folder: Path) -> None:
    """Refuse a folder whose weights are in a file that transformers does not look for (renamed, or saved by hand),
    naming that file and how to read it."""
    files = sorted(path.name for path in folder.iterdir() if path.suffix in _WEIGHTS_SUFFIXES and path.is_file())
    if not files:
        return
    expected = "model.safetensors" if files[0].endswith(".safetensors") else "pytorch_model.bin"
    if re.search(r"-\d+-of-\d+\.", files[0]):  # shards are found through the index save_pretrained writes with them
        raise ModelLoadError(f"{name}: its weights are shards ({', '.join(files[:2])}{' …' if len(files) > 2 else ''}) "
                             f"without their index {expected}.index.json; copy it from where the model was saved")
    more = f" (and {', '.join(files[1:3])}{' …' if len(files) > 3 else ''})" if len(files) > 1 else ""
    raise ModelLoadError(f"{name}: its weights file {files[0]}{more} is not one transformers reads (model.safetensors "
                         f"or pytorch_model.bin); rename it {expected}, or pass "
                         f"{argument('checkpoint', str(folder / files[0]))}")


def _from_state(transformers: object, cls: type, config: object, state: Mapping[str, torch.Tensor],
                checkpoint: object) -> nn.Module:
    """``cls`` built from ``config`` with the weights of ``state``, loaded strictly. transformers renames the keys
    that save_pretrained writes in an older layout (``vit.encoder.layer.0.attention.attention.key`` for
    ``vit.layers.0.attention.k_proj``): loaded by name, a folder's own weights file did not match its model."""
    if not issubclass(cls, transformers.PreTrainedModel):  # a model class (CLIPModel) has no from_config
        with torch.device("meta"):  # an auto class loads no state dict alone: the class it builds, without weights
            cls = type(cls.from_config(config))
    verbosity = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()  # its load report: vitroll says what does not match in one line
    try:
        model, loaded = cls.from_pretrained(
            None, config=config, state_dict=dict(state), output_loading_info=True, ignore_mismatched_sizes=True,
            attn_implementation=config._attn_implementation)
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
    mismatch = mismatch_error(model, checkpoint, missing=sorted(loaded["missing_keys"]),
                              unexpected=sorted(loaded["unexpected_keys"]), shapes=sorted(loaded["mismatched_keys"]))
    if mismatch is not None:
        raise mismatch
    return model


def _refuse_unread_text_head(name: str, config: object) -> None:
    """Refuse, before any weights are read, a text model of a supported model type whose class vitroll has no
    family for (``GPT2ForSequenceClassification``, ``BertForTokenClassification``, ``ElectraForPreTraining``): built
    as the bare model it would lose its head without a word."""
    classes = TEXT_MODEL_CLASSES.get(config.model_type)
    if classes is None:  # not a text model type
        return
    unread = [architecture for architecture in config.architectures or () if architecture not in classes]
    if unread:
        raise ModelLoadError(f"{name}: {unread[0]} is not supported: of {config.model_type!r} models vitroll explains "
                             f"{', '.join(classes)} (to explain {classes[0]} alone, save model.base_model with "
                             "save_pretrained)")


def _refuse_unread_captioner(name: str, config: object) -> None:
    """Refuse, before any weights are read, a captioner whose image encoder or text decoder vitroll does not read (a
    TrOCR or RoBERTa decoder, a Swin encoder): built, it would fail on transformers' attention support, or be refused
    later for a wrong reason (a cross-attention it has said to be missing)."""
    if config.model_type not in CAPTIONER_MODEL_TYPES:
        return
    encoder, decoder = config.encoder.model_type, config.decoder.model_type
    if encoder not in TRANSFORMERS_MODEL_TYPES:
        why = refusal_of_model_type(encoder) or "no vitroll family reads its attention"
        raise ModelLoadError(f"{name}: the captioner's image encoder, model type {encoder!r}, is not supported: {why}")
    if decoder not in CAPTIONER_DECODER_TYPES:
        raise ModelLoadError(f"{name}: the captioner's text decoder, model type {decoder!r}, is not supported: "
                             f"vitroll reads the cross-attention of {' and '.join(sorted(CAPTIONER_DECODER_TYPES))} "
                             "decoders")


def _image_text_classes(transformers: object) -> dict[str, type]:
    """The image–text model class of each model type that has one."""
    return {"clip": transformers.CLIPModel, "siglip": transformers.SiglipModel,
            "metaclip_2": transformers.MetaClip2Model, "aimv2": transformers.Aimv2Model}


def _auto_classes(transformers: object, config: object) -> list[type]:
    """The classes to try building ``config``'s model with, in order (the first with a mapping for it wins). A text
    model is what its saved architecture says: a sequence classifier, a causal or masked language model, else the bare
    encoder or decoder; a CLIP, SigLIP, MetaCLIP 2 or AIMv2 model that is not an image classifier is the whole
    image–text model. A vision model saved without a classification head (a ``ViTModel``) is that backbone (built by
    AutoModel, else by the class its config names; a ``…Backbone``, a pre-training or segmentation model or a tower
    with its projection by its own class first), not a classifier with a random head; one whose config names no
    architecture is tried as a classifier first."""
    architectures = config.architectures or ()
    if config.model_type in CAPTIONER_MODEL_TYPES:
        return [transformers.VisionEncoderDecoderModel]
    if config.model_type in TEXT_MODEL_TYPES:
        if any(architecture.endswith("ForSequenceClassification") for architecture in architectures):
            return [transformers.AutoModelForSequenceClassification]
        if any(architecture.endswith(("LMHeadModel", "ForCausalLM")) for architecture in architectures):
            return [transformers.AutoModelForCausalLM]
        if any(architecture.endswith("ForMaskedLM") for architecture in architectures):
            return [transformers.AutoModelForMaskedLM]
        return [transformers.AutoModel]
    # DeiT's and LeViT's distilled classifiers end in ...ForImageClassificationWithTeacher
    classifier = any("ForImageClassification" in architecture for architecture in architectures)
    image_text = None if classifier else _image_text_classes(transformers).get(config.model_type)
    if image_text:
        return [image_text]
    if architectures and not classifier:
        # AutoModel has no mapping for some vision towers (MetaCLIP 2's): the class the config names builds them
        named = [getattr(transformers, architecture) for architecture in architectures
                 if isinstance(getattr(transformers, architecture, None), type)]
        # a saved …Backbone is built as itself: as its bare model (BeitModel) it gained a pooler of random weights
        backbones = [cls for cls in named if cls.__name__.endswith("Backbone")]
        # a pre-training or segmentation model (ViTMAEForPreTraining, BeitForSemanticSegmentation) is built whole and
        # its encoder kept: built as the encoder alone, transformers would report every head weight it leaves out
        with_heads = [cls for cls in named if cls.__name__.endswith(ENCODER_HEADS)]
        # so is a tower saved with its projection (CLIPVisionModelWithProjection): AutoModel builds the tower alone
        # and reports the projection's weights as unexpected on stderr
        projected = [cls for cls in named if cls.__name__.endswith("WithProjection")]
        return [*backbones, *with_heads, *projected, transformers.AutoModel, *named]
    return [transformers.AutoModelForImageClassification, transformers.AutoModel]


def _use_processor_of(model: nn.Module, source: str, *, offline: bool) -> None:
    """Register the image processor saved with the model, when there is one."""
    from transformers import AutoImageProcessor

    try:
        with hub.cache_only(offline):
            processor = AutoImageProcessor.from_pretrained(source, local_files_only=offline, trust_remote_code=False)
    except (OSError, ValueError, KeyError):  # no preprocessor_config.json: the model type's defaults apply
        return
    use_image_processor(model, processor)


def tokenizer_fingerprint(name: str) -> Optional[dict[str, str]]:
    """The SHA-256 of each tokenizer file of ``--model NAME``'s folder, by file name (a changed vocabulary tokenizes
    the same text otherwise); None for a hub id, whose files are the hub's."""
    folder = Path(transformers_source(name))
    if not folder.is_dir():
        return None
    return {file: file_sha256(folder / file) for file in _TOKENIZER_SETTINGS_FILES if (folder / file).is_file()}


def _use_tokenizer_of(model: nn.Module, source: str, *, offline: bool, needed_by: Optional[str] = None) -> None:
    """Attach the tokenizer saved with the model: it turns strings into tokens for every method. A text model or a
    captioner cannot do without one (``needed_by`` names it in the error); an image–text model can (its texts then
    come as ids, or strings are refused in one line that asks for a tokenizer)."""
    from transformers import AutoTokenizer

    folder = Path(source)
    try:
        if folder.is_dir() and not any((folder / name).is_file() for name in _TOKENIZER_FILES):
            raise FileNotFoundError(f"none of {', '.join(_TOKENIZER_FILES)}")
        with hub.cache_only(offline):
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=offline, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as error:
        if needed_by is None:
            return
        raise ModelLoadError(f"{source}: no tokenizer saved with {needed_by} ({type(error).__name__}); save it "
                             "beside the model with tokenizer.save_pretrained") from None
    use_tokenizer(model, tokenizer)

