"""Loading models: timm names, the Hugging Face hub (offline-aware), torchvision names (``torchvision:vit_b_16``),
the shipped testbed model, local weights (read by :mod:`vitroll.checkpoints`); their class names and where their
weights came from."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Optional
from urllib.parse import urlparse

import torch
from torch import nn

from vitroll.adapters.transformers import MODEL_TYPES as TRANSFORMERS_MODEL_TYPES, REFUSED_MODEL_TYPES
from vitroll.adapters.transformers_preprocessing import use_image_processor
from vitroll.adapters.tokenizers import use_tokenizer
from vitroll.adapters.transformers_text import MODEL_TYPES as TEXT_MODEL_TYPES
from vitroll.adapters.captioner import MODEL_TYPES as CAPTIONER_MODEL_TYPES
from vitroll.capture.families import family_of
from vitroll.checkpoints import file_sha256, load_state, read_checkpoint
from vitroll.errors import ModelLoadError
from vitroll.io.textfile import read_text_file
from vitroll.testbed.captioner_model import FOLDER as CAPTION_FOLDER
from vitroll.testbed.image_text_model import FOLDER as PAIRS_FOLDER
from vitroll.testbed.model import TESTBED_NAME, WEIGHTS, build_testbed_model, load_testbed_model
from vitroll.testbed.text_model import FOLDERS as TEXT_TESTBED_FOLDERS

TORCHVISION_PREFIX = "torchvision:"
OPEN_CLIP_PREFIX = "open_clip:"
TRANSFORMERS_PREFIX = "transformers:"
_TRANSFORMERS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                         "pytorch_model.bin.index.json")
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model")
"""A saved tokenizer has one of these (``tokenizer_config.json`` alone does not make one: from a config alone,
transformers 5 builds a tokenizer that knows no words)."""


SHIPPED_TRANSFORMERS = {
    "vitroll-clip-shapes": PAIRS_FOLDER,
    "vitroll-caption-shapes": CAPTION_FOLDER,
    "vitroll-text-keyword": TEXT_TESTBED_FOLDERS["keyword"],
    "vitroll-text-shortcut": TEXT_TESTBED_FOLDERS["shortcut"],
}
"""The transformers testbed models shipped with vitroll (:mod:`vitroll.testbed`), by the name ``--model`` takes."""


def _is_hub_name(name: str) -> bool:
    return name.startswith(("hf-hub:", "hf_hub:"))


def is_transformers_name(name: str) -> bool:
    """Whether ``--model NAME`` names a Hugging Face transformers model: the ``transformers:`` prefix always; an
    existing folder (a ``save_pretrained`` folder); a bare ``ORG/NAME`` that is neither an existing path nor a timm
    name (a transformers hub id)."""
    if name in SHIPPED_TRANSFORMERS or name.startswith(TRANSFORMERS_PREFIX) or Path(name).is_dir():
        return True
    if (_is_hub_name(name) or name.startswith((TORCHVISION_PREFIX, OPEN_CLIP_PREFIX)) or name.count("/") != 1
            or Path(name).exists()):
        return False
    import timm

    return not timm.is_model(name)


def _transformers_source(name: str) -> str:
    """The folder or hub id that ``from_pretrained`` reads for ``--model NAME``."""
    shipped = SHIPPED_TRANSFORMERS.get(name)
    return str(shipped) if shipped is not None else name.removeprefix(TRANSFORMERS_PREFIX)


def _check_config_file(name: str, path: Path) -> None:
    """Refuse a ``config.json`` that is not a transformers configuration, naming the file and what is wrong with it
    (transformers' own errors for it speak of the hub and the cache)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ModelLoadError(f"{name}: {path} is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ModelLoadError(f"{name}: {path} is not valid JSON ({error.msg} at line {error.lineno}, column "
                             f"{error.colno}); save the model again with save_pretrained") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{name}: {path} has no model_type, so it is not a transformers config.json; save the "
                             "model again with save_pretrained")


def _load_transformers(name: str, state: Optional[Mapping[str, torch.Tensor]], checkpoint: object) -> nn.Module:
    """Build a transformers model from a ``save_pretrained`` folder or a hub id (from the local cache when the hub
    cannot be reached), with ``state`` on top of its config when given; register its image processor, or for a text
    model its tokenizer."""
    try:
        import transformers
    except ImportError:
        raise ModelLoadError(f'{name}: Hugging Face transformers is not installed; pip install "vitroll[hf]"') from None
    source = _transformers_source(name)
    folder = Path(source)
    local = folder.is_dir()
    if local and not (folder / "config.json").is_file():
        raise ModelLoadError(f"{name}: no config.json in {folder}; give a folder written by save_pretrained")
    if local:
        _check_config_file(name, folder / "config.json")
    offline = not local and not hub_reachable()
    try:
        with _hub_offline(offline):
            config = transformers.AutoConfig.from_pretrained(source, local_files_only=offline or local)
    except Exception as error:  # hub errors come in many types (OSError, HTTP errors, ValueError)
        if local:
            reason = " ".join(line.strip() for line in str(error).splitlines())
            raise ModelLoadError(f"{name}: {folder / 'config.json'} is not a configuration transformers can read "
                                 f"({reason or type(error).__name__})") from None
        where = ("is not in the local cache and the hub cannot be reached" if offline
                 else f"could not be read ({type(error).__name__})")
        raise ModelLoadError(f"{name}: the transformers configuration {where}; run once with network access or "
                             "pass a save_pretrained folder") from None
    kind = config.model_type
    if kind not in TRANSFORMERS_MODEL_TYPES | TEXT_MODEL_TYPES | CAPTIONER_MODEL_TYPES:
        why = REFUSED_MODEL_TYPES.get(kind, "no vitroll family reads its attention")
        raise ModelLoadError(f"{name}: transformers model type {kind!r} is not supported: {why}")
    if local and state is None and not any((folder / f).is_file() for f in _TRANSFORMERS_WEIGHTS):
        raise ModelLoadError(f"{name}: {folder} has a config.json but no weights (model.safetensors or "
                             "pytorch_model.bin); pass --checkpoint FILE for a state dict on top of the config")
    config._attn_implementation = "sdpa"
    auto = _auto_classes(transformers, config)
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # a weight-loading bar per model would drown vitroll's lines
    try:
        with _hub_offline(offline):
            for index, cls in enumerate(auto):
                try:
                    if state is not None:
                        model = cls.from_config(config)
                        load_state(model, state, checkpoint)
                    else:
                        model = cls.from_pretrained(source, config=config, attn_implementation="sdpa",
                                                    local_files_only=offline or local)
                    break
                except ValueError:  # this auto class has no mapping for the config (a backbone without a head)
                    if index == len(auto) - 1:
                        raise
    except ModelLoadError:
        raise
    except Exception as error:
        raise ModelLoadError(f"{name}: cannot load the transformers model ({type(error).__name__}: "
                             f"{str(error).splitlines()[0] if str(error) else ''})") from None
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
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


def _image_text_classes(transformers: object) -> dict[str, type]:
    """The image–text model class of each model type that has one."""
    return {"clip": transformers.CLIPModel, "siglip": transformers.SiglipModel}


def _auto_classes(transformers: object, config: object) -> list[type]:
    """The classes to try building ``config``'s model with, in order (the first with a mapping for it wins). A text
    model is what its saved architecture says: a sequence classifier, a causal language model, else the bare encoder
    or decoder; a CLIP or SigLIP model that is not an image classifier is the whole image–text model. A vision model
    saved without a classification head (a ``ViTModel``) is that backbone, not a classifier with a random head; one
    whose config names no architecture is tried as a classifier first."""
    architectures = config.architectures or ()
    if config.model_type in CAPTIONER_MODEL_TYPES:
        return [transformers.VisionEncoderDecoderModel]
    if config.model_type in TEXT_MODEL_TYPES:
        if any(architecture.endswith("ForSequenceClassification") for architecture in architectures):
            return [transformers.AutoModelForSequenceClassification]
        if any(architecture.endswith("LMHeadModel") for architecture in architectures):
            return [transformers.AutoModelForCausalLM]
        return [transformers.AutoModel]
    classifier = any(architecture.endswith("ForImageClassification") for architecture in architectures)
    image_text = None if classifier else _image_text_classes(transformers).get(config.model_type)
    if image_text:
        return [image_text]
    if architectures and not classifier:
        return [transformers.AutoModel]
    return [transformers.AutoModelForImageClassification, transformers.AutoModel]


def _use_processor_of(model: nn.Module, source: str, *, offline: bool) -> None:
    """Register the image processor saved with the model, when there is one."""
    from transformers import AutoImageProcessor

    try:
        with _hub_offline(offline):
            processor = AutoImageProcessor.from_pretrained(source, local_files_only=offline)
    except (OSError, ValueError, KeyError):  # no preprocessor_config.json: the model type's defaults apply
        return
    use_image_processor(model, processor)


def _use_tokenizer_of(model: nn.Module, source: str, *, offline: bool, needed_by: Optional[str] = None) -> None:
    """Attach the tokenizer saved with the model: it turns strings into tokens for every method. A text model or a
    captioner cannot do without one (``needed_by`` names it in the error); an image–text model can (its texts then
    come as ids, or strings are refused in one line that asks for a tokenizer)."""
    from transformers import AutoTokenizer

    folder = Path(source)
    try:
        if folder.is_dir() and not any((folder / name).is_file() for name in _TOKENIZER_FILES):
            raise FileNotFoundError(f"none of {', '.join(_TOKENIZER_FILES)}")
        with _hub_offline(offline):
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=offline)
    except (OSError, ValueError, KeyError, TypeError) as error:
        if needed_by is None:
            return
        raise ModelLoadError(f"{source}: no tokenizer saved with {needed_by} ({type(error).__name__}); save it "
                             "beside the model with tokenizer.save_pretrained") from None
    use_tokenizer(model, tokenizer)


def _build_open_clip(name: str, *, pretrained: bool) -> nn.Module:
    """``open_clip.create_model(ARCH)`` for ``open_clip:ARCH`` (random weights; ``--checkpoint`` gives them)."""
    architecture = name.removeprefix(OPEN_CLIP_PREFIX)
    try:
        import open_clip
    except ImportError:
        raise ModelLoadError(f'{name}: open_clip is not installed; pip install "vitroll[clip]"') from None
    if pretrained:
        raise ModelLoadError(f"{name}: open_clip's pretrained weights are downloaded by tag; pass the weights as "
                             "--checkpoint FILE (open_clip_model.safetensors)")
    if architecture not in open_clip.list_models():
        close = difflib.get_close_matches(architecture, open_clip.list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ModelLoadError(f"unknown open_clip model {architecture!r}{hint}")
    return open_clip.create_model(architecture, pretrained=None)


def check_model_name(name: str) -> None:
    """Raise :class:`ModelLoadError` with close matches when ``name`` is not a timm model."""
    import timm

    if _is_hub_name(name) or timm.is_model(name):
        return
    close = difflib.get_close_matches(name, timm.list_models(), n=3, cutoff=0.6)
    hint = (f"; did you mean {', '.join(close)}?" if close else
            "; `vitroll models PATTERN` lists the timm names; a Hugging Face model is a save_pretrained folder, a hub "
            f"id ORG/NAME in the local cache, or transformers:{name} for a hub id without an organisation")
    raise ModelLoadError(f"unknown model name {name!r}{hint}")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub endpoint accepts a TCP connection within ``timeout`` seconds."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = urlparse(constants.ENDPOINT)
    return _reachable(endpoint.hostname, endpoint.port or 443, timeout)


def _reachable(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds."""
    answers: list[bool] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                answers.append(True)
        except OSError:
            pass

    # the name lookup inside create_connection ignores its timeout, so the wait is bounded here instead
    probe = threading.Thread(target=connect, name="vitroll-hub-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(answers)


@contextlib.contextmanager
def _hub_offline(offline: bool) -> Iterator[None]:
    """Make huggingface_hub serve from its cache only (no retries against an unreachable network)."""
    from huggingface_hub import constants

    previous = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = previous or offline
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = previous


_HUB_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_model.safetensors", "open_clip_pytorch_model.bin")


def pretrained_maybe_cached(name: str) -> bool:
    """Whether timm's pretrained weights for ``name`` may be in a local cache (hub cache or torch hub dir).

    Checked from the pretrained config alone, without building the model, so that an offline run without
    cached weights fails before spending seconds on random initialisation. ``True`` when unsure.
    """
    from huggingface_hub import try_to_load_from_cache
    from timm.models import get_pretrained_cfg

    cfg = None if _is_hub_name(name) else get_pretrained_cfg(name)
    if cfg is None or cfg.file or cfg.state_dict or cfg.source == "local-dir":
        return True
    if cfg.hf_hub_id:
        repo, _, revision = cfg.hf_hub_id.partition("@")
        files = (cfg.hf_hub_filename,) if cfg.hf_hub_filename else _HUB_WEIGHT_FILES
        if any(isinstance(try_to_load_from_cache(repo, f, revision=revision or None), str) for f in files):
            return True
    if cfg.url:
        return (Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(cfg.url).path).name).is_file()
    return False


def _create(name: str, *, pretrained: bool, **kwargs: object) -> nn.Module:
    """Build ``name`` with timm; whatever must come from the hub comes from the local cache when it is unreachable.

    A ``hf-hub:`` name needs the hub even without weights (its ``config.json``), so it always takes the
    offline-aware path; every failure there is one :class:`ModelLoadError` line within seconds.
    """
    import timm

    if not pretrained and not _is_hub_name(name):
        return timm.create_model(name, pretrained=False, **kwargs)
    offline = not hub_reachable()
    needed = "pretrained weights" if pretrained else "configuration"
    uncached = f"{'are' if pretrained else 'is'} not in the local cache and the hub cannot be reached"
    advice = ("run once with network access, or pass a timm model name with --checkpoint FILE" if _is_hub_name(name)
              else "pass --checkpoint FILE (.safetensors/.pth) or run once with network access")
    if offline and not pretrained_maybe_cached(name):  # fail before spending seconds on initialisation
        raise ModelLoadError(f"{name}: {needed} {uncached}; {advice}")
    try:
        with _hub_offline(offline):
            return timm.create_model(name, pretrained=pretrained, **kwargs)
    except Exception as error:  # hub errors come in many types (LocalEntryNotFoundError, OSError, HTTP errors)
        where = uncached if offline else f"could not be fetched ({type(error).__name__})"
        raise ModelLoadError(f"{name}: {needed} {where}; {advice}") from None


def _num_classes_of(state: Mapping[str, torch.Tensor]) -> Optional[int]:
    head = state.get("head.weight")
    return int(head.shape[0]) if head is not None and head.ndim == 2 else None


def _build_torchvision(name: str, *, pretrained: bool, state: Optional[Mapping[str, torch.Tensor]],
                       num_classes: Optional[int], **model_kwargs: object) -> nn.Module:
    """Build ``torchvision:ARCH`` with torchvision (``img_size`` becomes its square ``image_size``)."""
    import torchvision

    architecture = name.removeprefix(TORCHVISION_PREFIX)
    known = torchvision.models.list_models(module=torchvision.models)
    if architecture not in known:
        close = difflib.get_close_matches(architecture, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(TORCHVISION_PREFIX + c for c in close)}?" if close else ""
        raise ModelLoadError(f"{name}: not a torchvision classification model{hint}")
    config: dict[str, object] = {}
    if model_kwargs.pop("dynamic_img_size", False):
        raise ModelLoadError(f"{name}: torchvision's ViT takes one fixed square image size; use --img-size N")
    size = model_kwargs.pop("img_size", None)
    if size is not None:
        sides = set(size) if isinstance(size, tuple) else {size}
        if len(sides) != 1:
            raise ModelLoadError(f"{name}: torchvision's ViT takes square inputs only; use --img-size N")
        config["image_size"] = sides.pop()
    if model_kwargs:
        raise ModelLoadError(f"{name}: options {', '.join(model_kwargs)} do not apply to torchvision models")
    head = None if state is None else state.get("heads.head.weight")
    if num_classes is None and head is not None:
        num_classes = int(head.shape[0])
    if num_classes is not None:
        config["num_classes"] = num_classes
    if pretrained:
        url = urlparse(torchvision.models.get_model_weights(architecture).DEFAULT.url)
        cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(url.path).name
        if not cached.is_file() and not _reachable(url.hostname, url.port or 443, timeout=3.0):
            raise ModelLoadError(f"{name}: torchvision's pretrained weights are not in {cached.parent} and "
                                 f"{url.hostname} cannot be reached; pass --checkpoint FILE or run once with network "
                                 "access")
    try:
        return torchvision.models.get_model(architecture, weights="DEFAULT" if pretrained else None, **config)
    except OSError as error:  # urllib's URLError included: the download started but failed
        raise ModelLoadError(f"{name}: cannot download torchvision's pretrained weights ({error})") from None
    except (RuntimeError, TypeError, ValueError, AssertionError) as error:
        raise ModelLoadError(f"{name}: cannot build model ({error})") from None


def load_model(
    name: str,
    *,
    pretrained: bool = False,
    checkpoint: "str | os.PathLike[str] | None" = None,
    trust_checkpoint: bool = False,
    num_classes: Optional[int] = None,
    device: "str | torch.device" = "cpu",
    **model_kwargs: object,
) -> nn.Module:
    """Create a timm model, load its weights and return it in eval mode on ``device``.

    Parameters
    ----------
    name : str
        A timm model name, ``hf-hub:org/name`` (timm weights on the hub), a transformers model
        (see :func:`is_transformers_name`; CLIP and SigLIP folders load the image–text model with its tokenizer),
        ``open_clip:ARCH`` (``open_clip:ViT-B-32``, random weights unless ``checkpoint``), ``torchvision:ARCH``
        (``torchvision:vit_b_16``; ``img_size`` sets its square ``image_size``), or ``vitroll-shapes`` — the small
        testbed ViT shipped with vitroll (trained on :mod:`vitroll.testbed.shapes`; ``checkpoint`` replaces its
        weights), or one of the transformers testbed models shipped with it (:data:`SHIPPED_TRANSFORMERS`:
        ``vitroll-clip-shapes``, ``vitroll-text-keyword``, ``vitroll-text-shortcut``).
    pretrained : bool
        Load timm's pretrained weights (from the local cache when the hub cannot be reached; fails in
        seconds with a clear message when they are not cached).
    checkpoint : path, optional
        Local weights (``.safetensors``, ``.pth``, ``.pt``, ``.bin``). ``num_classes`` is taken from the
        checkpoint's ``head.weight`` when not given.
    trust_checkpoint : bool
        Unpickle a torch checkpoint that holds Python objects besides tensors (see :func:`vitroll.checkpoints.read_checkpoint`);
        only for files from a source you trust, since unpickling can run arbitrary code.
    model_kwargs
        Passed to ``timm.create_model`` (``img_size``, ``dynamic_img_size``, …).
    """
    if name == TESTBED_NAME:
        if checkpoint is None:
            return load_testbed_model(device)
        model = build_testbed_model()
        load_state(model, read_checkpoint(checkpoint, trust=trust_checkpoint), checkpoint)
        return model.eval().to(device)
    state = read_checkpoint(checkpoint, trust=trust_checkpoint) if checkpoint is not None else None
    if is_transformers_name(name):
        if pretrained or num_classes is not None or model_kwargs:
            raise ModelLoadError(f"{name}: a transformers model takes its weights and size from its folder or hub id; "
                                 "--pretrained, --num-classes and the timm size options do not apply")
        return _load_transformers(name, state, checkpoint).eval().to(device)
    if name.startswith(OPEN_CLIP_PREFIX):
        if num_classes is not None or model_kwargs:
            raise ModelLoadError(f"{name}: an open_clip model takes its size from its architecture; --num-classes "
                                 "and the timm size options do not apply")
        model = _build_open_clip(name, pretrained=pretrained)
        if state is not None:
            load_state(model, state, checkpoint)
        return model.eval().to(device)
    if name.startswith(TORCHVISION_PREFIX):
        model = _build_torchvision(name, pretrained=pretrained and state is None, state=state,
                                   num_classes=num_classes, **model_kwargs)
        if state is not None:
            load_state(model, state, checkpoint)
        return model.eval().to(device)
    check_model_name(name)
    if num_classes is None and state is not None:
        num_classes = _num_classes_of(state)
    if num_classes is not None:
        model_kwargs["num_classes"] = num_classes
    try:
        model = _create(name, pretrained=pretrained and state is None, **model_kwargs)
    except (RuntimeError, TypeError, ValueError, AssertionError) as error:
        raise ModelLoadError(f"{name}: cannot build model ({error})") from None
    if state is not None:
        load_state(model, state, checkpoint)
    return model.eval().to(device)


def class_names(model: nn.Module, names_file: "str | os.PathLike[str] | None" = None) -> Optional[list[str]]:
    """Human-readable class names: from ``names_file`` (one per line, or a JSON list / {index: name}; at least
    one name per class of the model), else what the model's family reads from the model
    (:attr:`~vitroll.capture.ModelFamily.class_names`: timm's label names or ImageNet's, torchvision's weights'
    categories).

    Raises :class:`~vitroll.errors.UnsupportedModelError` for a model of no registered family."""
    if names_file is not None:
        path = Path(names_file)
        text = read_text_file(path, "class names")
        if path.suffix == ".json":
            try:
                data = json.loads(text)
                names = [data[k] for k in sorted(data, key=int)] if isinstance(data, dict) else [str(v) for v in data]
            except (ValueError, TypeError) as error:
                raise ModelLoadError(f"{path}: expected a JSON list of names or {{index: name}} ({error})") from None
        else:
            names = [line.strip() for line in text.splitlines() if line.strip()]
        classes = getattr(model, "num_classes", None)
        if classes and len(names) < classes:
            raise ModelLoadError(f"{path}: {len(names)} class names for a model with {classes} classes; "
                                 "give one name per class, in the order of the model's outputs")
        return names
    names_of = family_of(model).class_names
    return names_of(model) if names_of is not None else None


def has_random_weights(name: str, *, pretrained: bool, checkpoint: "str | os.PathLike[str] | None") -> bool:
    """Whether :func:`load_model` with these arguments leaves the weights at their random initialisation."""
    return not pretrained and checkpoint is None and name != TESTBED_NAME and not is_transformers_name(name)


@dataclass(frozen=True)
class ModelProvenance:
    """What produced a map: the model's name and where its weights came from (for reports)."""

    model: str
    """The name given to :func:`load_model` (timm name, ``hf-hub:…`` or ``vitroll-shapes``)."""
    weights: str
    """``random``, ``timm-pretrained``, ``torchvision-pretrained``, ``transformers-pretrained``, ``checkpoint``,
    ``testbed`` or ``not stated``."""
    description: str
    """One line for people: which pretrained tag, which checkpoint file, or the random-weights warning."""
    sha256: Optional[str] = None
    """SHA-256 of the weights file (checkpoint or shipped testbed weights), when there is one."""

    @property
    def random(self) -> bool:
        return self.weights == "random"

    @classmethod
    def of(cls, name: str, *, pretrained: bool, checkpoint: "str | os.PathLike[str] | None",
           model: Optional[nn.Module] = None) -> "ModelProvenance":
        """The provenance of ``load_model(name, pretrained=…, checkpoint=…)``; ``model`` names timm's pretrained tag."""
        if checkpoint is not None:
            return cls(name, "checkpoint", f"checkpoint file {Path(checkpoint).name}", file_sha256(checkpoint))
        if name == TESTBED_NAME:
            return cls(name, "testbed", f"the testbed weights shipped with vitroll ({WEIGHTS.name})", file_sha256(WEIGHTS))
        if is_transformers_name(name):
            return cls._of_transformers(name)
        if pretrained and name.startswith(TORCHVISION_PREFIX):
            return cls(name, "torchvision-pretrained", "torchvision pretrained weights (DEFAULT)")
        if pretrained:
            cfg = dict(getattr(model, "pretrained_cfg", None) or {})
            source = cfg.get("hf_hub_id") or cfg.get("url") or cfg.get("tag") or "timm's default tag"
            return cls(name, "timm-pretrained", f"timm pretrained weights ({source})")
        return cls(name, "random", "RANDOM weights (no --pretrained or --checkpoint): the maps mean nothing")

    @classmethod
    def _of_transformers(cls, name: str) -> "ModelProvenance":
        """A ``save_pretrained`` folder (SHA-256 of its weights file) or a hub id."""
        folder = Path(_transformers_source(name))
        if name in SHIPPED_TRANSFORMERS:
            weights = folder / "model.safetensors"
            return cls(name, "testbed", f"the testbed weights shipped with vitroll ({folder.name}/{weights.name})",
                       file_sha256(weights))
        if folder.is_dir():
            weights = next((folder / f for f in _TRANSFORMERS_WEIGHTS if (folder / f).is_file()), None)
            return cls(name, "transformers-pretrained", f"transformers weights in {folder}",
                       file_sha256(weights) if weights is not None else None)
        return cls(name, "transformers-pretrained", f"transformers weights from the hub ({folder})")

    @classmethod
    def unstated(cls, model: nn.Module) -> "ModelProvenance":
        """For callers that did not say where the weights came from: the architecture's name only."""
        architecture = (getattr(model, "pretrained_cfg", None) or {}).get("architecture") or type(model).__name__
        return cls(str(architecture), "not stated", "not stated by the caller")
