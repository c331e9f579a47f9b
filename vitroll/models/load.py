"""One call for every model source: timm names, ``hf-hub:``, ``torchvision:``, ``open_clip:``, transformers folders
and hub ids, and the shipped testbed models, with local weights read by :mod:`vitroll.checkpoints`."""

from __future__ import annotations

import math
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Optional

import torch
from torch import nn

from vitroll.checkpoints import load_state, model_part, read_checkpoint
from vitroll.errors import (ForeignWeightsError, ModelLoadError, UnsupportedModelError, options_by_keyword,
                            path_of)
from vitroll.preprocess import Preprocessing
from vitroll.models.hub import cache_only, hub_reachable, is_hub_name
from vitroll.models.open_clip import OPEN_CLIP_PREFIX, build_open_clip, check_open_clip_name
from vitroll.models.timm import check_model_name, create_timm_model, num_classes_of, refuse_unexplained_name
from vitroll.models.torchvision import TORCHVISION_PREFIX, build_torchvision
from vitroll.models.transformers import TRANSFORMERS_PREFIX, is_transformers_name, load_transformers
from vitroll.testbed.model import TESTBED_NAME, build_testbed_model, load_testbed_model
from vitroll.wording import argument, arguments, model_loading, on_the_command_line


def _refuse_names_that_are_no_model(name: str) -> None:
    """Refuse a ``--model`` that names no model: a blank name, a timm repository written as a transformers hub id,
    a path that is a file (weights are ``--checkpoint``) or does not exist (without this a missing folder was taken
    for a hub id or a timm name)."""
    if not name.strip():
        raise ModelLoadError("the model name is empty; give a timm name, a save_pretrained folder, a hub id, "
                             "torchvision:ARCH or open_clip:ARCH")
    if name.startswith("timm/") and not Path(name).exists():
        raise ModelLoadError(f"{name}: a timm repository on the Hugging Face hub, which transformers cannot load; "
                             f"pass it as hf-hub:{name}")
    if name.startswith((TRANSFORMERS_PREFIX, TORCHVISION_PREFIX, OPEN_CLIP_PREFIX)) or is_hub_name(name):
        return
    path = Path(name)
    if path.is_file():
        if (path.parent / "config.json").is_file():
            raise ModelLoadError(f"{name}: a file of a save_pretrained folder; the folder is the model: pass "
                                 f"{model_loading(str(path.parent))}")
        raise ModelLoadError(f"{name}: a file, not a model; {model_loading('')} takes a model name or a "
                             "save_pretrained folder (weights go with their architecture: "
                             f"{model_loading('ARCH', checkpoint=name)})")
    looks_like_a_path = (path.is_absolute() or name.startswith((".", "~")) or name.endswith(("/", os.sep))
                         or name.count("/") > 1)
    if looks_like_a_path and not path.exists():
        raise ModelLoadError(f"{name}: no such model folder")


def _refuse_build_arguments(name: str, why: str, given: Mapping[str, object]) -> None:
    """Refuse the build arguments ``given`` (name → value) to a model ``name`` that they would not change, for the
    reason ``why``, naming each as the user gave it."""
    if given:
        verb = "does" if len(given) == 1 else "do"
        raise ModelLoadError(f"{name}: {why}; {arguments(dict(given))} {verb} not apply")


def _trained_side(model: nn.Module, state: Mapping[str, torch.Tensor]) -> Optional[int]:
    """The square input side a checkpoint's position embedding was trained for, when only that size differs from the
    model's (timm's ``pos_embed``, torchvision's ``encoder.pos_embedding``: (1, prefix + grid², D)); else None."""
    own = model.state_dict()
    if set(state) != set(own):  # another architecture: its input size is not the question
        return None
    if "pos_embed" in own and hasattr(model, "patch_embed"):  # timm
        key, patch = "pos_embed", model.patch_embed.patch_size[0]
        prefix = 0 if getattr(model, "no_embed_class", False) else getattr(model, "num_prefix_tokens", 0)
    elif "encoder.pos_embedding" in own and hasattr(model, "patch_size"):  # torchvision: one class token
        key, patch, prefix = "encoder.pos_embedding", model.patch_size, 1
    else:
        return None
    saved, built = state[key].shape, own[key].shape
    if len(saved) != 3 or saved[2] != built[2] or saved[1] == built[1]:  # another width is not another input size
        return None
    return _grid_side(saved[1], prefix, patch)


def _grid_side(positions: int, prefix: int, patch: int) -> Optional[int]:
    """The square input side whose grid of ``patch``-pixel patches fills ``positions`` position-embedding rows after
    ``prefix`` prefix tokens; None when the rest is no square grid."""
    grid = math.isqrt(max(positions - prefix, 0))
    return grid * patch if grid > 0 and grid * grid == positions - prefix else None


_BLOCK_KEY = re.compile(r"blocks\.(\d+)\.")


def _vit_arguments(model: nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """The timm ViT settings that the tensors of ``state`` tell for sure: ``depth`` (the highest ``blocks.N``, plus
    one), ``embed_dim`` and ``patch_size`` (the patch embedding's output channels and square kernel), ``reg_tokens``
    (the register tokens' count, 0 without them, told only for a model that takes registers), ``img_size`` (the
    square side whose patch grid the position embedding holds, after its prefix tokens unless ``model`` keeps them out
    of it) and ``num_classes`` (the rows of ``head.weight``)."""
    told: dict[str, int] = {}
    blocks = [int(match.group(1)) for key in state if (match := _BLOCK_KEY.match(key))]
    if blocks:
        told["depth"] = max(blocks) + 1
    projection = state.get("patch_embed.proj.weight")
    if projection is not None and projection.ndim == 4:
        told["embed_dim"] = int(projection.shape[0])
        if projection.shape[2] == projection.shape[3]:
            told["patch_size"] = int(projection.shape[2])
    registers = state.get("reg_token")
    register_count = int(registers.shape[1]) if registers is not None and registers.ndim == 3 else 0
    if hasattr(model, "num_reg_tokens"):
        told["reg_tokens"] = register_count
    positions = state.get("pos_embed")
    if positions is not None and positions.ndim == 3 and "patch_size" in told:
        prefix = 0 if getattr(model, "no_embed_class", False) else (
            ("cls_token" in state) + ("dist_token" in state) + register_count)
        side = _grid_side(positions.shape[1], prefix, told["patch_size"])
        if side is not None:
            told["img_size"] = side
    head = state.get("head.weight")
    if head is not None and head.ndim == 2:
        told["num_classes"] = int(head.shape[0])
    return told


def _other_vit_arguments(model: nn.Module, state: Mapping[str, torch.Tensor]) -> str:
    """Every setting that differs between the timm ViT-like ``model`` and the one ``state`` was saved from, with the
    options that build the latter ("" when nothing sure differs, when only the input size differs (told by
    :func:`_trained_side`), or for another kind of model)."""
    if not (hasattr(model, "blocks") and hasattr(model, "patch_embed")):
        return ""
    saved, built = _vit_arguments(model, state), _vit_arguments(model, model.state_dict())
    differ = [key for key in saved if key in built and saved[key] != built[key]]
    if not differ or differ == ["img_size"]:
        return ""
    options = arguments({key: saved[key] for key in differ})
    # the weights have the same shapes for any head count, and a wrong one gives wrong attention maps
    heads = (f" and the {argument('num_heads', placeholder='H')} it was trained with (its weights do not tell H)"
             if "embed_dim" in differ else "")
    return (f"it was saved from a model with {', '.join(f'{key}={saved[key]}' for key in differ)} (this one has "
            f"{', '.join(f'{key}={built[key]}' for key in differ)}): build that one with {options}{heads}")


def _load_weights(model: nn.Module, state: Mapping[str, torch.Tensor], checkpoint: object, *,
                  other_architecture: str = "") -> None:
    """:func:`load_state`, with the ``img_size`` to build the model with when the checkpoint's position embedding
    was trained for another input size (the commonest mismatch: fine-tuned at 384, or small), else with
    ``other_architecture`` (what to do with weights of another architecture) appended."""
    state = model_part(model, state)  # what is told about the saved model is told from the model's own weights
    try:
        load_state(model, state, checkpoint)
    except ForeignWeightsError:  # not this model's weights: no argument of it makes them fit
        raise
    except ModelLoadError as error:
        other_arguments = _other_vit_arguments(model, state)
        if other_arguments:
            raise ModelLoadError(f"{error}; {other_arguments}") from None
        side = _trained_side(model, state)
        if side is None:
            if other_architecture:
                raise ModelLoadError(f"{error}; {other_architecture}") from None
            raise
        raise ModelLoadError(f"{error}; its position embedding is for {side}×{side} inputs: build the model for "
                             f"them with {argument('img_size', side)}") from None


def _refuse_ignored_img_size(name: str, model: nn.Module, img_size: object) -> None:
    """Refuse an ``img_size`` that the built model ignored (timm's NaFlexViT sizes its position embedding by its
    config and takes any size of whole patches): without this the images were preprocessed at the pretrained size
    while the user asked for another."""
    wanted = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    try:
        built = Preprocessing.from_model(model).input_size
    except UnsupportedModelError:  # refused later, naming why
        return
    if tuple(built) != wanted:
        preprocessing = "" if on_the_command_line() else "Preprocessing's "
        raise ModelLoadError(f"{name}: img_size {wanted[0]}×{wanted[1]} does not change the model, which still "
                             f"preprocesses at {built[0]}×{built[1]} (it takes any size of whole patches); give the "
                             f"size to preprocess at with {preprocessing}{argument('input_size', wanted)} instead of "
                             f"{argument('img_size')}")


RANDOM_INITIALISATION_SEED = 0
"""The seed of torch's CPU generator while a model is built: its random initialisation is the same on every build."""


@contextmanager
def _seeded_initialisation() -> Iterator[None]:
    """Build a model from a fixed seed, leaving the caller's random state as it was.

    A model left at its random weights (no ``pretrained``, no checkpoint) was another model on every build: a
    resumed ``annotate`` mixed the maps of two under one settings hash, and ``compare`` of such a model with itself
    agreed at 0.09.
    """
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(RANDOM_INITIALISATION_SEED)
        yield


def _read_if_given(checkpoint: "str | os.PathLike[str] | None", trust: bool) -> Optional[Mapping[str, torch.Tensor]]:
    """The checkpoint's state dict, or None without one; read only once the name and options are accepted, since a
    large file takes seconds and gigabytes to read."""
    return read_checkpoint(checkpoint, trust=trust) if checkpoint is not None else None


@options_by_keyword
def load_model(
    name: "str | os.PathLike[str]",
    *,
    pretrained: bool = False,
    checkpoint: "str | os.PathLike[str] | None" = None,
    trust_checkpoint: bool = False,
    num_classes: Optional[int] = None,
    device: "str | torch.device" = "cpu",
    **model_kwargs: object,
) -> nn.Module:
    """Build the model ``name`` names, load its weights and return it in eval mode on ``device``.

    Parameters
    ----------
    name : str or path
        A timm model name, ``hf-hub:org/name`` (timm weights on the hub), a transformers model
        (see :func:`is_transformers_name`; CLIP and SigLIP folders load the image–text model with its tokenizer),
        ``open_clip:ARCH`` (``open_clip:ViT-B-32``, random weights unless ``checkpoint``), ``torchvision:ARCH``
        (``torchvision:vit_b_16``; ``img_size`` sets its square ``image_size``), or ``vitroll-shapes`` — the small
        testbed ViT shipped with vitroll (trained on :mod:`vitroll.testbed.shapes`; ``checkpoint`` replaces its
        weights), or one of the transformers testbed models shipped with it
        (:data:`~vitroll.models.transformers.SHIPPED_TRANSFORMERS`: ``vitroll-clip-shapes``,
        ``vitroll-caption-shapes``, ``vitroll-text-keyword``, ``vitroll-text-shortcut``).
    pretrained : bool
        Load timm's pretrained weights (from the local cache when the hub cannot be reached; fails in
        seconds with a clear message when they are not cached).
    checkpoint : path, optional
        Local weights (``.safetensors``, ``.pth``, ``.pt``, ``.bin``). ``num_classes`` is taken from the
        checkpoint's ``head.weight`` when not given.
    trust_checkpoint : bool
        Unpickle a torch checkpoint that holds Python objects besides tensors (see
        :func:`vitroll.checkpoints.read_checkpoint`);
        only for files from a source you trust, since unpickling can run arbitrary code.
    num_classes : int, optional
        The number of classes of a timm or torchvision model's head (by default its weights', a checkpoint's
        ``head.weight`` rows, or the architecture's); the other sources refuse it.
    device : str or torch.device
        Where the model is moved (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``).
    model_kwargs
        Passed to ``timm.create_model`` (``img_size``, ``dynamic_img_size``, …).

    Returns
    -------
    nn.Module
        The model in eval mode on ``device``; a transformers text or image–text model with the tokenizer saved
        beside it registered (:func:`~vitroll.use_tokenizer`).

    Raises
    ------
    ModelLoadError
        For a name that names no model, weights that cannot be had or do not fit.
    UnsupportedModelError
        For a timm name of no registered family, before anything is built or downloaded
        (:func:`~vitroll.models.timm.refuse_unexplained_name`).
    """
    # a save_pretrained folder may come as a Path
    name = path_of(name, "name", "a model's name or folder", "a model already built goes to the methods as it is")
    _refuse_names_that_are_no_model(name)
    given = {**({} if num_classes is None else {"num_classes": num_classes}), **model_kwargs}
    if name == TESTBED_NAME:
        _refuse_build_arguments(name, "the fixed 64×64 testbed with its own weights", given)
        if checkpoint is None:
            return load_testbed_model(device)
        model = build_testbed_model()
        load_state(model, read_checkpoint(checkpoint, trust=trust_checkpoint), checkpoint)
        return model.eval().to(device)
    if is_transformers_name(name):
        _refuse_build_arguments(name, "a transformers model takes its weights and size from its folder or hub id",
                                {"pretrained": True, **given} if pretrained else given)
        return load_transformers(name, _read_if_given(checkpoint, trust_checkpoint), checkpoint).eval().to(device)
    if name.startswith(OPEN_CLIP_PREFIX):
        _refuse_build_arguments(name, "an open_clip model takes its size from its architecture", given)
        check_open_clip_name(name, pretrained=pretrained)  # before the checkpoint is read
        state = _read_if_given(checkpoint, trust_checkpoint)
        with _seeded_initialisation():
            model = build_open_clip(name)
        if state is not None:
            load_state(model, state, checkpoint)
        return model.eval().to(device)
    if name.startswith(TORCHVISION_PREFIX):
        state = _read_if_given(checkpoint, trust_checkpoint)
        with _seeded_initialisation():
            model = build_torchvision(name, pretrained=pretrained and state is None, state=state,
                                       num_classes=num_classes, **model_kwargs)
        if state is not None:
            _load_weights(model, state, checkpoint)
        return model.eval().to(device)
    check_model_name(name)
    # a hf-hub: name reads the hub twice (its config for the refusal, then to build): probe whether it answers once
    with cache_only(is_hub_name(name) and not hub_reachable()):
        refuse_unexplained_name(name)  # before the checkpoint is read: a large one takes seconds and gigabytes
        state = _read_if_given(checkpoint, trust_checkpoint)
        if num_classes is None and state is not None:
            num_classes = num_classes_of(state)
        if num_classes is not None:
            model_kwargs["num_classes"] = num_classes
        try:
            with _seeded_initialisation():
                model = create_timm_model(name, pretrained=pretrained and state is None, **model_kwargs)
        except (RuntimeError, TypeError, ValueError, AssertionError) as error:
            raise ModelLoadError(f"{name}: cannot build model ({error})") from None
        if "img_size" in model_kwargs:
            _refuse_ignored_img_size(name, model, model_kwargs["img_size"])
    if state is not None:
        changed_by = ("--img-size, --dynamic-img-size, --num-classes and --model-arg" if on_the_command_line()
                      else "the keyword arguments given to it")
        _load_weights(model, state, checkpoint, other_architecture=(
            f"{model_loading(name)} builds timm's {name} as it is, changed only by {changed_by}: a model built with "
            "other timm.create_model arguments is rebuilt by giving them "
            f"({argument('reg_tokens', 4)}, {argument('depth', 6)}, …)"))
    return model.eval().to(device)

