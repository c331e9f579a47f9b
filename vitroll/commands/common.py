"""Turning a sub-command's parsed arguments into library objects (models, settings, preprocessing), and the
messages its run prints. Imports torch: the command modules import it in their ``run``; their arguments are
:mod:`vitroll.commands.arguments`'."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from vitroll.capture import family_of
from vitroll.commands.arguments import option_flag
from vitroll.errors import MethodOptionError, VitrollError
from vitroll.io.images import unopened_failure
from vitroll.io.names import single_line
from vitroll.methods import Method, check_shared_options, method_named, methods_taking
from vitroll.models import ModelProvenance, has_random_weights, load_model
from vitroll.models.transformers import saved_kind
from vitroll.pipelines.explain import WHOLE_IMAGE_FLAGS, ExplainSettings, sight_warnings
from vitroll.preprocess import Preprocessing
from vitroll.testbed import TESTBED_NAME
from vitroll.wording import typed_as_options


def check_trusted_checkpoints(args: argparse.Namespace, checkpoints: list[str]) -> None:
    """The stderr warning that ``--trust-checkpoint`` is about to unpickle ``checkpoints`` in full; without any
    checkpoint it trusts nothing (no other weights are ever unpickled), which is refused (ValueError)."""
    if args.trust_checkpoint and not checkpoints:
        raise ValueError("--trust-checkpoint unpickles the file a --checkpoint names, and no --checkpoint is given: "
                         "it would trust nothing; give the checkpoint, or leave --trust-checkpoint out")
    if args.trust_checkpoint:
        print(f"vitroll: warning: --trust-checkpoint: {', '.join(checkpoints)} may be unpickled in full "
              "(weights_only=False); a malicious file can run arbitrary code", file=sys.stderr)


def flagged_options_from_args(args: argparse.Namespace) -> dict[str, object]:
    """The method options given with their own flags (``--head-fusion`` …), by option name; unset ones left out."""
    given = {
        "head_fusion": args.head_fusion, "discard_ratio": args.discard_ratio, "attention_weight": args.attention_weight,
        "start_layer": args.start_layer, "target_class": args.target_class,
        "max_attention_memory": int(args.max_attention_memory * 2**20) if args.max_attention_memory else None,
    }
    return {name: value for name, value in given.items() if value is not None}


def _warn_ignored(name: str, methods: list[Method]) -> None:
    if len(methods) == 1:
        whom = f"not an option of method {methods[0].name!r} (it takes: {methods[0].option_list()})"
    else:
        whom = f"an option of none of the methods {', '.join(m.name for m in methods)}"
    print(f"vitroll: warning: {option_flag(name)} is {whom}; ignored", file=sys.stderr)


def method_options_from_args(args: argparse.Namespace, methods: Sequence[str]) -> dict[str, object]:
    """The options for ``methods`` from their flags and ``--option``, checked before any model is built.

    A flag that none of ``methods`` takes is one warning line on stderr and dropped (the run goes on). Each
    ``--option`` value is read as the type of the option in the first method that takes it.

    Raises
    ------
    MethodOptionError
        For an ``--option`` that none of ``methods`` takes, one given twice, or a value its type does not allow.
    ValueError
        For ``head_fusion=none``: per-head maps, which no sub-command can draw.
    """
    chosen = [method_named(name) for name in methods]
    options = {}
    for name, value in flagged_options_from_args(args).items():
        if any(method.takes(name) for method in chosen):
            options[name] = value
        else:
            _warn_ignored(name, chosen)
    typed_as_options(name for name, _ in args.option)
    for name, text in args.option:
        if name in options:
            twice = f"{option_flag(name)} and --option" if name in flagged_options_from_args(args) else "--option twice"
            raise MethodOptionError(f"option {name!r} is given by {twice}; give it once")
        options[name] = methods_taking(chosen, name)[0].parse(name, text)
    if "head_fusion" in options and options["head_fusion"] is None:
        raise ValueError("head_fusion=none gives one map per head (B, H, h, w), which the sub-commands neither draw "
                         "nor score; per-head maps are for the Python API: vitroll.attention(model, images, "
                         "head_fusion=None)")
    return check_shared_options(chosen, options)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _check_testbed_arguments(args: argparse.Namespace) -> None:
    """Refuse build options that the fixed testbed model would silently ignore."""
    given = [flag for flag, value in (("--pretrained", args.pretrained), ("--num-classes", args.num_classes),
                                      ("--img-size", args.img_size), ("--dynamic-img-size", args.dynamic_img_size),
                                      ("--model-arg", args.model_arg))
             if value]
    if args.model == TESTBED_NAME and given:
        verb = "does" if len(given) == 1 else "do"
        raise ValueError(f"{' and '.join(given)} {verb} not apply to {TESTBED_NAME}, the fixed 64×64 testbed with its "
                         "own weights; choose a timm model with --model NAME")


def img_size_option(numbers: list[int]) -> int | tuple[int, int]:
    """``--img-size H`` or ``H W`` as timm's ``img_size``: the side of a square, or (H, W).

    Raises ValueError for more than two numbers.
    """
    if len(numbers) > 2:
        raise ValueError(f"--img-size takes H or H W; got {len(numbers)} numbers")
    return numbers[0] if len(numbers) == 1 else (numbers[0], numbers[1])


def model_arguments(pairs: Sequence[tuple[str, object]]) -> dict[str, object]:
    """:func:`model_argument`'s ``(name, value)`` pairs by name; one name given twice is refused (ValueError)."""
    given: dict[str, object] = {}
    for key, value in pairs:
        if key in given:
            raise ValueError(f"--model-arg {key} is given twice; give it once")
        given[key] = value
    return given


def note_if_random(name: str, *, pretrained: bool, checkpoint: Optional[str]) -> None:
    """One note line on stderr when :func:`load_model` leaves model ``name`` at its random initialisation."""
    if has_random_weights(name, pretrained=pretrained, checkpoint=checkpoint):
        print(f"vitroll: note: {name} has random weights (no --pretrained or --checkpoint); its maps mean nothing",
              file=sys.stderr)


IMAGE_KINDS = ("an image model", "an image–text model")
"""The kinds of model (:func:`model_kind`'s words) that ``overlay`` explains."""

COMPARED_KINDS = ("an image model",)
"""The kinds of model that ``compare`` explains: class scores, no prompts."""


def model_from_args(args: argparse.Namespace) -> nn.Module:
    _check_testbed_arguments(args)
    if args.pretrained and args.checkpoint:
        raise ValueError("--pretrained and --checkpoint both give the weights; give one (the checkpoint's would "
                         "replace the pretrained ones)")
    build: dict[str, object] = {}
    if args.img_size:
        build["img_size"] = img_size_option(args.img_size)
    if args.dynamic_img_size:
        build["dynamic_img_size"] = True
    build.update(model_arguments(args.model_arg))
    check_trusted_checkpoints(args, [args.checkpoint] if args.checkpoint else [])
    model = load_model_of_kind(args.model, IMAGE_KINDS, pretrained=args.pretrained,
                               checkpoint=args.checkpoint, trust_checkpoint=args.trust_checkpoint,
                               num_classes=args.num_classes, device=resolve_device(args.device), **build)
    note_if_random(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint)
    return model


def load_model_of_kind(name: str, kinds: Sequence[str], **load_options: object) -> nn.Module:
    """:func:`load_model`, refusing a model that is none of ``kinds`` (:func:`model_kind`'s words) before any input is
    read: a ``save_pretrained`` folder by its ``config.json`` before it is built (a text model saved without its
    tokenizer was refused for the tokenizer, not for being a text model), any other by the built model."""
    if (mistake := _saved_of_other_kind(name, kinds)) is not None:
        raise VitrollError(mistake)
    model = load_model(name, **load_options)
    refuse_other_kinds(name, model, kinds)
    return model


SAVED_KINDS = {"text": ("a text model", "`vitroll text`"), "captioner": ("a captioner", "`vitroll caption`"),
               "image-text": ("an image–text model", "`vitroll overlay --text …`")}
"""The words of :func:`model_kind` for the kinds a ``save_pretrained`` folder's config tells
(:func:`~vitroll.models.transformers.saved_kind`)."""


def model_kind(model: nn.Module) -> tuple[str, str]:
    """What kind of model ``model`` is, as a message says it ("a text model", "a captioner", "an image–text model",
    "an image model"), and the command that explains that kind."""
    family = family_of(model)
    if family.inputs == "tokens":
        return SAVED_KINDS["text"]
    if family.captioner is not None:
        return SAVED_KINDS["captioner"]
    if family.image_text is not None:
        return SAVED_KINDS["image-text"]
    return "an image model", "`vitroll overlay`"


def refuse_other_kinds(name: str, model: nn.Module, kinds: Sequence[str]) -> None:
    """Refuse a model that is none of ``kinds`` (:func:`model_kind`'s words), naming the command that explains it.

    Raises
    ------
    VitrollError
        E.g. ``m/ is a captioner (VisionEncoderDecoderModel); explain it with `vitroll caption```.
    """
    if (mistake := _other_kind(name, model_kind(model), type(model).__name__, kinds)) is not None:
        raise VitrollError(mistake)


def _saved_of_other_kind(name: str, kinds: Sequence[str]) -> Optional[str]:
    """:func:`_other_kind` of a ``save_pretrained`` folder ``name`` by its ``config.json``, before it is built; None
    also for a model whose kind its config does not tell (:func:`~vitroll.models.transformers.saved_kind`)."""
    saved = saved_kind(name)
    return None if saved is None else _other_kind(name, SAVED_KINDS[saved[0]], saved[1], kinds)


def _other_kind(name: str, kind_and_command: tuple[str, str], class_name: str, kinds: Sequence[str]) -> Optional[str]:
    """Why model ``name`` (``kind_and_command`` of :func:`model_kind`, its class ``class_name``) is not for a command
    that explains ``kinds``, naming the command that explains it; None when it is one of them."""
    kind, command = kind_and_command
    return None if kind in kinds else f"{name} is {kind} ({class_name}); explain it with {command}"


def provenance_from_args(args: argparse.Namespace, model: nn.Module) -> ModelProvenance:
    """Model name and weights source (with the checkpoint's SHA-256) of the model :func:`model_from_args` built."""
    return ModelProvenance.of(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint, model=model)


def check_input_size(model: nn.Module, input_size: tuple[int, int]) -> None:
    """Refuse an ``--input-size`` that the model would reject in its first forward pass (its family says which)."""
    try:
        family_of(model).token_layout(model, tuple(input_size))
    except ValueError as error:
        raise ValueError(f"--input-size {' '.join(map(str, input_size))}: {error}") from None


def preprocessing_from_args(model: nn.Module, args: argparse.Namespace) -> Preprocessing:
    if args.input_size:
        check_input_size(model, tuple(args.input_size))
    return Preprocessing.from_model(
        model, crop_pct=args.crop_pct, crop_mode=args.crop_mode, interpolation=args.interpolation,
        input_size=tuple(args.input_size) if args.input_size else None,
        mean=tuple(args.mean) if args.mean else None, std=tuple(args.std) if args.std else None,
    )


def settings_from_args(args: argparse.Namespace) -> ExplainSettings:
    """The method, its checked options and the rendering; call it before building the model, so that a wrong option
    costs no model load."""
    return ExplainSettings(method=args.method, method_options=method_options_from_args(args, [args.method]),
                           cmap=args.cmap, alpha=args.alpha, interpolation=args.upsample,
                           normalization=args.normalize, key_patches=args.key_patches)


def refuse_folders(images: Sequence[str], command: str, advice: Callable[[str], str]) -> None:
    """Refuse a folder among a command's IMAGE arguments in one line, before any model is loaded; ``advice`` says,
    for the folder's name (quoted for a shell, without the trailing ``/`` a shell's completion adds), what to run
    instead."""
    # os.path.isdir is False for a file in a folder made unreadable, where Path.is_dir raises PermissionError
    folder = next((image for image in images if os.path.isdir(image)), None)
    if folder is not None:
        named = folder.rstrip(os.sep) or os.sep  # photos/ + /*.png was photos//*.png
        raise VitrollError(
            f"{folder} is a folder: `vitroll {command}` takes image files; {advice(shlex.quote(named))}")


def print_sight_warnings(sights: Sequence[tuple[object, Optional[float], Optional[float]]],
                         whole_image: Optional[str] = WHOLE_IMAGE_FLAGS) -> None:
    """``vitroll: warning:`` lines on stderr for the images whose maps say little
    (:func:`~vitroll.pipelines.explain.sight_warnings`: one for those smaller than the patch grid, one for those the
    model saw little of, with ``whole_image``, the options that show it all, if the command has them), ``sights``
    per image: its path, the pixels a patch covers a side and the share of it the model saw (None: not known)."""
    known = [(str(path), pixels, share) for path, pixels, share in sights if pixels is not None and share is not None]
    for line in sight_warnings(known, whole_image):
        print(single_line(f"vitroll: warning: {line}"), file=sys.stderr)


def print_failed(failure: object) -> None:
    """One ``vitroll: failed:`` line on stderr for an input that failed, its name's line breaks spelt
    (:func:`~vitroll.io.names.single_line`)."""
    print(f"vitroll: failed: {single_line(str(failure))}", file=sys.stderr)


def none_can_be_read(images: Sequence[str], models: Sequence[str] = (), kinds: Sequence[str] = ()) -> bool:
    """Whether no IMAGE can be read (each missing, a folder or empty), each one's ``vitroll: failed:`` line then
    printed: checked before any model loads, so that a mistyped name is told at once, not after the model has loaded.
    With one readable image the run goes on, and the pipeline reports the others in their place.

    Raises
    ------
    VitrollError
        When, besides, a ``--model`` of ``models`` is a ``save_pretrained`` folder whose config says it is none of
        ``kinds`` (:func:`load_model_of_kind`; the first such): that mistake first, since it changes the command to
        run (and the images it is given), with the images' in the same line, so that one rerun mends both.
    """
    failures = [unopened_failure(Path(image)) for image in dict.fromkeys(images)]
    if not all(failures):
        return False
    for model in models:
        if (mistake := _saved_of_other_kind(model, kinds)) is not None:
            shown = "; ".join(map(str, failures[:3])) + (f"; … and {len(failures) - 3} more" if len(failures) > 3
                                                         else "")
            raise VitrollError(f"{mistake}; nor can any image given be read ({shown})")
    for failure in failures:
        print_failed(failure)
    return True
