"""torchvision's ViTs by name (``torchvision:vit_b_16``), their pretrained weights fetched or found in torch's hub
folder."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Mapping, Optional
from urllib.parse import urlparse

import torch
from torch import nn

from vitroll.errors import ModelLoadError
from vitroll.models import hub
from vitroll.wording import argument

TORCHVISION_PREFIX = "torchvision:"


def build_torchvision(name: str, *, pretrained: bool, state: Optional[Mapping[str, torch.Tensor]],
                      num_classes: Optional[int], **model_kwargs: object) -> nn.Module:
    """Build ``torchvision:ARCH`` with torchvision (``img_size`` becomes its square ``image_size``)."""
    import torchvision

    architecture = name.removeprefix(TORCHVISION_PREFIX)
    known = torchvision.models.list_models(module=torchvision.models)
    if architecture not in known:
        close = difflib.get_close_matches(architecture, known, n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(TORCHVISION_PREFIX + c for c in close)}?" if close else ""
        raise ModelLoadError(f"{name}: not a torchvision classification model{hint}")
    config: dict[str, object] = {}
    if model_kwargs.pop("dynamic_img_size", False):
        raise ModelLoadError(f"{name}: torchvision's ViT takes one fixed square image size; use "
                             f"{argument('img_size', placeholder='N')}")
    size = model_kwargs.pop("img_size", None)
    if size is not None:
        sides = set(size) if isinstance(size, tuple) else {size}
        if len(sides) != 1:
            raise ModelLoadError(f"{name}: torchvision's ViT takes square inputs only; use "
                                 f"{argument('img_size', placeholder='N')}")
        config["image_size"] = sides.pop()
    if model_kwargs:
        raise ModelLoadError(f"{name}: options {', '.join(model_kwargs)} do not apply to torchvision models")
    head = None if state is None else state.get("heads.head.weight")
    if num_classes is None and head is not None:
        num_classes = int(head.shape[0])
    if num_classes is not None:
        config["num_classes"] = num_classes
    if pretrained:
        url = urlparse(torchvision.models.get_model_weights(architecture).DEFAULT.url)
        cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(url.path).name
        if not cached.is_file() and not hub.host_reachable(url.hostname, url.port or 443, timeout=3.0):
            raise ModelLoadError(f"{name}: torchvision's pretrained weights are not in {cached.parent} and "
                                 f"{url.hostname} cannot be reached; pass "
                                 f"{argument('checkpoint', placeholder='FILE')} or run once with network access")
    try:
        return torchvision.models.get_model(architecture, weights="DEFAULT" if pretrained else None, **config)
    except OSError as error:  # urllib's URLError included: the download started but failed
        raise ModelLoadError(f"{name}: cannot download torchvision's pretrained weights ({error})") from None
    except (RuntimeError, TypeError, ValueError, AssertionError) as error:
        raise ModelLoadError(f"{name}: cannot build model ({error})") from None

