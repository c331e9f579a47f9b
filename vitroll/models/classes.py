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


def _names_from_json(path: Path, text: str) -> list[str]:
    """The names a JSON class-names file gives: a list in output order, ``{index: name}``, or ``{name: index}``
    (torchvision's ``class_to_idx``, transformers' ``label2id``); the indices must be 0…n−1, each once."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ModelLoadError(f"{path}: not valid JSON ({error})") from None
    if isinstance(data, list):
        return [str(name) for name in data]
    if isinstance(data, dict):
        name_to_index = all(isinstance(index, int) and not isinstance(index, bool) for index in data.values())
        try:
            by_index = ({index: str(name) for name, index in data.items()} if name_to_index
                        else {int(index): str(name) for index, name in data.items()})
        except ValueError:  # a key that is no index
            by_index = {}
        if by_index and len(by_index) == len(data) and sorted(by_index) == list(range(len(data))):
            return [by_index[index] for index in range(len(data))]
    raise ModelLoadError(f"{path}: expected a JSON list of names, {{index: name}} or {{name: index}} with the indices "
                         "0, 1, 2, … each once")


def class_names(model: nn.Module, names_file: "str | os.PathLike[str] | None" = None) -> Optional[list[str]]:
    """Human-readable class names: from ``names_file`` (one per line, blank lines skipped; or JSON: a list,
    ``{index: name}`` or ``{name: index}``; exactly one name per class of the model), else what the model's family
    reads from the model (:attr:`~vitroll.capture.ModelFamily.class_names`: timm's label names or ImageNet's,
    torchvision's weights' categories).

    Parameters
    ----------
    model : nn.Module
        The model whose classes are named.
    names_file : str or path, optional
        A text file of one name per line, or a JSON file; exactly one name per class of the model.

    Returns
    -------
    list of str, or None
        One name per class, in the order of the model's outputs; None where neither the file nor the model names
        them.

    Raises
    ------
    UnsupportedModelError
        For a model of no registered family.
    ModelLoadError
        For a names file that cannot be read or names another number of classes than the model has.
    """
    if names_file is not None:
        path = Path(names_file)
        text = read_text_file(path, "class names")
        if path.suffix == ".json":
            names = _names_from_json(path, text)
        else:
            names = [line.strip() for line in text.splitlines() if line.strip()]
        # timm and torchvision name the head's size num_classes, transformers' classifiers num_labels
        classes = getattr(model, "num_classes", None) or getattr(model, "num_labels", None)
        if classes and len(names) != classes:
            raise ModelLoadError(f"{path}: {len(names)} class names for a model with {classes} classes; "
                                 "give one name per class, in the order of the model's outputs")
        return names
    names_of = family_of(model).class_names
    return names_of(model) if names_of is not None else None
