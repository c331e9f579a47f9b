"""Weight files: reading a state dict from ``.safetensors`` or a torch file, loading it into a model strictly,
converting trusted torch files, and fingerprinting a file for reports.

Checkpoints are read without unpickling arbitrary objects: ``.safetensors`` through safetensors, every
other file through ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

import torch
import safetensors.torch
from torch import nn

from vitroll.errors import ForeignWeightsError, ModelLoadError
from vitroll.wording import argument, model_loading

_WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "module")
_MODEL_PREFIXES = ("module.", "timm_model.")
"""Key prefixes stripped when every key has one: DataParallel / DDP's wrapper, transformers' TimmWrapper (a timm model
saved with save_pretrained)."""


def _unsafe_globals(path: Path) -> list[str]:
    """The Python classes and functions a torch file would have to unpickle (``[]`` when torch cannot tell)."""
    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # legacy (non-zip) files and damaged archives: torch cannot list what they hold
        return []


def _is_legacy_torch_file(path: Path) -> bool:
    """Whether ``path`` starts like a pre-1.6 ``torch.save`` file (a bare pickle, protocol 2)."""
    with path.open("rb") as handle:
        return handle.read(2) == b"\x80\x02"


def _refuse_unpickling(path: Path, objects: list[str]) -> ModelLoadError:
    """The one-line refusal of a checkpoint that needs unpickling, with both ways forward; a whole pickled model
    (``torch.save(model)``: it names torch.nn's module classes) is told to save its state dict instead."""
    objects = sorted(objects)
    target = path.with_suffix(".safetensors")
    convert = f'python -c "import vitroll.checkpoints as c; c.save_as_safetensors({str(path)!r})"'
    trusted = (f"if you trust its source, convert it once with {convert} (writes {target}) and pass that file, "
               f"or pass {argument('trust_checkpoint', True)} to unpickle it on every run")
    if any(name.startswith("torch.nn.modules.") for name in objects):
        return ModelLoadError(
            f"{path}: a whole pickled model (torch.save(model)), not a state dict, and unpickling it can run arbitrary "
            "code, so vitroll refused; save its weights instead with torch.save(model.state_dict(), FILE), "
            f"or {trusted}")
    listed = f" ({', '.join(objects[:3])}{' …' if len(objects) > 3 else ''})" if objects else ""
    return ModelLoadError(f"{path}: holds Python objects{listed} besides tensors, and unpickling them can run "
                          f"arbitrary code, so vitroll refused; {trusted}")


def _reason(error: Exception) -> str:
    """The first sentence of ``error``'s message, without terminal colour codes (torch's messages run for a
    paragraph and bold their warnings)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()
    first = text.splitlines()[0] if text else "no reason given"
    return first.split(". ")[0].removesuffix(".")


def _unreadable(path: Path, what: str, error: Optional[Exception] = None) -> ModelLoadError:
    reason = f" ({type(error).__name__}: {_reason(error)})" if error is not None else ""
    return ModelLoadError(f"{path}: {what} that cannot be read; it may be truncated or damaged, so copy or save it "
                          f"again{reason}")


def _file_kind(path: Path) -> str:
    """What a weights file is, told by its first bytes (not by its suffix, which users rename): "empty",
    "safetensors" (an 8-byte header length, then the JSON header), "zip" (torch.save since 1.6, TorchScript,
    NumPy's .npz), "pickle" (torch.save before 1.6, pickle.dump), or "other"."""
    with path.open("rb") as handle:
        head = handle.read(9)
    if not head:
        return "empty"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if head[8:9] == b"{":
        return "safetensors"
    if head.startswith(b"\x80"):
        return "pickle"
    return "other"


def _refuse_zip_kinds(path: Path) -> None:
    """Refuse a zip archive that ``torch.load`` would misread: TorchScript (a program, not a state dict) and NumPy's
    ``.npz`` (JAX/Flax weights); a damaged archive is refused naming that."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:  # the archive's directory, at its end, is missing or broken
        raise _unreadable(path, "a torch.save file (a zip archive)") from None
    if any(name.endswith("/constants.pkl") for name in names):
        raise ModelLoadError(f"{path}: a TorchScript program (torch.jit.save), not a state dict; save the weights "
                             "with torch.save(model.state_dict(), FILE) or safetensors.torch.save_file")
    if names and all(name.endswith(".npy") for name in names):
        raise ModelLoadError(f"{path}: a NumPy .npz archive (JAX/Flax weights), not a PyTorch state dict; convert "
                             "it to PyTorch (for a timm ViT: model.load_pretrained(FILE), then save "
                             "model.state_dict())")


def _load_file(path: Path, *, trust: bool) -> object:
    """What a checkpoint file holds: safetensors' tensors, or the torch file's object (unpickled in full if
    ``trust``)."""
    kind = _file_kind(path)
    if kind == "empty":
        raise ModelLoadError(f"{path}: the file is empty (0 bytes), not a checkpoint")
    if kind == "other":
        raise ModelLoadError(f"{path}: neither a safetensors file nor a torch.save file (its first bytes are "
                             f"neither's); {argument('checkpoint')} takes a state dict saved as .safetensors or with "
                             "torch.save")
    if kind == "safetensors":
        try:
            return safetensors.torch.load_file(str(path))
        except Exception as error:
            raise _unreadable(path, "a safetensors file", error) from None
    if kind == "zip":
        _refuse_zip_kinds(path)
    if kind == "pickle" and not _is_legacy_torch_file(path):
        raise ModelLoadError(f"{path}: a Python pickle written by pickle.dump, not by torch.save, so torch cannot read "
                             "it; save the weights with torch.save(model.state_dict(), FILE) or "
                             "safetensors.torch.save_file")
    try:
        with path.open("rb") as handle:  # torch.load given a path would pick its reader by the suffix
            return torch.load(handle, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as error:  # weights_only refused a Python object, or the file is no torch pickle
        objects = _unsafe_globals(path)
        if not trust and (objects or _is_legacy_torch_file(path)):
            raise _refuse_unpickling(path, objects) from None
        raise _unreadable(path, "a torch.save file", error) from None
    except Exception as error:
        raise _unreadable(path, "a torch.save file", error) from None


def read_checkpoint(path: "str | os.PathLike[str]", *, trust: bool = False) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors`` or a torch file.

    Torch files are read with ``weights_only=True``; one that holds other Python objects (an
    ``argparse.Namespace`` of training options, say) is refused with :class:`ModelLoadError`, unless
    ``trust`` is set: then it is unpickled in full (``weights_only=False``), which can run arbitrary code
    from the file. Unwraps ``{"model": …}`` / ``{"state_dict": …}`` containers and strips the ``module.``
    prefixes left by DataParallel / DDP and the ``timm_model.`` prefix of a timm model saved by transformers.
    """
    path = Path(path)
    if path.is_dir():
        raise ModelLoadError(f"{path}: a folder, not a weights file; a checkpoint is one .safetensors or torch.save "
                             f"file (a save_pretrained folder is a model: pass it as {model_loading('FOLDER')})")
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such checkpoint file")
    state = _load_file(path, trust=trust)
    if isinstance(state, nn.Module):  # a trusted torch.save(model)
        state = state.state_dict()
    while isinstance(state, Mapping):
        wrapped = [key for key in _WRAPPER_KEYS if isinstance(state.get(key), Mapping)]
        if not wrapped:
            break
        state = state[wrapped[0]]
    tensors = ({key: value for key, value in state.items() if isinstance(value, torch.Tensor)}
               if isinstance(state, Mapping) else {})
    if not tensors:
        raise ModelLoadError(f"{path}: holds no tensors that look like a model state dict")
    for prefix in _MODEL_PREFIXES:
        if all(key.startswith(prefix) for key in tensors):
            tensors = {key[len(prefix):]: value for key, value in tensors.items()}
    return tensors


def save_as_safetensors(path: "str | os.PathLike[str]", target: "str | os.PathLike[str] | None" = None) -> Path:
    """Convert a trusted torch checkpoint to ``.safetensors`` (beside it by default), so it loads without unpickling.

    Unpickles ``path`` in full — only for files from a source you trust — and writes the state dict that
    :func:`read_checkpoint` finds in it (tensors only; every other object is dropped). Returns the new file.
    """
    target = Path(target) if target is not None else Path(path).with_suffix(".safetensors")
    # safetensors refuses tensors that share storage (tied weights, views): each is written as its own copy
    tensors = {key: value.detach().clone().contiguous() for key, value in read_checkpoint(path, trust=True).items()}
    safetensors.torch.save_file(tensors, str(target))
    return target


def model_part(model: nn.Module, state: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """The weights of ``state`` that are ``model``'s when they all sit under one prefix that the model's keys do not
    have (``model.`` of a Lightning module, any attribute a training wrapper kept the model in), without it; the other
    entries (a loss's, a second network's) are left out. ``state`` itself when any of its keys is the model's, or when
    no more than half of the keys under the likeliest prefix are."""
    own = model.state_dict()
    if any(key in own for key in state):
        return state
    prefixes: dict[str, int] = {}
    for key in state:
        parts = key.split(".")
        for cut in range(1, len(parts)):
            if ".".join(parts[cut:]) in own:
                prefix = ".".join(parts[:cut]) + "."
                prefixes[prefix] = prefixes.get(prefix, 0) + 1
    prefix = max(prefixes, key=prefixes.__getitem__, default="")
    part = {key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)}
    # a few names in common (norm.weight) do not make another model's weights this one's
    return part if prefix and 2 * prefixes[prefix] > len(part) else state


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor], source: object) -> None:
    """Load ``state`` (or its :func:`model_part`) strictly; on mismatch raise one line naming the first offending keys
    and shapes."""
    state = model_part(model, state)
    own = model.state_dict()
    if not any(key in own for key in state):
        raise ForeignWeightsError(f"{source}: checkpoint holds none of {type(model).__name__}'s weights: its keys "
                                  f"({_first_keys(state)}) are none of the model's ({_first_keys(own)}); it is another "
                                  "architecture's checkpoint, or no model's state dict")
    mismatch = mismatch_error(model, source, missing=[key for key in own if key not in state],
                              unexpected=[key for key in state if key not in own],
                              shapes=[(key, state[key].shape, own[key].shape)
                                      for key in own if key in state and state[key].shape != own[key].shape])
    if mismatch is not None:
        raise mismatch
    model.load_state_dict(state, strict=True)


def _first_keys(keys: Iterable[str]) -> str:
    """The first three ``keys`` and ``…`` when there are more, as a mismatch names them."""
    keys = list(keys)
    return f"{', '.join(keys[:3])}{' …' if len(keys) > 3 else ''}"


def mismatch_error(model: nn.Module, source: object, *, missing: Sequence[str], unexpected: Sequence[str],
                   shapes: Sequence[tuple[str, Sequence[int], Sequence[int]]]) -> Optional[ModelLoadError]:
    """The one line saying how the checkpoint ``source`` does not match ``model``: the first ``missing`` and
    ``unexpected`` keys and the first ``shapes`` (key, the checkpoint's shape, the model's); None when all are
    empty."""
    parts = []
    if shapes:
        parts.append("shape mismatch: " + "; ".join(f"{key} {tuple(saved)} vs model {tuple(built)}"
                                                    for key, saved, built in shapes[:3]))
    if missing:
        parts.append(f"missing keys: {_first_keys(missing)}")
    if unexpected:
        parts.append(f"unexpected keys: {_first_keys(unexpected)}")
    if not parts:
        return None
    return ModelLoadError(f"{source}: checkpoint does not match {type(model).__name__} — {' | '.join(parts)}")


def file_sha256(path: "str | os.PathLike[str]") -> str:
    """SHA-256 of a file's bytes in hex, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
