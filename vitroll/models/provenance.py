"""Where a model's weights came from, for reports: random, a pretrained tag, a checkpoint file (with its SHA-256), the
shipped testbed weights, or not stated."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from torch import nn

from vitroll.checkpoints import file_sha256
from vitroll.models.torchvision import TORCHVISION_PREFIX
from vitroll.models.transformers import (
    SHIPPED_TRANSFORMERS, TRANSFORMERS_WEIGHTS, is_transformers_name, transformers_source,
)
from vitroll.testbed.model import TESTBED_NAME, WEIGHTS
from vitroll.wording import argument, on_the_command_line


def has_random_weights(name: str, *, pretrained: bool, checkpoint: "str | os.PathLike[str] | None") -> bool:
    """Whether :func:`load_model` with these arguments leaves the weights at their random initialisation."""
    return not pretrained and checkpoint is None and name != TESTBED_NAME and not is_transformers_name(name)


RANDOM_FINGERPRINT = "RANDOM weights (no --pretrained or --checkpoint): the maps mean nothing"
"""What stands for random weights in a settings hash, byte for byte what it was when the description (now worded for
the caller) was the fingerprint: output folders written since must still resume."""


def no_weights_given() -> str:
    """Why a model's weights are random, in the caller's words: ``no --pretrained or --checkpoint`` on the command
    line, ``pretrained=False, checkpoint=None`` from Python."""
    if on_the_command_line():
        return f"no {argument('pretrained')} or {argument('checkpoint')}"
    return f"{argument('pretrained', False)}, {argument('checkpoint', placeholder='None')}"


@dataclass(frozen=True)
class ModelProvenance:
    """What produced a map: the model's name and where its weights came from (for reports)."""

    model: str
    """The name given to :func:`load_model` (timm name, ``hf-hub:…`` or ``vitroll-shapes``)."""
    weights: str
    """``random``, ``timm-pretrained``, ``torchvision-pretrained``, ``transformers-pretrained``, ``checkpoint``,
    ``testbed`` or ``not stated``."""
    description: str
    """One line for people: which pretrained tag, which checkpoint file, or the random-weights warning."""
    sha256: Optional[str] = None
    """SHA-256 of the weights file (checkpoint or shipped testbed weights), when there is one."""

    @property
    def random(self) -> bool:
        return self.weights == "random"

    @property
    def fingerprint(self) -> str:
        """What stands for the weights in a settings hash: their content (SHA-256) where there is a file, so that a
        file changed in place under the same name is other settings; for random weights :data:`RANDOM_FINGERPRINT`
        (the same from Python and the command line); else the one-line description."""
        if self.sha256:
            return f"{self.weights} SHA-256 {self.sha256}"
        return RANDOM_FINGERPRINT if self.random else self.description

    @classmethod
    def of(cls, name: str, *, pretrained: bool, checkpoint: "str | os.PathLike[str] | None",
           model: Optional[nn.Module] = None) -> "ModelProvenance":
        """The provenance of ``load_model(name, pretrained=…, checkpoint=…)``; ``model`` names timm's pretrained tag."""
        if checkpoint is not None:
            return cls(name, "checkpoint", f"checkpoint file {Path(checkpoint).name}", file_sha256(checkpoint))
        if name == TESTBED_NAME:
            return cls(name, "testbed", f"the testbed weights shipped with vitroll ({WEIGHTS.name})",
                       file_sha256(WEIGHTS))
        if is_transformers_name(name):
            return cls._of_transformers(name)
        if pretrained and name.startswith(TORCHVISION_PREFIX):
            return cls(name, "torchvision-pretrained", "torchvision pretrained weights (DEFAULT)")
        if pretrained:
            cfg = dict(getattr(model, "pretrained_cfg", None) or {})
            source = cfg.get("hf_hub_id") or cfg.get("url") or cfg.get("tag") or "timm's default tag"
            return cls(name, "timm-pretrained", f"timm pretrained weights ({source})")
        return cls(name, "random", f"RANDOM weights ({no_weights_given()}): the maps mean nothing")

    @classmethod
    def _of_transformers(cls, name: str) -> "ModelProvenance":
        """A ``save_pretrained`` folder (SHA-256 of its weights) or a hub id."""
        folder = Path(transformers_source(name))
        if name in SHIPPED_TRANSFORMERS:
            weights = folder / "model.safetensors"
            return cls(name, "testbed", f"the testbed weights shipped with vitroll ({folder.name}/{weights.name})",
                       file_sha256(weights))
        if folder.is_dir():
            weights = next((folder / f for f in TRANSFORMERS_WEIGHTS if (folder / f).is_file()), None)
            return cls(name, "transformers-pretrained", f"transformers weights in {folder}",
                       _weights_sha256(weights) if weights is not None else None)
        return cls(name, "transformers-pretrained", f"transformers weights from the hub ({folder})")

    @classmethod
    def unstated(cls, model: nn.Module) -> "ModelProvenance":
        """For callers that did not say where the weights came from: the architecture's name only."""
        architecture = (getattr(model, "pretrained_cfg", None) or {}).get("architecture") or type(model).__name__
        return cls(str(architecture), "not stated", "not stated by the caller")


def _weights_sha256(weights: Path) -> str:
    """SHA-256 of a ``save_pretrained`` weights file; for a sharded model's index (``*.index.json``), of the index
    and each shard it names (a shard retrained under an unchanged index changes the model all the same)."""
    if not weights.name.endswith(".index.json"):
        return file_sha256(weights)
    try:
        shards = sorted(set(json.loads(weights.read_text(encoding="utf-8")).get("weight_map", {}).values()))
    except (ValueError, AttributeError):
        shards = []
    digest = hashlib.sha256(file_sha256(weights).encode())
    for shard in shards:
        shard_path = weights.parent / shard
        digest.update(f"{shard}:{file_sha256(shard_path) if shard_path.is_file() else 'missing'}".encode())
    return digest.hexdigest()
