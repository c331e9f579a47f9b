"""timm models by name: close matches for a mistyped name, and building one with whatever must come from the hub
taken from the local cache when the hub is unreachable."""

from __future__ import annotations

import contextlib
import difflib
import inspect
import sys
from typing import Iterable, Iterator, Mapping, Optional

import torch
from torch import nn

from vitroll.capture.families import FAMILIES, imported_types, refusal_of_module, unsupported_message
from vitroll.errors import ModelLoadError, UnsupportedModelError
from vitroll.models import hub
from vitroll.wording import argument


def supported_timm_names(pattern: str = "", *, pretrained: bool = False) -> set[str]:
    """timm's model names that a registered family explains: those of the families' ``timm_modules`` (by name, no
    model built), matching ``pattern`` (a ``timm.list_models`` filter; all names without it)."""
    import timm

    return {name for family in FAMILIES for module in family.timm_modules
            for name in timm.list_models(pattern, module=module, pretrained=pretrained)}


def close_names(name: str, candidates: Iterable[str], count: int = 3) -> list[str]:
    """Up to ``count`` of ``candidates`` most like ``name``, the closest first: like the whole candidate (difflib
    ratio at least 0.6), or its start typed with a slip (``vit_tinny`` for ``vit_tiny_patch16_224``: ratio of the
    first ``len(name)`` characters at least 0.8)."""

    def likeness(candidate: str) -> tuple[float, float]:
        whole = difflib.SequenceMatcher(None, name, candidate).ratio()
        start = difflib.SequenceMatcher(None, name, candidate[:len(name)]).ratio()
        return whole, start

    scores = {candidate: likeness(candidate) for candidate in candidates}
    close = [candidate for candidate, (whole, start) in scores.items() if whole >= 0.6 or start >= 0.8]
    return sorted(close, key=lambda candidate: (-max(scores[candidate]), -scores[candidate][0], candidate))[:count]


def check_model_name(name: str) -> None:
    """Raise :class:`ModelLoadError` when ``name`` is not a timm model, offering the close names that vitroll
    explains, or saying that the close ones are models it cannot explain."""
    import timm

    if hub.is_hub_name(name) or timm.is_model(name):
        return
    close = close_names(name, supported_timm_names())
    unexplained = [] if close else close_names(name, timm.list_models())
    if close:
        hint = f"; did you mean {', '.join(close)}?"
    elif unexplained:
        hint = (f"; the close timm names {', '.join(unexplained)} are models vitroll cannot explain (`vitroll models "
                "PATTERN` marks the supported ones)")
    else:
        hint = ("; `vitroll models PATTERN` lists the timm names; a Hugging Face model is a save_pretrained folder, a "
                f"hub id ORG/NAME in the local cache, or transformers:{name} for a hub id without an organisation")
    raise ModelLoadError(f"unknown model name {name!r}{hint}")


def refuse_unexplained_name(name: str) -> None:
    """Raise :class:`UnsupportedModelError` when the timm model ``name`` is of no registered family, decided without
    building it (building took seconds for a large model, and with ``--pretrained`` downloaded its weights, before the
    built model was refused). A ``hf-hub:`` name is decided by the timm architecture its ``config.json`` names (a
    small file, read before any weights or checkpoint; :class:`ModelLoadError` when it cannot be had).

    The timm module that defines the entrypoint builds its models from the classes it holds: when none of them is a
    family's model class (or a subclass of one), no model it builds can be explained. A module that holds one is left
    to the built model to decide.
    """
    architecture = _hub_architecture(name) if hub.is_hub_name(name) else name
    module_name = unexplained_module(architecture)
    if module_name is None:
        return
    what = f"{name} ({architecture}, {module_name})" if architecture != name else f"{name} ({module_name})"
    reason = refusal_of_module(module_name)
    raise UnsupportedModelError(f"{what}: {reason}" if reason else unsupported_message(what, timm_only=True))


def unexplained_module(architecture: str) -> Optional[str]:
    """The timm module defining the entrypoint of ``architecture`` when none of the classes it holds is a family's
    model class (or a subclass of one): no model it builds can be explained. None for a module that holds one (the
    built model decides) or a name that is no timm model."""
    import timm

    if not timm.is_model(architecture):
        return None
    module_name = timm.models.model_entrypoint(architecture).__module__
    family_types = tuple(imported_types(tuple(kind for family in FAMILIES for kind in family.model_types)))
    if any(inspect.isclass(member) and issubclass(member, family_types)
           for member in vars(sys.modules[module_name]).values()):
        return None
    return module_name


def _hub_architecture(name: str) -> str:
    """The timm architecture that the ``config.json`` of the ``hf-hub:`` repository ``name`` gives."""
    from timm.models._hub import load_model_config_from_hf

    with _from_the_hub(name, pretrained=False):
        return load_model_config_from_hf(name.split(":", 1)[1])[1]


@contextlib.contextmanager
def _from_the_hub(name: str, *, pretrained: bool) -> Iterator[None]:
    """Whatever ``name`` needs from the hub inside comes from the local cache when the hub is unreachable; every
    failure to have it is one :class:`ModelLoadError` line within seconds."""
    offline = not hub.hub_reachable()
    needed = "pretrained weights" if pretrained else "configuration"
    uncached = f"{'are' if pretrained else 'is'} not in the local cache and the hub cannot be reached"
    weights = argument("checkpoint", placeholder="FILE")
    advice = (f"run once with network access, or pass a timm model name with {weights}" if hub.is_hub_name(name)
              else f"pass {weights} (.safetensors/.pth) or run once with network access")
    if offline and not hub.pretrained_maybe_cached(name):  # fail before spending seconds on initialisation
        raise ModelLoadError(f"{name}: {needed} {uncached}; {advice}")
    try:
        with hub.cache_only(offline):
            yield
    except (UnsupportedModelError, ModelLoadError):
        raise
    except Exception as error:
        if not _from_the_network(error):  # a size option the model does not take: not the hub's failure
            raise ModelLoadError(f"{name}: cannot build model ({type(error).__name__}: {error})") from None
        where = uncached if offline else f"could not be fetched ({type(error).__name__})"
        raise ModelLoadError(f"{name}: {needed} {where}; {advice}") from None


_NETWORK_PACKAGES = ("huggingface_hub", "httpx", "requests", "urllib3")


def _from_the_network(error: Exception) -> bool:
    """Whether ``error`` is a failure to fetch (hub errors come in many types: LocalEntryNotFoundError, HTTP errors,
    HFValidationError; OSError for the rest of the network and the cache) rather than to build."""
    return isinstance(error, OSError) or type(error).__module__.split(".")[0] in _NETWORK_PACKAGES


def create_timm_model(name: str, *, pretrained: bool, **kwargs: object) -> nn.Module:
    """Build ``name`` with timm; whatever must come from the hub comes from the local cache when it is unreachable.

    A ``hf-hub:`` name needs the hub even without weights (its ``config.json``), so it always takes the
    offline-aware path; every failure there is one :class:`ModelLoadError` line within seconds. Call
    :func:`refuse_unexplained_name` first, so that a model of no family is refused before it is built.
    """
    import timm

    if not pretrained and not hub.is_hub_name(name):
        return timm.create_model(name, pretrained=False, **kwargs)
    with _from_the_hub(name, pretrained=pretrained):
        return timm.create_model(name, pretrained=pretrained, **kwargs)


def num_classes_of(state: Mapping[str, torch.Tensor]) -> Optional[int]:
    """The rows of the classifier ``head.weight``, or of the one ``PREFIX.head.weight`` of a model saved inside a
    training wrapper (:func:`~vitroll.checkpoints.model_part`); None without one."""
    heads = [state["head.weight"]] if "head.weight" in state else [
        value for key, value in state.items() if key.endswith(".head.weight")]
    return int(heads[0].shape[0]) if len(heads) == 1 and heads[0].ndim == 2 else None

