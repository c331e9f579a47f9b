"""Checks on the maps a method gives, for what a picture of them would hide: a map that is not finite is drawn as no map
at all where it is NaN, the bare image, which reads as "the model looked nowhere", and its inf cells at the ends of the
colormap, as if they were its true extremes; a (near-)constant map is drawn from its minimum to its maximum like any
other, its rounding noise or a spread of a few thousandths filling the whole colormap."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from typing import Hashable, Optional, Sequence

import torch

from vitroll.errors import VitrollError
from vitroll.wording import warnings_collected

NEAR_CONSTANT = 0.01
"""A map whose values all lie within this share of its largest magnitude is near-constant: it tells nothing apart.
The trained shapes testbed's maps, of every method, spread over 20 % (flow on a scikit-image photo) to 100 % of it
(measured on sample_images/ and eight scikit-image photos); untrained timm models' over 0.08 % (chefer, eva02_tiny on
photos) to 8 % (rollout, vit_tiny on photos): a rule between would warn of maps that still follow the input, which is
the sanity check's question, not this one's."""

UNTRAINED = ("drawn from its minimum to its maximum, a spread this small fills the whole colormap and shows nothing "
             "the model tells apart; a model with untrained (random) weights gives such maps")
"""What a near-constant map means when its method knows no more specific cause."""


@dataclass
class _ConstantMaps:
    """What a run's batches told of one key's constant maps: the first's words, how many inputs and batches."""

    method: str
    kind: str
    values: str
    cause: str
    inputs: int = 0
    batches: int = 0

    def line(self) -> str:
        """The one warning of the run, counting the inputs of all its batches."""
        inputs, first = ("1 input", "") if self.inputs == 1 else (f"{self.inputs} inputs", " for the first")
        batches = "its batch" if self.batches == 1 else f"{self.batches} of its batches"
        return (f"vitroll: warning: {self.method}'s map is {self.kind} ({self.values}{first}) for {inputs} of the "
                f"run, in {batches}: {self.cause}")


def near_constant(values: torch.Tensor) -> bool:
    """Whether ``values`` (1-D) lie within :data:`NEAR_CONSTANT` of their largest magnitude (all 0 included; NaN,
    which :func:`non_finite_words` tells of, not)."""
    high, low = values.amax(), values.amin()
    return bool(high - low <= NEAR_CONSTANT * torch.maximum(high.abs(), low.abs()))


def shown_values(maps: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
    """Per input, the values (1-D) that a picture of its map shows: all of an image's map (B, h, w), a text's scores
    (B, L) — or (B, H, L), one row per head — at its real tokens only (``attention_mask`` (B, L) nonzero), its padded
    positions' 0 being drawn nowhere."""
    maps = maps.detach()
    if attention_mask is None:
        return list(maps.flatten(1))
    return [row[..., mask.to(row.device).bool()].flatten() for row, mask in zip(maps, attention_mask)]


def warn_constant_maps(method: str, values: Sequence[torch.Tensor], cause: str, key: Hashable) -> None:
    """One ``vitroll: warning:`` line on stderr when the values (1-D) that any input's map shows are constant or
    near-constant (:func:`near_constant`), naming how many inputs of the batch and which, the values and ``cause`` (in
    the words of where the user is: :func:`~vitroll.wording.argument`); inside :func:`~vitroll.wording.told_at_the_end`,
    counted for ``key`` and told once at its end. Inputs of fewer than two values are skipped. A key names what
    decides the cause, never a text's padded length: a run of texts in batches of several lengths is told once, not
    once a length."""
    constant = [(index, row) for index, row in enumerate(values) if len(row) > 1 and near_constant(row)]
    if not constant:
        return
    kind, values_told = constancy(constant[0][1])
    collected = warnings_collected()
    if collected is not None:
        told = collected.setdefault(("constant maps", key), _ConstantMaps(method, kind, values_told, cause))
        told.inputs += len(constant)
        told.batches += 1
        return
    indices = ", ".join(str(index) for index, _ in constant)
    inputs = (f"input {indices} of the batch" if len(values) == 1 else
              f"{len(constant)} of the {len(values)} inputs of the batch ({indices})")
    print(f"vitroll: warning: {method}'s map is {kind} ({values_told}) for {inputs}: {cause}", file=sys.stderr)


def constancy(values: torch.Tensor) -> tuple[str, str]:
    """How constant ``values`` (1-D, near-constant: :func:`near_constant`) are, in words: ``("constant", "all 0")``,
    or ``("near-constant", "0.5, all within 0.12% of it")`` (the spread's share of the largest magnitude, to two
    significant digits: ``3e-05%``, not ``0.00%``)."""
    row = values.detach().double()
    if bool((row == row[0]).all()):
        return "constant", f"all {float(row[0]):.4g}"
    spread = float((row.amax() - row.amin()) / row.abs().amax())
    return "near-constant", f"{float(row.mean()):.4g}, all within {spread * 100:.2g}% of it"


def non_finite_words(maps: "torch.Tensor | Sequence[torch.Tensor]") -> list[Optional[str]]:
    """Per input, what is not finite in its map, in words, or None when all of it is finite.

    Parameters
    ----------
    maps : Tensor, shape (B, ...), or a sequence of B tensors
        One map per input, of any shape after the batch axis ((h, w), (T, h, w) one per text, (K, h, w) one per
        caption token, (L,) token scores).

    Returns
    -------
    list of B str or None
        ``no finite value``, or ``NaN or inf at 3 of its 196 values``.
    """
    rows = [torch.as_tensor(row).detach().flatten() for row in maps]
    counts = [int((~torch.isfinite(row)).sum()) for row in rows]
    return [None if count == 0 else "no finite value" if count == row.numel()
            else f"NaN or inf at {count} of its {row.numel()} values" for count, row in zip(counts, rows)]


def non_finite_cause(input_finite: bool) -> str:
    """Why an input's map is not finite, as far as the input tells: NaN or inf in the input itself (which every
    method carries into the whole map), else in what the model makes of it."""
    if not input_finite:
        return "the input holds NaN or inf, which every method carries into the whole map"
    return ("the input is finite, the model's output is not: does the model hold NaN or inf in its weights, or "
            "overflow at the precision it runs in?")


def non_finite_problems(inputs: Optional[torch.Tensor],
                        maps: Sequence[tuple[str, "torch.Tensor | Sequence[torch.Tensor]"]]) -> dict[int, str]:
    """Why an input of a batch gets no answer: the first method whose map of it holds NaN or inf (a picture of it
    would be the bare image, which reads as "the model looked nowhere"; a score of it, NaN), what of it and why
    (:func:`non_finite_cause`), in the one wording every command fails such an input with.

    Parameters
    ----------
    inputs : Tensor, shape (B, ...), or None
        The batch the maps were computed from, whose values tell whether the input itself holds NaN or inf; None when
        it cannot hold any.
    maps : sequence of (method, maps)
        Each method's maps of the batch: a tensor (B, ...) or B tensors of any shape (:func:`non_finite_words`).

    Returns
    -------
    dict of int to str
        By input index, ``rollout's map holds no finite value: the input is finite, the model's output is not: …``;
        inputs whose every map is finite are absent.
    """
    problems: dict[int, str] = {}
    for method, method_maps in maps:
        for index, words in enumerate(non_finite_words(method_maps)):
            if words is not None and index not in problems:
                problems[index] = f"{method}'s map holds {words}: {non_finite_cause(_finite_input(inputs, index))}"
    return problems


def _finite_input(inputs: object, index: int) -> bool:
    """Whether input ``index`` of ``inputs`` is finite: only a float tensor (B, ...) can hold NaN or inf, not paths,
    images or token ids."""
    return not (isinstance(inputs, torch.Tensor) and inputs.is_floating_point()) or bool(
        torch.isfinite(inputs[index]).all())


def refuse_non_finite_maps(inputs: Optional[torch.Tensor],
                           maps: Sequence[tuple[str, "torch.Tensor | Sequence[torch.Tensor]"]],
                           names: Sequence[str], stops: str) -> None:
    """For a command that cannot leave an input out (its answer is over all of them): raise :class:`VitrollError`
    naming the first input whose map holds NaN or inf (``names``, by index), in the words of
    :func:`non_finite_problems`, how many others do, and ``stops``, why the command stops there."""
    problems = non_finite_problems(inputs, maps)
    if not problems:
        return
    first = min(problems)
    others = len(problems) - 1
    more = (f" (so {'does' if others == 1 else 'do'} {others} other input{'s' if others > 1 else ''} of the "
            f"{len(names)} run with it)" if others else "")
    raise VitrollError(f"{names[first]}: {problems[first]}{more}; {stops}")


def warn_non_finite_maps(method: str, maps: torch.Tensor, inputs: object) -> None:
    """A ``UserWarning`` naming how many of the maps (B, ...) that ``method`` gave for ``inputs`` hold NaN or inf, which
    of them and why (:func:`non_finite_cause`; only a float tensor of inputs can hold NaN); nothing when all are
    finite. The maps are returned as they are: a caller that draws one sees the bare image where the map is NaN."""
    problems = [(index, words) for index, words in enumerate(non_finite_words(maps)) if words is not None]
    if not problems:
        return
    groups: dict[tuple[str, str], list[int]] = {}
    for index, words in problems:
        cause = non_finite_cause(_finite_input(inputs, index))
        groups.setdefault((words, cause), []).append(index)
    details = "; ".join(f"input{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))}: {words} — {cause}"
                        for (words, cause), indices in groups.items())
    warnings.warn(f"{method}: {len(problems)} of {len(maps)} maps are not finite, which a picture of them shows as no "
                  f"map at all: {details}", UserWarning, stacklevel=3)
