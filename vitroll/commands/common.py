"""Argument groups shared by sub-commands, and turning parsed arguments into library objects."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from vitroll.capture import HEAD_FUSIONS, family_of
from vitroll.errors import MethodOptionError, VitrollError
from vitroll.io.images import DEFAULT_MAX_PIXELS, unopened_failure
from vitroll.io.names import single_line
from vitroll.io.textfile import TextFileError, read_text_file
from vitroll.methods import METHODS, Method, check_shared_options, method_named, methods_taking
from vitroll.models import ModelProvenance, has_random_weights, load_model
from vitroll.models.transformers import saved_kind
from vitroll.overlay import lookup_table
from vitroll.pipelines.explain import ExplainSettings
from vitroll.preprocess import Preprocessing
from vitroll.testbed import TESTBED_NAME


def integer(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for integers ``>= minimum``: out of range is argparse's one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer ≥ {minimum}; got {value}")
        return value

    return parse


def number(low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
           high_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type`` for finite numbers in ``[low, high]``, each end excluded when ``*_open``."""
    if math.isinf(high):
        allowed = f"{'>' if low_open else '≥'} {low:g}"
    else:
        allowed = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number; got {text!r}")
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (above and below):
            raise argparse.ArgumentTypeError(f"must be {allowed}; got {text}")
        return value

    return parse


def non_blank(text: str) -> str:
    """An argparse ``type`` for a text to explain: refuses an empty or white-space-only text."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is blank: give the words to explain, e.g. \"a photo of a dog\"")
    return text


def colormap(name: str) -> str:
    """An argparse ``type`` for ``--cmap``: a matplotlib colormap name, checked before any model is built."""
    try:
        lookup_table(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return name


def readable_text_file(what: str) -> Callable[[str], str]:
    """An argparse ``type`` for a small text file the user gives (``--class-names``): one readable as UTF-8 text,
    checked before any model loads; the run reads it again where it uses it. ``what`` names its use."""

    def parse(text: str) -> str:
        try:
            read_text_file(text, what)
        except TextFileError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return text

    return parse


def available_devices() -> list[str]:
    """The torch devices this machine can run on: ``cpu``, then ``cuda:0`` … and ``mps`` where present."""
    devices = ["cpu"] + [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def device_name(text: str) -> str:
    """An argparse ``type`` for ``--device``: ``auto`` or a device that exists here, checked before any model is
    built."""
    if text == "auto":
        return text
    available = ", ".join(available_devices())
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"unknown device {text!r}; available: {available}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        reason = "torch built without CUDA" if torch.version.cuda is None else "no NVIDIA GPU or driver found"
        raise argparse.ArgumentTypeError(f"{text} is not available here ({reason}); available: {available}")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text} is not available here; available: {available}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError(f"{text} is not available here; available: {available}")
    if device.type not in ("cpu", "cuda", "mps"):
        raise argparse.ArgumentTypeError(f"vitroll does not run on {text!r}; available: {available}")
    return text


def output_folder(text: str) -> Path:
    """An argparse ``type`` for ``--out``: a folder that exists or can be made (no file on the way)."""
    path = Path(text)
    existing = next(ancestor for ancestor in (path, *path.parents)
                    if ancestor.exists() or ancestor == Path(ancestor.anchor))
    if existing == path and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is an existing file, not a folder; choose another --out")
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text} cannot be made: {existing} is a file, not a folder")
    return path


def pixel_count(text: str) -> Optional[int]:
    """An argparse ``type`` for ``--max-pixels``: a number of pixels (``250000000``), of megapixels (``250M``) or of
    gigapixels (``1G``), or ``none`` for no limit."""
    if text.strip().lower() == "none":
        return None
    scale = {"M": 1_000_000, "G": 1_000_000_000}.get(text.strip()[-1:].upper(), 1)
    try:
        value = float(text.strip()[:-1] if scale > 1 else text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of pixels (250000000, 250M, 1G) or none; got {text!r}"
                                         ) from None
    if not (math.isfinite(value) and value * scale >= 1):
        raise argparse.ArgumentTypeError(f"must be at least 1 pixel (or none: no limit); got {text}")
    return round(value * scale)


def add_max_pixels_argument(group: "argparse._ActionsContainer", images: str = "images") -> None:
    """``--max-pixels N``: the largest image to decode (:func:`~vitroll.io.images.load_image`'s ``max_pixels``);
    ``images`` says which images it limits."""
    group.add_argument("--max-pixels", type=pixel_count, default=f"{DEFAULT_MAX_PIXELS // 1_000_000}M", metavar="N",
                       help=f"refuse {images} larger than N pixels, read from the file's header before decoding: "
                            "250000000, 250M, 1G or none (default: %(default)s, about 10 GiB of memory for an "
                            "overlay at full size)")


def add_device_argument(group: "argparse._ActionsContainer") -> None:
    group.add_argument("--device", type=device_name, default="auto", metavar="DEVICE",
                       help="cpu, cuda, cuda:1, mps, … (default: auto, cuda when available, else cpu)")


def add_out_argument(group: "argparse._ActionsContainer", default: str | None, what: str = "output folder") -> None:
    """``--out DIR``, required when there is no ``default`` folder."""
    group.add_argument("--out", type=output_folder, metavar="DIR", default=default, required=default is None,
                       help=what if default is None else f"{what} (default: %(default)s/)")


def add_batch_size_argument(group: "argparse._ActionsContainer", default: int, items: str = "images") -> None:
    """``--batch-size N``: how many ``items`` go through the model at once."""
    group.add_argument("--batch-size", type=integer(1), default=default, metavar="N",
                       help=f"{items} per forward pass (default: %(default)s)")


def add_resume_arguments(parser: argparse.ArgumentParser, *, done: str, redo: str) -> None:
    """``--resume`` (the default: skip what is ``done`` with the same settings) or ``--overwrite`` (``redo`` it);
    resuming a folder made with other settings is refused, naming them."""
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="resume", action="store_true", default=True,
                        help=f"skip {done} already done with the same settings (default)")
    resume.add_argument("--overwrite", dest="resume", action="store_false", help=redo)


def add_trust_checkpoint_argument(group: "argparse._ActionsContainer") -> None:
    group.add_argument("--trust-checkpoint", action="store_true",
                       help="unpickle a .pth/.pt/.bin checkpoint that holds Python objects besides tensors "
                            "(weights_only=False): a malicious file can run arbitrary code; only for files you trust")


def warn_if_trusting(args: argparse.Namespace, checkpoints: list[str]) -> None:
    """The stderr warning that ``--trust-checkpoint`` is about to unpickle ``checkpoints`` in full."""
    if args.trust_checkpoint and checkpoints:
        print(f"vitroll: warning: --trust-checkpoint: {', '.join(checkpoints)} may be unpickled in full "
              "(weights_only=False); a malicious file can run arbitrary code", file=sys.stderr)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=TESTBED_NAME, metavar="MODEL",
                       help=f"timm model name, hf-hub:org/name, a transformers folder or hub id, torchvision:ARCH or "
                            f"open_clip:ARCH (default: {TESTBED_NAME}, the shapes testbed ViT shipped with vitroll)")
    group.add_argument("--checkpoint", metavar="FILE",
                       help="local weights: .safetensors, or .pth/.pt/.bin (read with weights_only=True)")
    add_trust_checkpoint_argument(group)
    group.add_argument("--pretrained", action="store_true",
                       help="load the pretrained weights (timm's or torchvision's; hub or local cache)")
    group.add_argument("--num-classes", type=integer(1), metavar="N",
                       help="classifier size (default: from the checkpoint's head)")
    group.add_argument("--class-names", type=readable_text_file("class names"), metavar="FILE",
                       help="class names file: one per line, or JSON")
    add_device_argument(group)
    group.add_argument("--crop-pct", type=number(0, 1, low_open=True), metavar="FRACTION",
                       help="override the model's crop_pct, in (0, 1] (1.0: no margin)")
    group.add_argument("--crop-mode", choices=("center", "squash", "border"),
                       help="with --crop-pct 1 the model sees the whole image: squash stretches it to the model's "
                            "input, border fits it inside and pads the rest with the mean colour")
    group.add_argument("--input-size", type=integer(1), nargs=2, metavar=("H", "W"),
                       help="override the model input size (models built with --img-size or dynamic_img_size)")
    group.add_argument("--mean", type=number(), nargs=3, metavar="M", help="override the normalisation mean")
    group.add_argument("--std", type=number(0, low_open=True), nargs=3, metavar="S",
                       help="override the normalisation std")
    group.add_argument("--interpolation", choices=("bicubic", "bilinear", "nearest", "lanczos"),
                       help="override the resize filter")
    group.add_argument("--img-size", type=integer(1), nargs="+", metavar="SIZE",
                       help="build the model for this input size (H or H W; timm resamples position embeddings)")
    group.add_argument("--dynamic-img-size", action="store_true",
                       help="build the model to accept any input size (ViT, EVA, CaiT)")
    group.add_argument("--model-arg", type=model_argument, action="append", default=[], metavar="KEY=VALUE",
                       help="any other timm.create_model (or torchvision builder) argument, to rebuild a model saved "
                            "with it (repeatable; VALUE read as an int, float, true/false, none or else text): e.g. "
                            "reg_tokens=4, class_token=false, global_pool=avg, depth=6")


def add_method_arguments(parser: argparse.ArgumentParser, default: str = "rollout") -> None:
    """``--method`` and its options; ``default`` is what ``--help`` states as the default method."""
    group = parser.add_argument_group("method (unset options keep the method's default; a flag it does not take is "
                                      "ignored with a warning; `vitroll methods` lists each method's options)")
    group.add_argument("--method", default="rollout", choices=sorted(METHODS), metavar="METHOD",
                       help=f"saliency method: {', '.join(sorted(METHODS))} (default: {default})")
    add_method_options(group)


def key_value(text: str) -> tuple[str, str]:
    """An argparse ``type`` for ``--option KEY=VALUE``: the option's name (``-`` read as ``_``) and its text."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE; got {text!r}")
    return key.strip().replace("-", "_"), value.strip()


MODEL_ARGUMENT_FLAGS = {"img_size": "--img-size", "dynamic_img_size": "--dynamic-img-size",
                        "num_classes": "--num-classes", "pretrained": "--pretrained", "checkpoint_path": "--checkpoint"}
"""The model-building arguments that have a flag of their own: ``--model-arg`` refuses them, naming the flag (the flag
is checked and recorded; ``checkpoint_path`` would make timm unpickle a file)."""


def model_argument(text: str) -> tuple[str, object]:
    """An argparse ``type`` for ``--model-arg KEY=VALUE``: the argument's name (``-`` read as ``_``) and its value
    read as an int, a float, ``true``/``false``, ``none`` or else as the text itself (never evaluated)."""
    key, value = key_value(text)
    if not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{key!r} is not an argument name; expected KEY=VALUE")
    if key in MODEL_ARGUMENT_FLAGS:
        raise argparse.ArgumentTypeError(f"{key} has its own flag: give {MODEL_ARGUMENT_FLAGS[key]}")
    words = {"true": True, "false": False, "none": None}
    if value.lower() in words:
        return key, words[value.lower()]
    for kind in (int, float):
        try:
            return key, kind(value)
        except ValueError:
            pass
    return key, value


def add_method_options(group: "argparse._ArgumentGroup") -> None:
    group.add_argument("--head-fusion", choices=HEAD_FUSIONS, help="how heads are fused (default mean)")
    group.add_argument("--discard-ratio", type=number(0, 1, high_open=True), metavar="FRACTION",
                       help="drop this fraction of the weakest attention per row (rollout 0, grad_rollout 0.9)")
    group.add_argument("--attention-weight", type=number(0, 1, low_open=True), metavar="FRACTION",
                       help="α in rownorm(α·A + (1−α)·I), in (0, 1] (default 0.5)")
    group.add_argument("--start-layer", type=integer(0), metavar="LAYER",
                       help="first layer included in rollout / chefer, from 0 (default 0)")
    group.add_argument("--target-class", type=integer(0), metavar="CLASS",
                       help="class explained by gradient methods (default: the prediction)")
    group.add_argument("--max-attention-memory", type=number(0, low_open=True), metavar="MiB",
                       help="attention memory budget while recording: per-head probabilities are computed in blocks "
                            "within it, and rollout keeps layers factored once all layers' maps would exceed it "
                            "(default 1024 MiB; on a GPU a quarter of its free memory where that is more)")
    group.add_argument("--option", type=key_value, action="append", default=[], metavar="KEY=VALUE",
                       help="any option of the method, read as its type (repeatable; `vitroll methods NAME` lists "
                            "them, with units): e.g. steps=8, solver=networkx, seed=3, layer=-2, target_class=none, "
                            "max_attention_memory=268435456 (bytes)")


OPTION_UNITS = {"max_attention_memory": "bytes, as in the Python API; its flag --max-attention-memory takes MiB"}
"""The unit of a method option's number where it has one, as ``--option KEY=VALUE`` reads it."""


def option_flag(name: str) -> str:
    """The flag of a method option that has its own (``discard_ratio`` → ``--discard-ratio``)."""
    return "--" + name.replace("_", "-")


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


def add_colour_arguments(group: "argparse._ActionsContainer") -> None:
    """``--cmap`` and ``--alpha``: how a map is coloured and blended over its image."""
    group.add_argument("--cmap", type=colormap, default="jet", metavar="COLORMAP",
                       help="matplotlib colormap (default: %(default)s)")
    add_alpha_argument(group)


def add_alpha_argument(group: "argparse._ActionsContainer") -> None:
    """``--alpha``: the opacity of a map over its image."""
    group.add_argument("--alpha", type=number(0, 1), default=0.5, metavar="FRACTION",
                       help="opacity of the heatmap, in [0, 1] (default: %(default)s)")


def add_map_scaling_arguments(group: "argparse._ActionsContainer") -> None:
    """``--upsample`` and ``--normalize``: how a patch-grid map is brought to the image's pixels and to [0, 1]."""
    group.add_argument("--upsample", default="bilinear", choices=("bilinear", "bicubic", "nearest"),
                       help="how the patch-grid map is resized to the image (default: %(default)s)")
    group.add_argument("--normalize", default="minmax", choices=("minmax", "percentile"),
                       help="scale each map to [0, 1] from its min and max, or from its 1st and 99th percentiles, "
                            "robust to a few extreme patches (default: %(default)s)")


def add_render_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("rendering")
    add_colour_arguments(group)
    add_map_scaling_arguments(group)
    group.add_argument("--key-patches", type=integer(0), default=0, metavar="K",
                       help="outline the K highest-scoring patches (default: %(default)s, none)")


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, method and rendering groups every explaining sub-command takes."""
    add_model_arguments(parser)
    add_method_arguments(parser)
    add_render_arguments(parser)


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
    warn_if_trusting(args, [args.checkpoint] if args.checkpoint else [])
    model = load_model_of_kind(args.model, ("an image model", "an image–text model"), pretrained=args.pretrained,
                               checkpoint=args.checkpoint, trust_checkpoint=args.trust_checkpoint,
                               num_classes=args.num_classes, device=resolve_device(args.device), **build)
    note_if_random(args.model, pretrained=args.pretrained, checkpoint=args.checkpoint)
    return model


def load_model_of_kind(name: str, kinds: Sequence[str], **load_options: object) -> nn.Module:
    """:func:`load_model`, refusing a model that is none of ``kinds`` (:func:`model_kind`'s words) before any input is
    read: a ``save_pretrained`` folder by its ``config.json`` before it is built (a text model saved without its
    tokenizer was refused for the tokenizer, not for being a text model), any other by the built model."""
    saved = saved_kind(name)
    if saved is not None:
        _refuse_kind(name, SAVED_KINDS[saved[0]], saved[1], kinds)
    model = load_model(name, **load_options)
    refuse_other_kinds(name, model, kinds)
    return model


SAVED_KINDS = {"text": ("a text model", "`vitroll text`"), "captioner": ("a captioner", "`vitroll caption`")}
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
        return "an image–text model", "`vitroll overlay --text …`"
    return "an image model", "`vitroll overlay`"


def refuse_other_kinds(name: str, model: nn.Module, kinds: Sequence[str]) -> None:
    """Refuse a model that is none of ``kinds`` (:func:`model_kind`'s words), naming the command that explains it.

    Raises
    ------
    VitrollError
        E.g. ``m/ is a captioner (VisionEncoderDecoderModel); explain it with `vitroll caption```.
    """
    _refuse_kind(name, model_kind(model), type(model).__name__, kinds)


def _refuse_kind(name: str, kind_and_command: tuple[str, str], class_name: str, kinds: Sequence[str]) -> None:
    kind, command = kind_and_command
    if kind not in kinds:
        raise VitrollError(f"{name} is {kind} ({class_name}); explain it with {command}")


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
    for the folder's name (quoted for a shell), what to run instead."""
    folder = next((image for image in images if Path(image).is_dir()), None)
    if folder is not None:
        raise VitrollError(
            f"{folder} is a folder: `vitroll {command}` takes image files; {advice(shlex.quote(folder))}")


SMALL_SEEN_SHARE = 0.25
"""Below this share of an image's area in the model input, the run says so: a strip (an image three or more times as
long as it is wide, centre-cropped), whose map covers a square in its middle."""


def print_if_little_seen(path: object, seen_share: Optional[float]) -> None:
    """One ``vitroll: warning:`` line on stderr when the model saw less than :data:`SMALL_SEEN_SHARE` of the image
    at ``path``, with the options that show it all of it."""
    if seen_share is not None and seen_share < SMALL_SEEN_SHARE:
        shown = f"{100 * seen_share:.0f} %" if seen_share >= 0.01 else f"{100 * seen_share:.1g} %"
        print(single_line(f"vitroll: warning: {path}: the model saw only {shown} of the image (the middle of its long "
                          "side) and its map covers only that; --crop-mode border --crop-pct 1 shows the model all "
                          "of it, padded (squash: stretched)"), file=sys.stderr)


def print_failed(failure: object) -> None:
    """One ``vitroll: failed:`` line on stderr for an input that failed, its name's line breaks spelt
    (:func:`~vitroll.io.names.single_line`)."""
    print(f"vitroll: failed: {single_line(str(failure))}", file=sys.stderr)


def none_can_be_read(images: Sequence[str]) -> bool:
    """Whether no IMAGE can be read (each missing, a folder or empty), each one's ``vitroll: failed:`` line then
    printed: checked before any model loads, so that a mistyped name is told at once, not after the model has loaded.
    With one readable image the run goes on, and the pipeline reports the others in their place."""
    failures = [unopened_failure(Path(image)) for image in dict.fromkeys(images)]
    if not all(failures):
        return False
    for failure in failures:
        print_failed(failure)
    return True
