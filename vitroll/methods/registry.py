"""The method registry: what each method takes, checking it, and calling the method.

A method is written once as ``compute(model, images, *, option=default, …) -> Saliency`` and registered with
:func:`register_method`. Its parameters after ``images``, with their annotations and defaults, *are* its options:
:class:`Method` reads them from the signature (the signature is the contract, as in captum), so there is no
second list to keep in step. Calling a registered method checks the options first (an unknown name or a value of
the wrong type is one :class:`~vitroll.errors.MethodOptionError` that names the option, the method and what it
takes), then runs it, retrying a batch that runs out of memory in halves.
"""

from __future__ import annotations

import collections.abc
import contextlib
import functools
import inspect
import math
import numbers
import sys
import textwrap
import threading
import types
import typing
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from vitroll.errors import MethodOptionError, VitrollError
from vitroll.methods.base import Saliency, SaliencyMethod, check_model
from vitroll.methods.gradients import TargetOutOfRange
from vitroll.io.text import TextReadout, TokenBatch
from vitroll.methods.inputs import Batch, Inputs, model_batch
from vitroll.methods.map_checks import UNTRAINED, shown_values, warn_constant_maps, warn_non_finite_maps
from vitroll.methods.text_batch import Position
from vitroll.wording import argument, positional_refusal

_NO_DEFAULT = inspect.Parameter.empty
_NONE_WORDS = ("none", "None", "null")
_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def type_name(hint: object) -> str:
    """A type hint as a user reads it: ``int``, ``str | None``, ``'scipy' | 'networkx'``, ``Sequence[int]``."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(argument) for argument in arguments)
    if origin is Literal:
        return " | ".join(repr(argument) for argument in arguments)
    if hint is type(None):
        return "None"
    if origin is not None and arguments:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in arguments)}]"
    return getattr(hint, "__name__", str(hint))


def _matches(value: object, hint: object) -> bool:
    """Whether ``value`` is of type ``hint``; a hint this check cannot read (a Protocol, a TypeVar) lets it pass."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_matches(value, argument) for argument in arguments)
    if origin is Literal:
        return any(value == choice and type(value) is type(choice) for choice in arguments)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # NumPy's integers count, True does not
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if origin is not None and isinstance(origin, type) and issubclass(origin, collections.abc.Sequence):
        if not isinstance(value, origin) or isinstance(value, str):
            return False
        return not arguments or all(_matches(item, arguments[0]) for item in value)
    if isinstance(hint, type) and hint is not object:
        return isinstance(value, hint)
    return True


def check_value(value: object, hint: object, what: str) -> None:
    """Refuse ``value`` unless it is of type ``hint`` (a float is no ``int``, even a whole one; True is no number).

    Raises
    ------
    MethodOptionError
        ``{what} takes {type}; got {value} ({its type})``.
    """
    if not _matches(value, hint):
        raise MethodOptionError(f"{what} takes {type_name(hint)}; got {value!r} ({type(value).__name__})")


def _parse(text: str, hint: object) -> object:
    """``text`` as a value of type ``hint``; raises ValueError when it is not one."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if text in _NONE_WORDS and type(None) in arguments:
            return None
        for member in arguments:
            with contextlib.suppress(ValueError):
                return _parse(text, member)
        raise ValueError(text)
    if origin is Literal:
        for choice in arguments:
            with contextlib.suppress(ValueError):
                if _parse(text, type(choice)) == choice:
                    return choice
        raise ValueError(text)
    if origin is not None and isinstance(origin, type) and issubclass(origin, collections.abc.Sequence) and arguments:
        return [_parse(part.strip(), arguments[0]) for part in text.split(",")]
    if hint is type(None) and text in _NONE_WORDS:
        return None
    if hint is bool and text.lower() in _BOOL_WORDS:
        return _BOOL_WORDS[text.lower()]
    if hint is int:
        return int(text)
    if hint is float and math.isfinite(float(text)):
        return float(text)
    if hint is str or hint is Any or hint is object:
        return text
    if hint is torch.dtype and isinstance(getattr(torch, text, None), torch.dtype):
        return getattr(torch, text)
    raise ValueError(text)


@dataclass(frozen=True)
class MethodOption:
    """One option of a method: a parameter of its ``compute`` after ``images``."""

    name: str
    hint: object
    """The resolved annotation (``Any`` where the parameter has none)."""
    default: object
    """The default value, or :data:`inspect.Parameter.empty` where the option must be given."""

    @property
    def type_name(self) -> str:
        return type_name(self.hint)

    def describe(self) -> str:
        """``name: type = default``, as ``vitroll methods`` lists it."""
        default = "" if self.default is _NO_DEFAULT else f" = {self.default!r}"
        return f"{self.name}: {self.type_name}{default}"


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure (CUDA or CPU), as opposed to a bug."""
    if isinstance(error, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


PER_IMAGE_OPTIONS = ("target_class",)
"""Options that may hold one value per image; a batch split in parts splits them with it."""


def options_of_rows(options: Mapping[str, object], rows: slice, batch: int) -> dict[str, object]:
    """``options`` for the images ``rows`` of a batch of ``batch``: a per-image option with one value per image
    (a sequence, 1-D tensor or 1-D array of length ``batch``) is sliced, everything else kept."""

    def per_image(value: object) -> bool:
        if isinstance(value, (torch.Tensor, np.ndarray)):
            return value.ndim == 1 and len(value) == batch
        return isinstance(value, collections.abc.Sequence) and not isinstance(value, str) and len(value) == batch

    return {name: value[rows] if name in PER_IMAGE_OPTIONS and per_image(value) else value
            for name, value in options.items()}


def _in_halves_when_out_of_memory(compute: SaliencyMethod, model: nn.Module, images: Batch,
                                  options: Mapping[str, object]) -> Saliency:
    """``compute(model, images, **options)``; when the batch runs out of memory, retry it in halves (recursively)
    with a note on stderr, so a too-large batch costs speed, not the run."""
    try:
        return compute(model, images, **options)
    except (RuntimeError, MemoryError) as error:
        if not is_out_of_memory(error):
            raise
        if len(images) == 1:
            raise VitrollError(f"out of memory on a single input of shape {tuple(images.shape[1:])}; lower "
                               f"{argument('max_attention_memory')} or the input size") from None
    if torch.cuda.is_available():  # here, not in the except block, whose traceback still holds the batch's tensors
        torch.cuda.empty_cache()
    half = (len(images) + 1) // 2
    print(f"vitroll: note: a batch of {len(images)} ran out of memory; retrying as {half} + {len(images) - half}",
          file=sys.stderr)
    try:
        parts = [_in_halves_when_out_of_memory(compute, model, images[rows],
                                               options_of_rows(options, rows, len(images)))
                 for rows in (slice(None, half), slice(half, None))]
    except TargetOutOfRange as error:  # named by its input in this batch, not in the part that raised it
        raise TargetOutOfRange(options["target_class"], len(images), error.num_classes) from None
    logits = None if parts[0].logits is None else torch.cat([part.logits for part in parts])
    return Saliency(torch.cat([part.maps for part in parts]), logits)


@dataclass(frozen=True)
class Method:
    """A registered saliency method: its ``compute`` function and what running it needs.

    Call it as ``method(model, inputs, **options)``: the options are checked against ``compute``'s signature,
    then ``compute`` runs, in halves of the batch while a batch runs out of memory. Returns :class:`Saliency`,
    the maps (B, h, w) (token scores (B, L) for a text model) and the logits (B, num_classes) of the same forward
    pass. For a text model, the keywords ``attention_mask``, ``tokenizer``, ``readout`` and ``position`` say how
    ``inputs`` become tokens and which row is explained (:func:`~vitroll.methods.text_batch.text_batch`).
    """

    name: str
    compute: SaliencyMethod
    needs_gradients: bool = False
    """Whether it runs a backward pass (so the model's parameters must allow gradients)."""
    requires: tuple[str, ...] = ()
    """Optional packages it imports (``captum``)."""
    checks_constant_maps: bool = True
    """Whether a call warns of (near-)constant maps (:func:`~vitroll.methods.map_checks.warn_constant_maps`): False
    for a baseline, whose map means nothing by design, and a method that warns itself, naming a cause it knows."""

    @functools.cached_property
    def options(self) -> dict[str, MethodOption]:
        """Its options in signature order: every parameter after ``model`` and ``images``."""
        parameters = list(inspect.signature(self.compute).parameters.values())[2:]
        try:
            hints = typing.get_type_hints(self.compute)
        except NameError:  # an annotation imported only for type checkers: such options take any value
            hints = {}
        return {p.name: MethodOption(p.name, hints.get(p.name, Any), p.default) for p in parameters
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}

    @functools.cached_property
    def takes_any_option(self) -> bool:
        """A ``compute(model, images, **options)`` passes on whatever it is given: nothing to check."""
        return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(self.compute).parameters.values())

    def takes(self, name: str) -> bool:
        return self.takes_any_option or name in self.options

    def option_list(self) -> str:
        """``head_fusion, layer, …``: the names of its options, or ``no options``."""
        return ", ".join(self.options) or "no options"

    def _option(self, name: str) -> MethodOption:
        methods_taking([self], name)
        return self.options[name]

    def check(self, options: Mapping[str, object]) -> dict[str, object]:
        """``options`` as a dict, after checking every name and value type.

        Raises
        ------
        MethodOptionError
            Naming the first option that this method does not take, or whose value is not of its type.
        """
        if self.takes_any_option:
            return dict(options)
        for name, value in options.items():
            check_value(value, self._option(name).hint, f"option {name!r} of method {self.name!r}")
        return dict(options)

    def parse(self, name: str, text: str) -> object:
        """The value ``text`` (as given on a command line) stands for, read as option ``name``'s type: ``none``,
        ``true``/``false``, numbers, comma-separated lists and dtype names (``float16``) are understood."""
        if self.takes_any_option and name not in self.options:
            return text
        option = self._option(name)
        try:
            return _parse(text, option.hint)
        except ValueError:
            raise MethodOptionError(f"option {name!r} of method {self.name!r} takes {option.type_name}; "
                                    f"got {text!r}") from None

    def among(self, shared: Mapping[str, object]) -> dict[str, object]:
        """The entries of ``shared`` (options given to several methods at once) that this method takes."""
        return {name: value for name, value in shared.items() if self.takes(name)}

    def __call__(self, model: nn.Module, inputs: Inputs, *, attention_mask: Optional[torch.Tensor] = None,
                 tokenizer: Optional[Any] = None, readout: Optional[TextReadout] = None,
                 position: Optional[Position] = None, **options: object) -> Saliency:
        check_model(model)
        options = self.check(options)
        # converted once, before any halving: a batch of paths, PIL images or strings is split as the batch it becomes
        batch = model_batch(model, inputs, attention_mask=attention_mask, tokenizer=tokenizer, readout=readout,
                            position=position)
        with _exclusive(model):
            saliency = _in_halves_when_out_of_memory(self.compute, model, batch, options)
        if self.checks_constant_maps:
            mask = batch.attention_mask if isinstance(batch, TokenBatch) else None
            warn_constant_maps(self.name, shown_values(saliency.maps, mask), UNTRAINED,
                               key=(self.name, tuple(saliency.maps.shape[1:]) if mask is None else "texts"))
        return saliency


_MODEL_LOCKS: "weakref.WeakKeyDictionary[nn.Module, threading.RLock]" = weakref.WeakKeyDictionary()
_MODEL_LOCKS_GUARD = threading.Lock()


def _exclusive(model: nn.Module) -> threading.RLock:
    """The lock that one method call holds on ``model``: a call hooks its modules, switches it to eval mode and back
    and toggles flags, all of which a second thread's call on the same model would see half-way; calls on one model
    therefore take turns (a method calling another on the same thread goes straight on)."""
    with _MODEL_LOCKS_GUARD:
        return _MODEL_LOCKS.setdefault(model, threading.RLock())


_TEXT_KEYWORDS = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
                  for name, hint in typing.get_type_hints(Method.__call__).items()
                  if name in ("attention_mask", "tokenizer", "readout", "position")]
"""The keywords of :meth:`Method.__call__` that turn texts into tokens, as every public verb takes them too."""

_INPUTS_DOC = ("Images: a preprocessed batch (B, C, H, W) (C = 3, or 1 for a model that takes grey), or PIL images, "
               "paths or uint8 arrays (H, W, 3) or (H, W); "
               "texts for a text model: token ids (B, L) with ``attention_mask=``, or strings with ``tokenizer=`` "
               "(:data:`~vitroll.methods.inputs.Inputs`).")
SHARED_PARAMETERS: dict[str, tuple[str, str]] = {
    "model": ("nn.Module", "A model of a registered family (timm, torchvision, transformers, open_clip, or one added "
                           "with :func:`vitroll.register_family`), on any device."),
    "inputs": ("Inputs", _INPUTS_DOC),
    "images": ("Inputs", _INPUTS_DOC),
    "attention_mask": ("Tensor (B, L), optional", "Text models: 1 at the real tokens of the ids, 0 at padding "
                                                  "(default all ones)."),
    "tokenizer": ("optional", "Text models: turns strings into ids (default: the model's own, "
                              ":func:`vitroll.use_tokenizer`)."),
    "readout": ('{"class_token", "token_mean", "position"}, optional',
                "Text models: the row explained (default the model's own: the class token for a classifier, a "
                "position for a language model)."),
    "position": ("int, sequence of B ints or Tensor (B,), optional",
                 "Text models with ``readout='position'``: the position explained, counted among the real tokens "
                 "(−1: the last)."),
    "target_class": ("None, int, or B ints (sequence, array, tensor)",
                     "The class explained, for every input or one per input (default: each input's predicted class)."),
    "max_attention_memory": ("int, optional", "Attention memory budget in bytes while recording (default 1 GiB, more "
                                              "on a GPU with room); see :func:`record_attention`."),
}
"""numpydoc entries (type, description) of the parameters many public verbs share: :func:`register_method` adds
those a method's docstring does not document itself, so ``help(vitroll.chefer)`` lists every parameter."""

_DEFAULT_RETURNS = ("Tensor, shape (B, h, w), float32, on the model's device\n"
                    "    One map per input on the model's patch grid; for a text model token scores (B, L), padded "
                    "positions 0.")


def _sections(doc: str) -> tuple[list[str], dict[str, list[str]]]:
    """A numpydoc docstring as its lines before the first section and its sections by title (header lines kept)."""
    lines = inspect.cleandoc(doc).splitlines()
    starts = [i for i in range(len(lines) - 1)
              if lines[i].strip() and set(lines[i + 1].strip()) == {"-"} and not lines[i].startswith(" ")]
    sections = {lines[start]: lines[start: end] for start, end in zip(starts, [*starts[1:], len(lines)])}
    return lines[: starts[0] if starts else len(lines)], sections


def documented_parameters(doc: Optional[str]) -> dict[str, list[str]]:
    """The entries of a numpydoc docstring's Parameters section, by parameter name (``**options`` as ``options``),
    each as its lines."""
    _, sections = _sections(doc or "")
    entries: dict[str, list[str]] = {}
    for line in sections.get("Parameters", [])[2:]:
        if line.strip() and not line.startswith(" "):
            name = line.split(" : ")[0].strip().lstrip("*")
            entries[name] = []
        if entries:
            entries[list(entries)[-1]].append(line)
    return {name: [*lines[:1], *(line for line in lines[1:] if line.strip())] for name, lines in entries.items()}


def verb_docstring(doc: Optional[str], signature: inspect.Signature) -> str:
    """``doc`` with a Parameters section documenting every parameter of ``signature`` in its order (the shared ones
    from :data:`SHARED_PARAMETERS` where ``doc`` has none) and a Returns section (maps (B, h, w)) where it has none."""
    head, sections = _sections(doc or "")
    own = documented_parameters(doc)
    entries = []
    for name in signature.parameters:
        if name in own:
            entries += own.pop(name)
        elif name in SHARED_PARAMETERS:
            kind, description = SHARED_PARAMETERS[name]
            entries += [f"{name} : {kind}", *textwrap.wrap(description, 116, initial_indent="    ",
                                                           subsequent_indent="    ")]
    entries += [line for lines in own.values() for line in lines]  # documented but not a parameter: left in sight
    sections["Parameters"] = ["Parameters", "----------", *entries, ""]
    sections.setdefault("Returns", ["Returns", "-------", *_DEFAULT_RETURNS.splitlines(), ""])
    order = ["Parameters", "Returns", *(title for title in sections if title not in ("Parameters", "Returns"))]
    body = [line for title in order for line in sections[title]]
    return "\n".join([*head, *([""] if head and head[-1].strip() else []), *body]).rstrip() + "\n"


METHODS: dict[str, Method] = {}
"""Every registered method by name: what ``--method`` offers and ``vitroll methods`` lists."""


def _positional_refusal(verb: str, method: Method, extra: tuple[object, ...]) -> str:
    """Why ``verb`` (its Python name: ``random_map`` for method ``random``) refuses ``extra``, the values given after
    the model and the inputs, naming the keywords to give them by."""
    return positional_refusal(verb, "the model and the inputs", "model, inputs", list(method.options), extra)


def register_method(name: str, *, needs_gradients: bool = False, requires: tuple[str, ...] = (),
                    checks_constant_maps: bool = True) -> Callable[[SaliencyMethod], Callable[..., torch.Tensor]]:
    """Register ``compute`` as :class:`Method` ``name``; return its public verb, which takes the same arguments
    and the text keywords of :meth:`Method.__call__`, goes through the same checks and returns only the maps
    (B, h, w), or the token scores (B, L) of a text model, with a ``UserWarning`` when any is not finite
    (:func:`~vitroll.methods.map_checks.warn_non_finite_maps`; the pipelines, which call the :class:`Method`, fail
    such an image instead)."""

    def decorate(compute: SaliencyMethod) -> Callable[..., torch.Tensor]:
        method = METHODS[name] = Method(name, compute, needs_gradients=needs_gradients, requires=requires,
                                        checks_constant_maps=checks_constant_maps)

        @functools.wraps(compute)
        def maps_only(model: nn.Module, inputs: Inputs, *extra: object, **options: object) -> torch.Tensor:
            if extra:  # Python's own refusal, a bare TypeError, names no option
                raise MethodOptionError(_positional_refusal(compute.__name__, method, extra))
            maps = method(model, inputs, **options).maps
            warn_non_finite_maps(name, maps, inputs)
            return maps

        # help() and get_type_hints read these: compute's parameters with the text keywords, the maps as the return;
        # the second parameter is named `inputs` whatever compute calls it, since that is the keyword maps_only takes
        model_parameter, inputs_parameter, *own = inspect.signature(compute).parameters.values()
        maps_only.__signature__ = inspect.signature(compute).replace(
            parameters=[model_parameter, inputs_parameter.replace(name="inputs"), *_TEXT_KEYWORDS, *own],
            return_annotation=torch.Tensor)
        maps_only.__doc__ = verb_docstring(compute.__doc__, maps_only.__signature__)
        annotations = dict(compute.__annotations__)
        annotations["inputs"] = annotations.pop(inputs_parameter.name, Inputs)
        maps_only.__annotations__ = {**annotations, **{p.name: p.annotation for p in _TEXT_KEYWORDS},
                                     "return": torch.Tensor}
        return maps_only

    return decorate


def method_named(name: str) -> Method:
    """The registered method ``name``; an unknown name is one VitrollError listing the registered ones."""
    if name not in METHODS:
        raise VitrollError(f"unknown method {name!r}; choose from {', '.join(sorted(METHODS))}")
    return METHODS[name]


def check_shared_options(methods: Iterable[Method], shared: Mapping[str, object]) -> dict[str, object]:
    """Check options given to several methods at once (each method gets those it takes, :meth:`Method.among`).

    Raises
    ------
    MethodOptionError
        For an option none of ``methods`` takes, or a value that a method taking it does not accept.
    """
    methods = list(methods)
    for name in shared:
        methods_taking(methods, name)
    for method in methods:
        method.check(method.among(shared))
    return dict(shared)


def methods_taking(methods: Sequence[Method], name: str) -> list[Method]:
    """Those of ``methods`` that take option ``name``.

    Raises
    ------
    MethodOptionError
        When none does: for one method, naming the options it takes.
    """
    takers = [method for method in methods if method.takes(name)]
    if takers:
        return takers
    if len(methods) == 1:
        raise MethodOptionError(f"method {methods[0].name!r} takes no option {name!r} "
                                f"(it takes: {methods[0].option_list()})")
    raise MethodOptionError(f"none of the methods {', '.join(m.name for m in methods)} takes option {name!r} "
                            "(`vitroll methods` lists what each takes)")
