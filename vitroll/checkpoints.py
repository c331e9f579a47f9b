"""Weight files: reading a state dict from ``.safetensors`` or a torch file, loading it into a model strictly,
converting trusted torch files, and fingerprinting a file for reports.

Checkpoints are read without unpickling arbitrary objects: ``.safetensors`` through safetensors, every
other file through ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Mapping

import torch
import safetensors.torch
from torch import nn

from vitroll.errors import ModelLoadError

_WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "module")


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
    """The one-line refusal of a checkpoint that needs unpickling, with both ways forward."""
    holds = f"Python objects ({', '.join(objects[:3])}{' …' if len(objects) > 3 else ''})" if objects else "Python objects"
    target = path.with_suffix(".safetensors")
    convert = f'python -c "import vitroll.checkpoints as c; c.save_as_safetensors({str(path)!r})"'
    return ModelLoadError(
        f"{path}: holds {holds} besides tensors, and unpickling them can run arbitrary code, so vitroll refused; "
        f"if you trust its source, convert it once with {convert} (writes {target}) and pass that file, "
        f"or pass --trust-checkpoint to unpickle it on every run"
    )


def _unreadable(path: Path, error: Exception) -> ModelLoadError:
    reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else "no reason given"
    return ModelLoadError(f"{path}: not a checkpoint that safetensors or torch can read ({type(error).__name__}: {reason})")


def _load_file(path: Path, *, trust: bool) -> object:
    """What a checkpoint file holds: safetensors' tensors, or the torch file's object (unpickled in full if ``trust``)."""
    try:
        if path.suffix == ".safetensors":
            return safetensors.torch.load_file(str(path))
        return torch.load(path, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as error:  # weights_only refused a Python object, or the file is no pickle at all
        objects = _unsafe_globals(path)
        if not trust and (objects or _is_legacy_torch_file(path)):
            raise _refuse_unpickling(path, objects) from None
        raise _unreadable(path, error) from None
    except Exception as error:
        raise _unreadable(path, error) from None


def read_checkpoint(path: "str | os.PathLike[str]", *, trust: bool = False) -> dict[str, torch.Tensor]:
    """Read a state dict from ``.safetensors`` or a torch file.

    Torch files are read with ``weights_only=True``; one that holds other Python objects (an
    ``argparse.Namespace`` of training options, say) is refused with :class:`ModelLoadError`, unless
    ``trust`` is set: then it is unpickled in full (``weights_only=False``), which can run arbitrary code
    from the file. Unwraps ``{"model": …}`` / ``{"state_dict": …}`` containers and strips ``module.``
    prefixes left by DataParallel / DDP.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"{path}: no such checkpoint file")
    state = _load_file(path, trust=trust)
    while isinstance(state, Mapping):
        wrapped = [key for key in _WRAPPER_KEYS if isinstance(state.get(key), Mapping)]
        if not wrapped:
            break
        state = state[wrapped[0]]
    tensors = {key: value for key, value in state.items() if isinstance(value, torch.Tensor)} if isinstance(state, Mapping) else {}
    if not tensors:
        raise ModelLoadError(f"{path}: holds no tensors that look like a model state dict")
    if all(key.startswith("module.") for key in tensors):
        tensors = {key[len("module."):]: value for key, value in tensors.items()}
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


def load_state(model: nn.Module, state: Mapping[str, torch.Tensor], source: object) -> None:
    """Load ``state`` strictly; on mismatch raise one line naming the first offending keys and shapes."""
    own = model.state_dict()
    missing = [key for key in own if key not in state]
    unexpected = [key for key in state if key not in own]
    shapes = [f"{key} {tuple(state[key].shape)} vs model {tuple(own[key].shape)}"
              for key in own if key in state and state[key].shape != own[key].shape]
    if missing or unexpected or shapes:
        parts = []
        if shapes:
            parts.append(f"shape mismatch: {'; '.join(shapes[:3])}")
        if missing:
            parts.append(f"missing keys: {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''}")
        if unexpected:
            parts.append(f"unexpected keys: {', '.join(unexpected[:3])}{' …' if len(unexpected) > 3 else ''}")
        raise ModelLoadError(f"{source}: checkpoint does not match {type(model).__name__} — {' | '.join(parts)}")
    model.load_state_dict(state, strict=True)


def file_sha256(path: "str | os.PathLike[str]") -> str:
    """SHA-256 of a file's bytes in hex, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
