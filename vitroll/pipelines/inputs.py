"""Where a batch run's inputs come from and where each one's outputs go.

Inputs are a folder (optionally recursive) or a text/CSV file listing image paths. Each input keeps its path
relative to the folder (or to the list file), and its outputs mirror that tree, so ``a/x.png`` and
``b/x.png`` never collide. Decoding and preprocessing happen in DataLoader worker processes; a file that
cannot be read becomes an error record inside its batch, never an exception that stops the batch.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from vitroll.errors import ImageReadError, VitrollError
from vitroll.io import IMAGE_SUFFIXES, load_image
from vitroll.preprocess import CropGeometry, Preprocessing

LIST_SUFFIXES = (".txt", ".csv", ".lst")


@dataclass(frozen=True)
class InputItem:
    path: Path
    relative: str
    """POSIX path relative to the input folder or list file; the key of the manifest."""
    output_stem: str
    """Relative output path without suffix (``a/x``; ``a/x.jpg`` when ``a/x.png`` exists too)."""


def _read_list(list_file: Path) -> list[Path]:
    """Paths from a list file: one per line, or a CSV whose ``path`` column (else first column) holds them."""
    try:
        text = list_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ImageReadError(list_file, f"cannot read the list of inputs ({error})") from None
    rows = [row for row in csv.reader(text.splitlines()) if row and row[0].strip() and not row[0].startswith("#")]
    column = 0
    if rows and "path" in [cell.strip().lower() for cell in rows[0]]:
        column = [cell.strip().lower() for cell in rows[0]].index("path")
        rows = rows[1:]
    return [(list_file.parent / row[column].strip()) for row in rows]


def discover(source: "str | os.PathLike[str]", *, recursive: bool = False, limit: Optional[int] = None,
             exclude: "str | os.PathLike[str] | None" = None) -> list[InputItem]:
    """The inputs of a run, sorted by relative path (so shards and resumes see the same order).

    ``source`` is a folder (images by suffix, sub-folders with ``recursive``; hidden files and anything under
    ``exclude`` — the run's own output folder — skipped) or a list file (``.txt``/``.csv``/``.lst``); listed
    paths are taken as given, whatever their suffix.
    """
    source = Path(source)
    if source.is_dir():
        pattern = "**/*" if recursive else "*"
        skip = Path(exclude).resolve() if exclude is not None else None
        paths = [p for p in source.glob(pattern)
                 if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
                 and (skip is None or skip not in p.resolve().parents)]
        root = source
    elif source.is_file() and source.suffix.lower() in LIST_SUFFIXES:
        paths, root = _read_list(source), source.parent
    elif source.exists():
        raise ImageReadError(source, f"not a folder or a list file ({', '.join(LIST_SUFFIXES)})")
    else:
        raise ImageReadError(source, "no such folder or list file")
    relatives = []
    for path in paths:
        try:
            relatives.append(PurePosixPath(path.resolve().relative_to(root.resolve()).as_posix()))
        except ValueError:  # a listed path outside the list's folder: keep its absolute path as the key
            relatives.append(PurePosixPath(path.resolve().as_posix().lstrip("/")))
    order = sorted(range(len(paths)), key=lambda i: str(relatives[i]))[:limit]
    stems = [str(relatives[i].with_suffix("")) for i in order]
    clashing = {stem for stem in stems if stems.count(stem) > 1}
    return [InputItem(paths[i], str(relatives[i]), str(relatives[i]) if stem in clashing else stem)
            for i, stem in zip(order, stems)]


class DecodedImages(Dataset):
    """Decode + preprocess one input per item (runs in DataLoader workers)."""

    def __init__(self, items: Sequence[InputItem], preprocessing: Preprocessing) -> None:
        self.items, self.preprocessing = list(items), preprocessing

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        try:
            image = load_image(self.items[index].path)
            tensor, geometry = self.preprocessing(image)
        except VitrollError as error:
            return {"index": index, "error": str(error)}
        except Exception as error:  # noqa: BLE001 — a worker must report, not die, on any one file
            return {"index": index, "error": f"{self.items[index].path}: cannot be processed ({error})"}
        return {"index": index, "tensor": tensor, "geometry": geometry, "image": torch.from_numpy(np.array(image))}


@dataclass
class Batch:
    """Good images stacked for the model; failures kept beside them."""

    indices: list[int]
    tensor: Optional[torch.Tensor]
    """(B, 3, H, W) or None when every image of the batch failed."""
    geometries: list[CropGeometry]
    images: list[torch.Tensor]
    """Original RGB images (H0, W0, 3) uint8, for rendering."""
    errors: list[tuple[int, str]]

    def pin_memory(self) -> "Batch":
        if self.tensor is not None:
            self.tensor = self.tensor.pin_memory()
        return self


def ignore_interrupts(_worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: Ctrl-C is the main process's to handle (it finishes the batch in flight);
    a worker killed by it would turn a clean stop into a crash."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def collate(records: list[dict[str, Any]]) -> Batch:
    good = [r for r in records if "error" not in r]
    return Batch(
        indices=[r["index"] for r in good],
        tensor=torch.stack([r["tensor"] for r in good]) if good else None,
        geometries=[r["geometry"] for r in good],
        images=[r["image"] for r in good],
        errors=[(r["index"], r["error"]) for r in records if "error" in r],
    )
