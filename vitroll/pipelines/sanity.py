"""Model-parameter randomisation test (Adebayo et al. 2018, "Sanity Checks for Saliency Maps").

The classifier head, then each transformer block from the top down (as the model's family names them), is
re-initialised in cascade; after every step each method's maps are compared with the trained model's maps by
Spearman rank correlation. A method whose maps survive the destruction of the weights that they claim to explain
is not explaining the model: it is flagged.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
from torch import nn

from vitroll.capture.families import family_of
from vitroll.errors import OptionValueError, UnsupportedModelError
from vitroll.methods import check_shared_options, method_named
from vitroll.methods.base import class_logits, eval_mode, prepare_inputs
from vitroll.methods.inputs import Inputs
from vitroll.methods.map_checks import refuse_non_finite_maps
from vitroll.methods.registry import options_of_rows
from vitroll.metrics import rank_correlation
from vitroll.wording import counted

FLAG_CORRELATION = 0.5
"""A method is flagged when its maps still correlate this much with the trained ones after all blocks are
re-initialised."""


def reinitialize(module: nn.Module, seed: int) -> None:
    """Re-draw every parameter of ``module`` with its layers' own initialisers (``reset_parameters``;
    LayerScale gains ~ N(0, 0.02)), reproducibly for ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for child in module.modules():
            reset = getattr(child, "reset_parameters", None)
            if callable(reset):
                reset()
            elif isinstance(getattr(child, "gamma", None), nn.Parameter):
                nn.init.normal_(child.gamma, std=0.02)


def randomizable_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(qualified name, submodule) of what a randomisation check re-initialises in ``model``, in cascade order, as
    its family registered (``randomizable=``); submodules without parameters are left out.

    Raises :class:`UnsupportedModelError` for a family that registered none.
    """
    family = family_of(model)
    if family.randomizable is None:
        raise UnsupportedModelError(
            f"sanity: the {family.name} family does not say what a randomisation check re-initialises; register it "
            "with register_family(..., randomizable=lambda model: [head, *blocks from the last to the first])")
    names = {id(module): name for name, module in model.named_modules()}
    return [(names[id(module)], module) for module in family.randomizable(model)
            if any(True for _ in module.parameters())]


def cascade(model: nn.Module, seed: int = 0) -> Iterator[tuple[str, nn.Module]]:
    """Yield (stage name, a copy of ``model`` randomised up to that stage), one stage per module of
    :func:`randomizable_modules` (the head first, then the blocks from the last to the first), stage ``k`` drawn
    with seed ``seed + k``. The input model is not modified."""
    randomized = copy.deepcopy(model)
    for offset, (name, module) in enumerate(randomizable_modules(randomized)):
        reinitialize(module, seed + offset)
        yield name, randomized


@dataclass(frozen=True)
class SanityResult:
    stages: list[str]
    correlations: dict[str, np.ndarray]
    """method → (stages, images) Spearman correlation with the trained model's maps."""

    def flagged(self, threshold: float = FLAG_CORRELATION) -> list[str]:
        """Methods whose maps still correlate ≥ ``threshold`` (mean over images) once every block is random."""
        return [m for m, values in self.correlations.items() if values[-1].mean() >= threshold]

    def table(self) -> list[dict[str, Any]]:
        """One row per method: mean correlation per stage and whether it is flagged."""
        flagged = set(self.flagged())
        return [dict(method=m, **{s: float(v.mean()) for s, v in zip(self.stages, values)}, flagged=m in flagged)
                for m, values in self.correlations.items()]


def sanity_check(
    model: nn.Module,
    images: Inputs,
    methods: Sequence[str],
    *,
    method_options: Optional[dict[str, Any]] = None,
    seed: int = 0,
    batch_size: Optional[int] = None,
    names: Optional[Sequence[str]] = None,
) -> SanityResult:
    """Cascading randomisation for a batch of images: anything a method takes (:data:`~vitroll.methods.inputs.Inputs`:
    a preprocessed batch (B, C, H, W), PIL images, paths, uint8 arrays), ``batch_size`` of them through the model at
    a time (None: all at once; below 1 raises ValueError). ``names``, one per image (its file's), are what an error
    calls an image: a map holding NaN or inf stops the check naming it (default ``input 0``, ``input 1``, …).

    Gradient methods explain the same class at every stage, so only the weights change: ``target_class`` of
    ``method_options`` where given, else the class the *trained* model predicts.
    """

    def maps_of(current: nn.Module, method: str, stage: str = "") -> np.ndarray:
        options = runs[method].among(shared)
        if "target_class" in runs[method].options and options.get("target_class") is None:
            options["target_class"] = predicted
        maps = np.concatenate([runs[method](current, images[rows], **options_of_rows(options, rows, len(images)))
                               .maps.float().cpu().numpy() for rows in batches])
        refuse_non_finite_maps(images, [(method, maps)], [f"{name}{stage}" for name in named],
                               "sanity stops: a map without values correlates with none, which would pass any "
                               "method as one that follows the weights")
        return maps

    if batch_size is not None and batch_size < 1:
        raise OptionValueError(f"batch_size must be ≥ 1 or None; got {batch_size}")
    randomizable_modules(model)  # a family that names nothing to randomise is refused before any map is computed
    runs = {name: method_named(name) for name in methods}
    shared = check_shared_options(runs.values(), method_options or {})
    images = prepare_inputs(model, images)
    named = [f"input {index}" for index in range(len(images))] if names is None else list(names)
    if len(named) != len(images):
        raise OptionValueError(f"names= has {counted(len(named), 'name')} for {counted(len(images), 'image')}: "
                               "give one per image")
    step = len(images) if batch_size is None else batch_size
    batches = [slice(start, start + step) for start in range(0, len(images), step)]
    with eval_mode(model), torch.no_grad():
        predicted = torch.cat([class_logits(model, images[rows]).argmax(dim=-1) for rows in batches])
    trained = {method: maps_of(model, method) for method in runs}  # a method named twice runs once
    stages, correlations = [], {m: [] for m in runs}
    for stage, randomized in cascade(model, seed):
        stages.append(stage)
        for method in runs:
            correlations[method].append(rank_correlation(trained[method],
                                                         maps_of(randomized, method, f" (once {stage} is random)")))
    return SanityResult(stages, {m: np.stack(v) for m, v in correlations.items()})
