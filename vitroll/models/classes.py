"""A model's class names: from a file the user gives, else from what the model's family reads from the model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from torch import nn

from vitroll.capture.families import family_of
from vitroll.errors import ModelLoadError
from vitroll.io.textfile import read_text_file


def class_names(model: nn.Module, names_file: "str | os.PathLike[str] | None" = None) -> Optional[list[str]]:
    """Human-readable class names: from ``names_file`` (one per line, or a JSON list / {index: name}; at least
    one name per class of the model), else what the model's family reads from the model
    (:attr:`~vitroll.capture.ModelFamily.class_names`: timm's label names or ImageNet's, torchvision's weights'
    categories).

    Raises :class:`~vitroll.errors.UnsupportedModelError` for a model of no registered family."""
    if names_file is not None:
        path = Path(names_file)
        text = read_text_file(path, "class names")
        if path.suffix == ".json":
            try:
                data = json.loads(text)
                names = [data[k] for k in sorted(data, key=int)] if isinstance(data, dict) else [str(v) for v in data]
            except (ValueError, TypeError) as error:
                raise ModelLoadError(f"{path}: expected a JSON list of names or {{index: name}} ({error})") from None
        else:
            names = [line.strip() for line in text.splitlines() if line.strip()]
        classes = getattr(model, "num_classes", None)
        if classes and len(names) < classes:
            raise ModelLoadError(f"{path}: {len(names)} class names for a model with {classes} classes; "
                                 "give one name per class, in the order of the model's outputs")
        return names
    names_of = family_of(model).class_names
    return names_of(model) if names_of is not None else None

