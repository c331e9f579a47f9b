"""timm models by name: close matches for a mistyped name, and building one with whatever must come from the hub
taken from the local cache when the hub is unreachable."""

from __future__ import annotations

import difflib
from typing import Mapping, Optional

import torch
from torch import nn

from vitroll.errors import ModelLoadError
from vitroll.models import hub


def check_model_name(name: str) -> None:
    """Raise :class:`ModelLoadError` with close matches when ``name`` is not a timm model."""
    import timm

    if hub.is_hub_name(name) or timm.is_model(name):
        return
    close = difflib.get_close_matches(name, timm.list_models(), n=3, cutoff=0.6)
    hint = (f"; did you mean {', '.join(close)}?" if close else
            "; `vitroll models PATTERN` lists the timm names; a Hugging Face model is a save_pretrained folder, a hub "
            f"id ORG/NAME in the local cache, or transformers:{name} for a hub id without an organisation")
    raise ModelLoadError(f"unknown model name {name!r}{hint}")


def create_timm_model(name: str, *, pretrained: bool, **kwargs: object) -> nn.Module:
    """Build ``name`` with timm; whatever must come from the hub comes from the local cache when it is unreachable.

    A ``hf-hub:`` name needs the hub even without weights (its ``config.json``), so it always takes the
    offline-aware path; every failure there is one :class:`ModelLoadError` line within seconds.
    """
    import timm

    if not pretrained and not hub.is_hub_name(name):
        return timm.create_model(name, pretrained=False, **kwargs)
    offline = not hub.hub_reachable()
    needed = "pretrained weights" if pretrained else "configuration"
    uncached = f"{'are' if pretrained else 'is'} not in the local cache and the hub cannot be reached"
    advice = ("run once with network access, or pass a timm model name with --checkpoint FILE" if hub.is_hub_name(name)
              else "pass --checkpoint FILE (.safetensors/.pth) or run once with network access")
    if offline and not hub.pretrained_maybe_cached(name):  # fail before spending seconds on initialisation
        raise ModelLoadError(f"{name}: {needed} {uncached}; {advice}")
    try:
        with hub.cache_only(offline):
            return timm.create_model(name, pretrained=pretrained, **kwargs)
    except Exception as error:  # hub errors come in many types (LocalEntryNotFoundError, OSError, HTTP errors)
        where = uncached if offline else f"could not be fetched ({type(error).__name__})"
        raise ModelLoadError(f"{name}: {needed} {where}; {advice}") from None


def num_classes_of(state: Mapping[str, torch.Tensor]) -> Optional[int]:
    head = state.get("head.weight")
    return int(head.shape[0]) if head is not None and head.ndim == 2 else None

