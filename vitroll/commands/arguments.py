"""The sub-commands' arguments: argparse types, option groups and the names they offer as choices. Nothing here
imports torch, timm or transformers, so that ``vitroll CMD --help`` and a usage error answer at once; turning the
parsed arguments into models and settings is :mod:`vitroll.commands.common`'s."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Callable, Optional

from vitroll.colormaps import named_colormap
from vitroll.errors import OptionValueError
from vitroll.io.limits import DEFAULT_MAX_PIXELS
from vitroll.io.names import readable
from vitroll.io.textfile import TextFileError, not_utf8, read_text_file
from vitroll.wording import FLAGS

METHOD_NAMES = ("attention", "center", "chefer", "flow", "grad_rollout", "gradient_shap", "integrated_gradients",
                "occlusion", "random", "rollout")
"""The names of :data:`vitroll.methods.METHODS`, sorted, for ``--method`` without importing the methods (torch);
tests/test_startup.py checks that they agree."""
HEAD_FUSIONS = ("mean", "max", "min")
""":data:`vitroll.capture.HEAD_FUSIONS`, for ``--head-fusion``."""
CAPTION_METHODS = ("chefer", "rollout", "occlusion")
""":data:`vitroll.methods.caption.CAPTION_METHODS`, for caption's ``--method``."""
PRECISIONS = ("fp32", "fp16", "bf16")
"""The names of :data:`vitroll.pipelines.folder.PRECISIONS`, for annotate's ``--precision``."""
TESTBED_NAME = "vitroll-shapes"
""":data:`vitroll.testbed.TESTBED_NAME`, the default ``--model``."""
DEFAULT_COLORMAP = "jet"
"""The default of ``ExplainSettings.cmap``, that of ``--cmap``."""


def method_names() -> tuple[str, ...]:
    """:data:`METHOD_NAMES`, or, in a program that imported :mod:`vitroll.methods` (and may have registered a method
    of its own) before calling the command line, the names registered there, sorted."""
    methods = sys.modules.get("vitroll.methods")
    return tuple(sorted(methods.METHODS)) if methods is not None else METHOD_NAMES


def known_method(name: str) -> str:
    """``name`` when it names a method; else an ``argparse.ArgumentTypeError`` that lists them, in the words of
    :func:`vitroll.methods.method_named`."""
    if name not in method_names():
        raise argparse.ArgumentTypeError(f"unknown method {name!r}; choose from {', '.join(method_names())}")
    return name


def integer(minimum: Optional[int] = None) -> Callable[[str], int]:
    """An argparse ``type`` for integers ``>= minimum`` (any where None): out of range is argparse's one-line usage
    error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer; got {text!r}") from None
        if minimum is not None and value < minimum:
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


def utf8_text(text: str) -> str:
    """An argparse ``type`` for a text to explain: refuses one that the shell passed in another encoding than UTF-8
    (Python keeps its bytes as surrogates, ``caf\\udce9`` for Latin-1 ``café``), which no tokenizer takes."""
    try:
        text.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeDecodeError as error:
        raise argparse.ArgumentTypeError(f"'{readable(text)}' is {not_utf8(error)}: give texts in UTF-8") from None
    return text


def non_blank(text: str) -> str:
    """An argparse ``type`` for a text to explain: refuses an empty or white-space-only text, or one not in UTF-8
    (:func:`utf8_text`)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is blank: give the words to explain, e.g. \"a photo of a dog\"")
    return utf8_text(text)


def colormap(name: str) -> str:
    """An argparse ``type`` for ``--cmap``: a matplotlib colormap name, checked before any model is built."""
    if name == DEFAULT_COLORMAP:  # argparse passes the default through here too: it needs no matplotlib import
        return name
    try:
        named_colormap(name)
    except OptionValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return name


def given_path(text: str) -> str:
    """An argparse ``type`` for a file or folder the user names: refuses an empty name, which ``Path("")`` reads as
    the current folder (``--out ""`` wrote there, ``annotate ""`` read it, both without a word)."""
    if not text:
        raise argparse.ArgumentTypeError("the path is empty; give a name (. for the current folder)")
    return text


def readable_text_file(what: str) -> Callable[[str], str]:
    """An argparse ``type`` for a small text file the user gives (``--class-names``): one readable as UTF-8 text,
    checked before any model loads; the run reads it again where it uses it. ``what`` names its use."""

    def parse(text: str) -> str:
        try:
            read_text_file(given_path(text), what)
        except TextFileError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return text

    return parse


def available_devices() -> list[str]:
    """The torch devices this machine can run on: ``cpu``, then ``cuda:0`` … and ``mps`` where present."""
    import torch

    devices = ["cpu"] + [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def check_device(text: str) -> None:
    """Refuse a ``--device`` that is neither ``auto`` nor a device that exists here (``argparse.ArgumentTypeError``,
    naming the available ones). Imports torch unless ``text`` is ``auto`` or ``cpu``."""
    if text in ("auto", "cpu"):
        return
    import torch

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


class DeviceAction(argparse._StoreAction):
    """``--device``: stored as given while parsing, and checked (:func:`check_device`, which imports torch for a GPU)
    by the command line's parser once every other argument has parsed, before any model is built: a mistake
    elsewhere on the line is told without importing torch."""

    def check_parsed(self, value: str) -> None:
        """Raise ``argparse.ArgumentError`` for a device that does not exist here."""
        try:
            check_device(value)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentError(self, str(error)) from None


def output_folder(text: str) -> Path:
    """An argparse ``type`` for ``--out``: a folder that exists or can be made (no file on the way)."""
    path = Path(given_path(text))
    existing = next(ancestor for ancestor in (path, *path.parents)
                    if ancestor.exists() or ancestor == Path(ancestor.anchor))
    if existing == path and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is an existing file, not a folder; choose another --out")
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{text} cannot be made: {existing} is a file, not a folder")
    return path


def pixel_count(text: str) -> Optional[int]:
    """An argparse ``type`` for ``--max-pixels``: a number of pixels (``250000000``), of megapixels (``250M``,
    ``250MP``, as the refusal writes it) or of gigapixels (``1G``, ``1GP``), or ``none`` for no limit."""
    number = text.strip().upper().removesuffix("P") if text.strip()[-2:].upper() in ("MP", "GP") else text.strip()
    if number.lower() == "none":
        return None
    scale = {"M": 1_000_000, "G": 1_000_000_000}.get(number[-1:].upper(), 1)
    try:
        value = float(number[:-1] if scale > 1 else number)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value * scale >= 1):  # inf too: "none" is the one spelling of no limit
        raise argparse.ArgumentTypeError(f"expected a number of pixels ≥ 1 (250000000, 250M or 250MP, 1G or 1GP) or "
                                         f"none for no limit; got {text!r}")
    return round(value * scale)


def add_max_pixels_argument(group: "argparse._ActionsContainer", images: str = "images") -> None:
    """``--max-pixels N``: the largest image to decode (:func:`~vitroll.io.images.load_image`'s ``max_pixels``);
    ``images`` says which images it limits."""
    group.add_argument("--max-pixels", type=pixel_count, default=f"{DEFAULT_MAX_PIXELS // 1_000_000}M", metavar="N",
                       help=f"refuse {images} larger than N pixels, read from the file's header before decoding: "
                            "250000000, 250M, 1G or none (default: %(default)s, about 10 GiB of memory for an "
                            "overlay at full size)")


def add_device_argument(group: "argparse._ActionsContainer") -> None:
    group.add_argument("--device", action=DeviceAction, default="auto", metavar="DEVICE",
                       help="cpu, cuda, cuda:1, mps, … (default: auto, cuda when available, else cpu)")


def add_out_argument(group: "argparse._ActionsContainer", default: str | None, what: str = "output folder") -> None:
    """``--out DIR``, required when there is no ``default`` folder."""
    group.add_argument("--out", type=output_folder, metavar="DIR", default=default, required=default is None,
                       help=what if default is None else f"{what} (default: %(default)s/)")


def add_batch_size_argument(group: "argparse._ActionsContainer", default: int, items: str = "images") -> None:
    """``--batch-size N``: how many ``items`` go through the model at once."""
    group.add_argument("--batch-size", type=integer(1), default=default, metavar="N",
                       help=f"{items} per forward pass (default: %(default)s)")


def add_progress_argument(parser: "argparse._ActionsContainer") -> None:
    """``--no-progress``: no progress bar on stderr (``args.no_progress``)."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


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


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=TESTBED_NAME, metavar="MODEL",
                       help=f"timm model name, hf-hub:org/name, a transformers folder or hub id, torchvision:ARCH or "
                            f"open_clip:ARCH (default: {TESTBED_NAME}, the shapes testbed ViT shipped with vitroll)")
    group.add_argument("--checkpoint", type=given_path, metavar="FILE",
                       help="local weights: .safetensors, or .pth/.pt/.bin (read with weights_only=True)")
    add_trust_checkpoint_argument(group)
    group.add_argument("--pretrained", action="store_true",
                       help="load the pretrained weights (timm's or torchvision's; hub or local cache)")
    group.add_argument("--num-classes", type=integer(1), metavar="N",
                       help="classifier size (default: the checkpoint's head, else the model's own)")
    group.add_argument("--class-names", type=readable_text_file("class names"), metavar="FILE",
                       help="class names file: one per line, or JSON")
    add_device_argument(group)
    group.add_argument("--crop-pct", type=number(0, 1, low_open=True), metavar="FRACTION",
                       help="override the model's crop_pct, in (0, 1] (1.0: no margin)")
    group.add_argument("--crop-mode", choices=("center", "squash", "border"),
                       help="with --crop-pct 1 the model sees the whole image: squash stretches it to the model's "
                            "input, border fits it inside and pads the rest with the mean colour")
    group.add_argument("--input-size", type=integer(1), nargs=2, metavar=("H", "W"),
                       help="override the model input size (models built with --img-size or --dynamic-img-size)")
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


class _Unset(str):
    """A flag's default, told apart from the same word given on the command line."""


class OnceAction(argparse._StoreAction):
    """A flag given at most once: a second value is an error naming both values and then ``repeated`` (what to do
    instead), where argparse would keep the last one without a word."""

    def __init__(self, *args: object, repeated: str, default: Optional[str] = None, **kwargs: object) -> None:
        super().__init__(*args, default=None if default is None else _Unset(default), **kwargs)  # type: ignore[misc]
        self.repeated = repeated

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        earlier = getattr(namespace, self.dest, None)
        if earlier is not None and not isinstance(earlier, _Unset):
            raise argparse.ArgumentError(self, f"given twice ({earlier}, then {values}); {self.repeated}")
        super().__call__(parser, namespace, values, option_string)


IMAGE_ONLY_METHODS = ("center",)
"""Methods that explain images alone (a text model refuses them when it runs), left out of ``vitroll text --help``."""


def add_method_arguments(parser: argparse.ArgumentParser, default: str = "rollout",
                         repeated: Optional[str] = None, *, texts: bool = False) -> None:
    """``--method`` and its options; ``default`` is what ``--help`` states as the default method; ``repeated``, where
    given, makes a second ``--method`` an error that says it (:class:`OnceAction`) rather than the last one counting;
    with ``texts``, the methods listed are those a text model takes."""
    group = parser.add_argument_group("method (unset options keep the method's default; a flag it does not take is "
                                      "ignored with a warning; `vitroll methods` lists each method's options)")
    once = {"action": OnceAction, "repeated": repeated} if repeated else {}
    listed = [name for name in method_names() if not (texts and name in IMAGE_ONLY_METHODS)]
    group.add_argument("--method", default="rollout", choices=method_names(), metavar="METHOD",
                       help=f"saliency method: {', '.join(listed)} (default: {default})", **once)
    add_method_options(group)


def key_value(text: str) -> tuple[str, str]:
    """An argparse ``type`` for ``--option KEY=VALUE``: the option's name (``-`` read as ``_``) and its text."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE; got {text!r}")
    return key.strip().replace("-", "_"), value.strip()


MODEL_ARGUMENT_FLAGS = {**{name: FLAGS[name] for name in ("img_size", "dynamic_img_size", "num_classes", "pretrained")},
                        "checkpoint_path": FLAGS["checkpoint"]}
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
                       help="class explained by the gradient methods and occlusion (default: the prediction)")
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


def add_colour_arguments(group: "argparse._ActionsContainer") -> None:
    """``--cmap`` and ``--alpha``: how a map is coloured and blended over its image."""
    group.add_argument("--cmap", type=colormap, default=DEFAULT_COLORMAP, metavar="COLORMAP",
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
