"""Counts, articles and argument names in words for the lines vitroll prints and writes."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from typing import Hashable, Iterable, Iterator, Mapping, NamedTuple, Optional, Protocol, Sequence


def counted(number: int, noun: str) -> str:
    """``1 file``, ``2 files``, ``3 studies``."""
    if number == 1:
        return f"{number} {noun}"
    return f"{number} {noun[:-1]}ies" if noun.endswith("y") else f"{number} {noun}s"


def positional_refusal(verb: str, takes: str, call: str, keywords: Sequence[str], extra: tuple[object, ...],
                       suggestion: str = "") -> str:
    """Why ``verb``, which ``takes`` its arguments ``call`` positionally and the ``keywords`` only by name, refuses
    ``extra``, the values given after them; ``suggestion`` (``cmap='jet'``) is the call's tail that names them, by
    default the first keyword."""
    more = ", ".join(repr(value) for value in extra)
    given = f"got {counted(len(extra), 'more positional argument')} ({more})"
    if not keywords:
        return f"{verb} takes {takes}, and no option; {given}"
    return (f"{verb} takes {takes} positionally and every option by keyword; {given}: name "
            f"{'it' if len(extra) == 1 else 'each'}, as {verb}({call}, {suggestion or keywords[0] + '=…'}) "
            f"(its options: {', '.join(keywords)})")


def with_article(word: str) -> str:
    """``a float64``, ``an int64``, ``an object``, ``a uint8``: the indefinite article by the sound of ``word``."""
    lower = word.lower()
    vowel_sound = lower[:1] in ("a", "e", "i", "o") or (lower[:1] == "u"
                                                        and not lower.startswith(("uint", "uni", "us")))
    return f"{'an' if vowel_sound else 'a'} {word}"


FLAGS = {"img_size": "--img-size", "dynamic_img_size": "--dynamic-img-size", "num_classes": "--num-classes",
         "input_size": "--input-size", "checkpoint": "--checkpoint", "trust_checkpoint": "--trust-checkpoint",
         "pretrained": "--pretrained", "max_attention_memory": "--max-attention-memory", "max_pixels": "--max-pixels",
         "frame": "--frame", "out_dir": "--out", "recursive": "--recursive", "save": "--save",
         "precision": "--precision", "position": "--position", "processes": "--processes", "window": "--window",
         "group_by": "--group-by", "salt": "--salt", "flag_threshold": "--flag-threshold", "masks": "--masks",
         "body_masks": "--body-masks", "keep_burned_in_text": "--keep-burned-in-text",
         "discard_ratio": "--discard-ratio", "keep_ids": "--keep-ids",
         "trust_burned_in_header": "--trust-burned-in-header",
         "allow_recognizable_features": "--allow-recognizable-features",
         "allow_recognizable": "--allow-recognizable-features", "device": "--device"}
"""The arguments of models, their loading, preprocessing and methods, of image reading, of the pipelines and of the
audit that have a flag of their own, by keyword; any other model argument is ``--model-arg NAME=VALUE``."""

METHOD_FLAGS = {"head_fusion": "--head-fusion", "discard_ratio": "--discard-ratio",
                "attention_weight": "--attention-weight", "start_layer": "--start-layer",
                "target_class": "--target-class"}
"""The method options that have a flag of their own, by keyword; any other is ``--option NAME=VALUE``
(``max_attention_memory`` too: its flag takes MiB, the option bytes)."""

OFF_SWITCHES = {"resume": "--overwrite"}
"""The arguments whose ``False`` is a switch of its own on the command line (``resume=False`` is ``--overwrite``)."""

_on_the_command_line = False
"""Whether the running command line words errors (:func:`worded_for_the_command_line`): a process-wide switch, not a
context variable, since the commands' threads (the app's handlers, prefetching) raise errors in its words too."""

_typed_as_options: frozenset[str] = frozenset()
"""The method options that the running command line was given with ``--option NAME=VALUE``: errors name them as
typed (:func:`method_option`), those with a flag of their own (:data:`METHOD_FLAGS`) too, not by a flag the user did
not type."""


@contextmanager
def worded_for_the_command_line() -> Iterator[None]:
    """Errors raised inside name the command line's flags (``--img-size 24 24``) rather than the keyword arguments
    (``img_size=(24, 24)``) a Python user passes (:func:`argument`); no method option is yet :func:`typed_as_options`
    inside, whatever was noted outside."""
    global _on_the_command_line, _typed_as_options
    before = _on_the_command_line, _typed_as_options
    _on_the_command_line, _typed_as_options = True, frozenset()
    try:
        yield
    finally:
        _on_the_command_line, _typed_as_options = before


class PageControl(NamedTuple):
    """A page's control that sets an argument: its label and kind, and for a slider the values it takes."""

    label: str
    kind: str
    """``slider``, ``menu``…"""
    minimum: Optional[Fraction] = None
    maximum: Optional[Fraction] = None
    step: Optional[Fraction] = None
    """A slider's values are ``minimum + k · step`` up to ``maximum``."""


_page_controls: ContextVar[Mapping[str, PageControl]] = ContextVar("page_controls", default={})
"""The arguments that the page now being answered sets with controls of its own (:func:`worded_for_a_page`)."""


@contextmanager
def worded_for_a_page(controls: Mapping[str, PageControl]) -> Iterator[None]:
    """Inside, the arguments of ``controls`` (name → the page's control that sets it:
    ``{"discard_ratio": PageControl("discard ratio", "slider")}``) are named by that control (:func:`argument`), on the
    command line as from Python: the page's user moves a slider, they give no flag and call no function. A context
    variable, set in the thread of the page's handler, as other pages' and the command line's threads go on in their
    own words."""
    token = _page_controls.set(controls)
    try:
        yield
    finally:
        _page_controls.reset(token)


def argument(name: str, value: object = None, *, placeholder: str = "") -> str:
    """How the user sets argument ``name`` of a model or of its preprocessing, to ``value`` (if not None) or to a
    ``placeholder`` (``N``), in the words of where they are: ``img_size=(24, 24)`` from Python, ``--img-size 24 24``
    on the command line (``--model-arg depth=2`` for a model argument without a flag of its own; for ``True``, the
    flag of a switch alone, and for ``False`` the switch of :data:`OFF_SWITCHES`), ``discard ratio 0.9 (the page's
    slider)`` for one a page sets with a control (:func:`worded_for_a_page`); ``--option discard_ratio=0.99`` for a
    method option given so (:func:`typed_as_options`)."""
    control = page_control(name)
    if control is not None:
        setting = placeholder or ("" if value is None else str(value))
        return f"{' '.join(filter(None, [control.label, setting]))} (the page's {control.kind})"
    if _on_the_command_line and name in _typed_as_options:
        return method_option(name, placeholder or value)
    if value is None and not placeholder:
        return FLAGS.get(name, f"--model-arg {name}") if _on_the_command_line else name
    if not _on_the_command_line:
        return f"{name}={placeholder or repr(value)}"
    if value is False and name in OFF_SWITCHES:
        return OFF_SWITCHES[name]
    flag = FLAGS.get(name)
    words = placeholder or (" ".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value))
    if flag is None:
        return f"--model-arg {name}={words}"
    return flag if value is True else f"{flag} {words}"


def page_control(name: str) -> Optional[PageControl]:
    """The control of the page now being answered that sets argument ``name`` (:func:`worded_for_a_page`), or None:
    from Python, on the command line, or for an argument the page sets no control for."""
    return _page_controls.get().get(name)


def typed_as_options(names: Iterable[str]) -> None:
    """Note that the running command line was given the method options ``names`` with ``--option NAME=VALUE``, so
    that :func:`method_option` names them so, even those with a flag of their own; until the command ends
    (:func:`worded_for_the_command_line`)."""
    global _typed_as_options
    _typed_as_options = frozenset(names)


def method_option(name: str, value: object = None) -> str:
    """How the user sets option ``name`` of a method, to ``value`` (if not None), in the words of where they are:
    ``start_layer=99`` from Python; on the command line the option's own flag (``--start-layer 99``,
    :data:`METHOD_FLAGS`) unless they gave it with ``--option`` (:func:`typed_as_options`), else
    ``--option steps=0``."""
    if not _on_the_command_line:
        return name if value is None else f"{name}={value!r}"
    flag = None if name in _typed_as_options else METHOD_FLAGS.get(name)
    if flag is None:
        return f"--option {name}" if value is None else f"--option {name}={value}"
    return flag if value is None else f"{flag} {value}"


def model_loading(name: str, *, checkpoint: str = "") -> str:
    """How the user loads model ``name`` (``ARCH`` or ``FOLDER`` stands for any), with weights from ``checkpoint`` if
    given, in the words of where they are: ``--model NAME --checkpoint FILE`` on the command line,
    ``load_model('NAME', checkpoint='FILE')`` from Python; ``name`` empty: ``--model`` or ``load_model`` alone."""
    weights = argument("checkpoint", checkpoint) if checkpoint else ""
    if _on_the_command_line:
        return " ".join(filter(None, ["--model", name, weights]))
    if not name:
        return "load_model"
    return f"load_model({', '.join(filter(None, [name if name in ('ARCH', 'FOLDER') else repr(name), weights]))})"


def arguments(values: "dict[str, object]") -> str:
    """:func:`argument` for each of ``values`` (name → value), as they are given together: ``depth=2, img_size=32``
    from Python, ``--model-arg depth=2 --img-size 32`` on the command line."""
    return (" " if _on_the_command_line else ", ").join(argument(name, value) for name, value in values.items())


def set_command_line_wording() -> None:
    """Word errors for the command line from now on in this process: a worker process the command line starts
    (which begins in Python's words), as :func:`worded_for_the_command_line` does for the command line's own."""
    global _on_the_command_line
    _on_the_command_line = True


def on_the_command_line() -> bool:
    """Whether errors are worded for the command line now (:func:`worded_for_the_command_line`)."""
    return _on_the_command_line


class ToldAtTheEnd(Protocol):
    """A warning that adds up what a run's calls told it and words it once, at the run's end."""

    def line(self) -> str: ...


_told_at_the_end: Optional[dict[Hashable, ToldAtTheEnd]] = None
"""While :func:`told_at_the_end` runs, its warnings by key; None outside it, where each call tells its own."""


@contextmanager
def told_at_the_end() -> Iterator[None]:
    """Collect the warnings that add up over a run (:func:`warnings_collected`) while inside, and print each once on
    stderr at the end: a command that streams its inputs in batches counts all of them in one line, not the first
    batch's. Nested, the outermost tells."""
    global _told_at_the_end
    if _told_at_the_end is not None:
        yield
        return
    _told_at_the_end = {}
    try:
        yield
    finally:
        collected, _told_at_the_end = _told_at_the_end, None
        for warning in collected.values():
            print(warning.line(), file=sys.stderr)


def warnings_collected() -> Optional[dict[Hashable, ToldAtTheEnd]]:
    """The warnings :func:`told_at_the_end` collects, by key, for a caller to add to; None outside it."""
    return _told_at_the_end
