"""User-facing errors.

Every mistake a user can make (a missing file, an unreadable image, an unknown model, a checkpoint that
does not fit) raises a :class:`VitrollError`. Its message is one line that names the thing at fault and
the reason; the CLI prints it without a traceback and exits non-zero.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Callable, TypeVar

from vitroll.wording import method_option, positional_refusal

_Function = TypeVar("_Function", bound=Callable[..., object])

EXIT_USER_ERROR = 2
"""Exit status of a run stopped by a user error."""


class VitrollError(Exception):
    """Base class of errors caused by user input rather than by a bug in vitroll."""


class ImageReadError(VitrollError):
    """An input file is missing or cannot be decoded as an image.

    Parameters
    ----------
    path : object
        The file (a path, or what was given in its place), named first in the message.
    reason : str
        Why it cannot be read, in one line: the message is ``f"{path}: {reason}"``.
    """

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ImageTooLargeError(ImageReadError):
    """An image file states a size (width × height, from its header) over the ``max_pixels`` limit; its reason names
    the size, the limit and how to raise it, and no file."""


class RecognizableFeaturesError(ImageReadError):
    """A DICOM file whose header says RecognizableVisualFeatures YES (a face photograph, a surface rendering), refused
    since its pixels can identify the patient. Its reason names ``allowed_by``, the argument that reads it
    (``allow_recognizable`` of :func:`~vitroll.io.dicom.read_dicom`); a caller with an option of its own for it (the
    audit's ``allow_recognizable_features``) tells the refusal by this type and words it with its option."""

    def __init__(self, path: object, reason: str, allowed_by: str) -> None:
        super().__init__(path, reason)
        self.allowed_by = allowed_by


class ModelLoadError(VitrollError):
    """A model name, pretrained weight or checkpoint cannot be loaded."""


class ForeignWeightsError(ModelLoadError):
    """A checkpoint holds none of the model's weights (another architecture's, or no model's state dict): no option
    of the model makes it fit, unlike a checkpoint of the same model built otherwise."""


class UnsupportedModelError(VitrollError):
    """The model has no token attention that vitroll knows how to read."""


class MethodOptionError(VitrollError, TypeError):
    """A saliency method was given an option it does not take, or a value of the wrong type for one."""


class OptionValueError(VitrollError, ValueError):
    """An option has a value outside what it accepts (a layer the model does not have, an unknown head fusion, a
    ratio out of range). The mistake is the same for every input, so a run over many texts or images stops at once
    with this one message instead of failing each input with it."""


class OptionOutOfRange(OptionValueError):
    """A method option's value beyond what the model has (a layer, a class). ``option`` (its keyword), ``value`` and
    ``rest`` (`` is out of range for a model with 4 layers (0…3)``) let a caller word it with its own name for the
    option, as the explorer does for its controls; the message names it as the user gives it
    (:func:`~vitroll.wording.method_option`: ``--start-layer 99`` on the command line)."""

    def __init__(self, option: str, value: object, rest: str) -> None:
        super().__init__(f"{method_option(option, value)}{rest}")
        self.option, self.value, self.rest = option, value, rest

    def __reduce__(self) -> tuple:  # as a worker process sends it back: its words kept, not its __init__'s arguments
        return _restored, (type(self), self.args, self.__dict__)


def _restored(kind: type[BaseException], args: tuple, state: dict) -> BaseException:
    error = kind.__new__(kind)
    error.args = args
    error.__dict__.update(state)
    return error


class InputValueError(VitrollError, ValueError):
    """An input has a shape, dtype or range the function does not take: images a method cannot batch (a float array,
    a tensor of other channels or size than the model's, raw 0…255 pixels made float), an image or heatmap
    :func:`~vitroll.overlay.overlay` cannot draw. A ValueError too, as the README names it."""


class InputTypeError(VitrollError, TypeError):
    """An input or option of a type the function does not take (a dict as images, a string as ``alpha``). A TypeError
    too, as the README names it."""


class RecorderUsageError(VitrollError, RuntimeError):
    """An :class:`~vitroll.capture.AttentionRecorder` asked for what it has not recorded: attention before a forward
    pass inside its context, gradients without ``keep_graph=True``, an attention-pool layout without its pool weights.
    A RuntimeError too, as it was."""


class GradientContextError(VitrollError, RuntimeError):
    """A gradient method called where no backward pass can run (inside ``torch.inference_mode()``). A RuntimeError
    too, as the README names it."""


class PositionalOptionError(VitrollError, TypeError):
    """An option that a function takes only by keyword given positionally (``overlay(image, heatmap, "jet")``). A
    TypeError too, as Python's own refusal was."""


def options_by_keyword(function: _Function) -> _Function:
    """``function``, refusing values given after its positional parameters with a :class:`PositionalOptionError`
    that names its keyword-only options (Python's own bare TypeError names none), the one each value fits by the
    type of its default where every value fits one (``cmap='jet'``, ``device='cpu'``)."""
    parameters = inspect.signature(function).parameters.values()
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    defaults = {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY}

    @functools.wraps(function)
    def checked(*args: object, **kwargs: object) -> object:
        if len(args) > len(positional):
            extra = args[len(positional):]
            raise PositionalOptionError(positional_refusal(
                function.__name__, " and ".join(positional), ", ".join(positional), list(defaults), extra,
                _fitting_keywords(defaults, extra)))
        return function(*args, **kwargs)

    return checked  # type: ignore[return-value]


def _fitting_keywords(defaults: dict[str, object], extra: tuple[object, ...]) -> str:
    """``cmap='jet'``: each value of ``extra`` named by the first keyword not yet used whose default has its type,
    or ``""`` when some value fits none."""
    named = {}
    for value in extra:
        fitting = [name for name, default in defaults.items() if name not in named and default is not None
                   and default is not inspect.Parameter.empty and type(default) is type(value)]
        if not fitting:
            return ""
        named[fitting[0]] = value
    return ", ".join(f"{name}={value!r}" for name, value in named.items())


def path_of(value: object, name: str, wanted: str, instead: str) -> str:
    """``value`` as a path string when it is a ``str`` or ``os.PathLike``; otherwise an :class:`InputTypeError` that
    names the argument ``name``, the ``wanted`` path and, in ``instead``, what to do with the ``value`` given."""
    if not isinstance(value, (str, os.PathLike)):
        raise InputTypeError(f"{name} must be {wanted} (a str or os.PathLike); got {type(value).__name__}: {instead}")
    return os.fspath(value)


def one_line(error: BaseException) -> str:
    """A user error as the CLI prints it after ``vitroll: error:`` (a file-system error with the file it names)."""
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}"
    return str(error)
