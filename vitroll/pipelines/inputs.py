"""Where a batch run's inputs come from and where each one's outputs go.

Inputs are a folder (optionally recursive) or a text/CSV file listing image paths. Each input is keyed by its own
path — relative to the folder or to the list file's folder, ``..``-led or absolute for a listed path outside that
folder — and the key is the manifest's ``path``: joined to that folder it names the file again. Outputs are named
by :func:`output_name`, a reversible function of the key alone, so two inputs never share an output and no output
lies outside the output folder; :func:`assign_output_names` adds ``@2``… to a name that another input's differs
from only by case, so that none is shared on a case-insensitive disk either. Decoding and batching are
:mod:`vitroll.pipelines.stream`'s.
"""

from __future__ import annotations

import itertools
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional

from vitroll.io.discovery import has_image_suffix, is_within, source_files
from vitroll.io.formats import HEIF_SUFFIXES, is_dicom
from vitroll.io.names import NAME_MAX, fit_name, utf8_name
from vitroll.wording import argument, counted

PARENT_MARK = "@up"
"""Stands for a ``..`` component of a key in output names."""
ROOT_MARK = "@root"
"""Stands for the filesystem root of an absolute key in output names."""
_LAST_ROOM = len("@1000.png")
"""Bytes an output's file name keeps after the last component of its output name: ``@N`` and ``.png``/``.npy``."""


@dataclass(frozen=True)
class InputItem:
    path: Path
    """Where the image is read (a symbolic link is read through)."""
    key: str
    """The manifest's ``path``: POSIX, relative to the input folder or the list file's folder; for a listed path
    outside that folder, ``..``-led (as listed) or absolute."""
    size: Optional[int]
    mtime_ns: Optional[int]
    """Size and modification time of the content when the run started (None when it cannot be read): a row made
    from other content is redone."""
    assigned_name: Optional[str] = None
    """The output name :func:`assign_output_names` gave it, when it differs from :func:`output_name` of the key."""

    @property
    def output_name(self) -> str:
        return self.assigned_name or output_name(self.key)


def output_name(key: str) -> str:
    """Where the outputs of the input ``key`` go, relative to an output kind's folder (before its suffix).

    The key itself, component by component, except that ``..`` becomes ``@up``, the root of an absolute key
    ``@root``, and a name that begins with ``@`` gets one more ``@`` — so no input's name can pass for a mark,
    the mapping is reversible (hence no two inputs share an output), and the result has no ``..`` component
    and is never absolute. A component too long for the file system (the last with room for ``@N`` and the
    output's suffix) is cut, with a hash of it (:func:`~vitroll.io.names.fit_name`), and one that is not UTF-8
    (a Latin-1 name on disk) spelt with escapes and a hash (:func:`~vitroll.io.names.utf8_name`): distinct all the
    same.

    >>> output_name("a/x.png"), output_name("../x.png"), output_name("/data/@x.png")
    ('a/x.png', '@up/x.png', '@root/data/@@x.png')
    """
    parts = [
        ROOT_MARK if index == 0 and part == "" else PARENT_MARK if part == ".." else "@" + part if part.startswith("@")
        else part
        for index, part in enumerate(key.split("/"))
    ]
    parts = [utf8_name(part) for part in parts]
    return "/".join([*(fit_name(part) for part in parts[:-1]), fit_name(parts[-1], NAME_MAX - _LAST_ROOM)])


def _folded(name: str) -> str:
    """What a case-insensitive file system (macOS, Windows) compares: ``A.png`` and ``a.png`` are one file there."""
    return unicodedata.normalize("NFC", name).casefold()


def assign_output_names(keys: Iterable[str], claimed: Mapping[str, str]) -> dict[str, str]:
    """Output names for ``keys`` that no two inputs share even on a case-insensitive disk, stable across runs.

    An input keeps the name its outputs in the folder already have (``claimed``: key → name, from the manifest);
    another gets :func:`output_name` of its key, unless that name is another input's but for case or Unicode
    normalisation (``A.png`` beside ``a.png``): then ``NAME@2``, ``NAME@3``… (claimed names and earlier keys, in
    sorted order, first).

    >>> assign_output_names(["A.png", "a.png", "b.png"], {"a.png": "a.png"})
    {'A.png': 'A.png@2', 'a.png': 'a.png', 'b.png': 'b.png'}
    """
    owner: dict[str, str] = {}
    for key, name in sorted(claimed.items()):
        owner.setdefault(_folded(name), key)
    names: dict[str, str] = {}
    for key in sorted(keys):
        name = claimed.get(key)
        if name is None or owner[_folded(name)] != key:
            base = name = output_name(key)
            for number in itertools.count(2):
                if owner.setdefault(_folded(name), key) == key:
                    break
                name = f"{base}@{number}"
        names[key] = name
    return names


def _stamped(path: Path, key: str) -> InputItem:
    try:
        status = path.stat()
    except OSError:
        return InputItem(path, key, None, None)
    return InputItem(path, key, status.st_size, status.st_mtime_ns)


def discover(source: "str | os.PathLike[str]", *, recursive: bool = False, limit: Optional[int] = None,
             exclude: "str | os.PathLike[str] | None" = None) -> list[InputItem]:
    """The inputs of a run, one per key, sorted by key (so shards and resumes see the same order), the first
    ``limit`` of them.

    ``source`` is a folder (images by suffix, sub-folders with ``recursive``, anything under ``exclude`` — the run's
    own output folder — skipped) or a list file (``.txt``/``.csv``/``.lst``; a path listed twice is one input), by
    the rules of :mod:`vitroll.io.discovery`.
    """
    found = source_files(source, accept=has_image_suffix, recursive=recursive, exclude=exclude)
    path_of = {file.key: file.path for file in found}
    return [_stamped(path_of[key], key) for key in sorted(path_of)[:limit]]


def inside_output(source: "str | os.PathLike[str]", exclude: "str | os.PathLike[str] | None") -> str:
    """Why folder ``source`` gives no input when it is the run's output folder ``exclude`` or inside it; ``""`` when
    it is not."""
    here, out = Path(source).resolve(), None if exclude is None else Path(exclude).resolve()
    if out is None or not is_within(here, out):
        return ""
    where = "the output folder" if here == out else f"inside {exclude}"
    return f"is {where}, whose files are never inputs (they would be outputs); choose another {argument('out_dir')}"


def nothing_found(source: "str | os.PathLike[str]", *, recursive: bool,
                  exclude: "str | os.PathLike[str] | None" = None) -> str:
    """Why :func:`discover` found no inputs in ``source``, naming the option that would find some."""
    if not Path(source).is_dir():
        return "lists no image files"
    inside = inside_output(source, exclude)
    if inside:
        return inside
    if not recursive and source_files(source, accept=has_image_suffix, recursive=True, exclude=exclude):
        return f"no image files in this folder, only in its sub-folders (add {argument('recursive', True)})"
    # the files the run would have read, no more: opening every file of a large tree makes a slow answer
    files = source_files(source, recursive=recursive, exclude=exclude)
    dicom = sum(is_dicom(file.path) for file in files)
    if dicom:
        return (f"no image files found, but {counted(dicom, 'DICOM file')}: `vitroll audit` reads "
                "DICOM and keeps patient data out of its outputs")
    heif = _heif_advice(sum(_is_heif(file.path) for file in files))
    return f"no image files found, but {heif}" if heif else "no image files found"


def heif_photos(source: "str | os.PathLike[str]", *, recursive: bool,
                exclude: "str | os.PathLike[str] | None" = None) -> str:
    """``"N HEIC/HEIF photos …"`` with what to do, for the files of folder ``source`` named so (an iPhone's photos,
    which Pillow does not read and :func:`discover` leaves out), or ``""`` for none (or a list file)."""
    if not Path(source).is_dir():
        return ""
    return _heif_advice(len(source_files(source, accept=_is_heif, recursive=recursive, exclude=exclude)))


def _is_heif(path: Path) -> bool:
    return path.suffix.lower() in HEIF_SUFFIXES


def _heif_advice(count: int) -> str:
    """:func:`heif_photos`' text for ``count`` HEIC/HEIF photos, ``""`` for none."""
    if not count:
        return ""
    return (f"{counted(count, 'HEIC/HEIF photo')} (an iPhone's format), which Pillow does not read: save them "
            "as JPEG or PNG")
