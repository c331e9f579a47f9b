"""Finding a run's input files: one set of rules for every pipeline.

A folder stands for the files below it (its sub-folders too when ``recursive``) that ``accept`` takes; a list file
(``.txt``/``.csv``/``.lst``) for the paths it lists. The rules, whoever calls:

- names starting with ``.`` (files and folders) are skipped;
- a symbolic link to a file is a file of its own, found under the link's path (a broken link is found too, so that
  it can be reported rather than vanish); links to folders are not followed;
- a folder to search that cannot be listed (no permission) is an error, not skipped: its files would vanish;
- a folder's files are sorted by their path relative to it (POSIX separators), character by character in Unicode
  code-point order — the order of ``cd FOLDER && find . -not -xtype d -not -path '*/.*' | LC_ALL=C sort`` on
  UTF-8 names.

What a file *is* (image, DICOM, neither) is the decoder's business: ``accept`` only decides which names count.
"""

from __future__ import annotations

import csv
import errno
import os
from pathlib import Path
from typing import Callable, NamedTuple, Sequence, TypeVar

from vitroll.errors import ImageReadError, VitrollError
from vitroll.io.images import IMAGE_SUFFIXES, cannot_open
from vitroll.io.textfile import read_text_file

LIST_SUFFIXES = (".txt", ".csv", ".lst")
Item = TypeVar("Item")


class FoundFile(NamedTuple):
    path: Path
    """Where the file is read (a symbolic link is read through)."""
    key: str
    """Its path relative to the folder searched or to the list file's folder, POSIX; for a listed path outside that
    folder ``..``-led (as listed) or absolute."""


Accept = Callable[[Path], bool]
"""Which files count, judged by path alone (nothing is opened)."""


def every_file(_path: Path) -> bool:
    """Accept every file (the audit reports on each one, whatever it turns out to be)."""
    return True


def has_image_suffix(path: Path) -> bool:
    """Accept the files whose suffix names an image format (:data:`~vitroll.io.images.IMAGE_SUFFIXES`)."""
    return path.suffix.lower() in IMAGE_SUFFIXES


def is_within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or below it (as given: resolve both first to compare where they lead)."""
    return path == folder or folder in path.parents


def folder_files(folder: "str | os.PathLike[str]", *, accept: Accept = every_file, recursive: bool = True,
                 exclude: "str | os.PathLike[str] | None" = None) -> list[FoundFile]:
    """The files below ``folder`` that ``accept`` takes, by the module's rules, sorted by key.

    ``exclude`` is a folder whose contents are never found (a run's own output folder inside its input folder).

    Raises :class:`~vitroll.errors.ImageReadError` when ``folder`` or a sub-folder to search cannot be listed (no
    permission): its files would be left out without a word.
    """
    folder = Path(folder)
    skip = Path(exclude).resolve() if exclude is not None else None
    found = []
    unlisted: list[OSError] = []
    for root, folders, files in os.walk(folder, onerror=unlisted.append):  # links to folders are not entered
        if skip is not None and is_within(Path(root).resolve(), skip):
            folders[:] = []
            continue
        folders[:] = [name for name in folders if recursive and not name.startswith(".")]
        for name in files:
            path = Path(root, name)
            # a regular file or a broken link; not a FIFO, socket or device (reading one could block forever)
            if name.startswith(".") or not (path.is_file() or (path.is_symlink() and not path.exists())):
                continue
            if accept(path):
                found.append(FoundFile(path, path.relative_to(folder).as_posix()))
    blocked = [error for error in unlisted if skip is None or not is_within(Path(error.filename).resolve(), skip)]
    if blocked:
        raise ImageReadError(blocked[0].filename, f"cannot be listed ({blocked[0].strerror}), so its files would be "
                                                  "left out; make it readable")
    return sorted(found, key=lambda file: file.key)


def listed_files(list_file: "str | os.PathLike[str]") -> list[FoundFile]:
    """The paths a list file names, in its order: one per line, or a CSV whose ``path`` column (else its first)
    holds them, relative to the list file's folder or absolute, taken as given whatever their suffix; empty lines
    and lines starting with ``#`` are skipped. A line of a ``.txt``/``.lst`` list that names a file as a whole is
    that file, though it holds a comma or a quote (``Doe, J.png``, as ``find > list.txt`` writes it)."""
    list_file = Path(list_file)
    text = read_text_file(list_file, "the list of inputs")
    lines = text.splitlines()
    if list_file.suffix.lower() == ".csv":
        rows = list(csv.reader(lines))
    else:
        rows = [[line] if line.strip() and os.path.lexists(os.path.join(list_file.parent, line.strip()))
                else next(csv.reader([line]), []) for line in lines]
    rows = [row for row in rows if row and row[0].strip() and not row[0].startswith("#")]
    column = 0
    if rows and "path" in [cell.strip().lower() for cell in rows[0]]:
        column = [cell.strip().lower() for cell in rows[0]].index("path")
        rows = rows[1:]
    found = []
    for row in rows:
        listed = row[column].strip()
        # lexically normalised, so that the key joined to the list's folder is the very path that is read
        path = os.path.normpath(os.path.join(list_file.parent, listed))
        relative = os.path.relpath(path, list_file.parent)
        outside = relative == os.pardir or relative.startswith(os.pardir + os.sep)
        key = "/" + path.lstrip("/") if outside and os.path.isabs(listed) else Path(relative).as_posix()
        found.append(FoundFile(Path(path), key))
    return found


def source_files(source: "str | os.PathLike[str]", *, accept: Accept = every_file, recursive: bool = True,
                 exclude: "str | os.PathLike[str] | None" = None) -> list[FoundFile]:
    """The files of one source: a folder (:func:`folder_files`) or a list file (:func:`listed_files`).

    Raises :class:`~vitroll.errors.ImageReadError` when ``source`` is neither or does not exist.
    """
    source = Path(source)
    if reachable(source).is_dir():
        return folder_files(source, accept=accept, recursive=recursive, exclude=exclude)
    if source.is_file() and source.suffix.lower() in LIST_SUFFIXES:
        return listed_files(source)
    if source.exists():
        raise ImageReadError(source, f"not a folder or a list file ({', '.join(LIST_SUFFIXES)})")
    raise ImageReadError(source, "no such folder or list file")


def _first_of_each_file(items: Sequence[Item], path_of: Callable[[Item], Path]) -> list[Item]:
    """``items`` with each file once, where it first appears (the rule of :func:`unique_paths`)."""
    seen: set[str] = set()
    unique = []
    for item in items:
        name = os.path.abspath(path_of(item))
        if name not in seen:
            seen.add(name)
            unique.append(item)
    return unique


def unique_paths(paths: Sequence["str | os.PathLike[str]"]) -> list[Path]:
    """``paths`` with each file once, where it first appears: two paths are the same file when they name the same
    absolute path (``x.png``, ``./x.png``, ``a/../x.png``); a symbolic link and its target stay two files."""
    return _first_of_each_file([Path(p) for p in paths], lambda path: path)


def check_given_paths_exist(paths: Sequence["str | os.PathLike[str]"]) -> None:
    """Raise :class:`~vitroll.errors.VitrollError` for the first path that does not exist (a broken link exists: it
    is a file to report on): the user's typo, found before any model loads."""
    for path in (Path(p) for p in paths):
        if not reachable(path).exists() and not path.is_symlink():
            raise VitrollError(f"{path}: no such file or folder")


def reachable(path: Path) -> Path:
    """``path``, once its status can be read: a folder above it without search permission makes ``Path.is_dir`` and
    ``Path.exists`` raise a bare PermissionError rather than answer, which is told here as
    :class:`~vitroll.errors.ImageReadError` naming ``path``."""
    try:
        path.lstat()
    except FileNotFoundError:
        pass  # missing: the caller's own answer
    except OSError as error:
        if error.errno not in (errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
            raise ImageReadError(path, cannot_open(error)) from None
    return path


def given_found_files(paths: Sequence["str | os.PathLike[str]"], *, accept: Accept = every_file,
                      exclude: "str | os.PathLike[str] | None" = None) -> list[FoundFile]:
    """Files as given, plus the files under given folders (:func:`folder_files`, recursive, nothing under
    ``exclude``: the run's own output folder), in the order given, each file once where it first appears (as in
    :func:`unique_paths`). A file named on its own has its name as key, a folder's file its path relative to the
    folder: keys do not change when the folders given are moved or renamed.

    A file named on its own is taken whatever ``accept`` says: the user chose it. A path that does not exist is
    the user's typo, not a file to report on: it raises :class:`~vitroll.errors.VitrollError` before anything is
    read.
    """
    check_given_paths_exist(paths)
    found: list[FoundFile] = []
    for path in (Path(p) for p in paths):
        if path.is_dir():
            found += folder_files(path, accept=accept, exclude=exclude)
        else:
            found.append(FoundFile(path, path.name))
    return _first_of_each_file(found, lambda file: file.path)


def given_files(paths: Sequence["str | os.PathLike[str]"], *, accept: Accept = every_file,
                exclude: "str | os.PathLike[str] | None" = None) -> list[Path]:
    """The paths of :func:`given_found_files`."""
    return [file.path for file in given_found_files(paths, accept=accept, exclude=exclude)]
