"""Writing an output file whole or not at all: apart from the image codecs, so that what writes text (a batch's
manifest) imports neither numpy nor Pillow."""

from __future__ import annotations

import contextlib
import csv
import os
from pathlib import Path

from vitroll.errors import VitrollError
from vitroll.io.names import NAME_MAX, READABLE, fit_name


def write_atomic(path: "str | os.PathLike[str]", data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, so no half-written file is left.

    An :class:`OSError` names ``path`` (not the temporary file) as its ``filename``. The temporary name is cut to
    fit the file system (:func:`~vitroll.io.names.fit_name`) when ``path``'s name is near its limit.
    """
    path = Path(path)
    ending = f".{os.getpid()}.tmp"
    temporary = path.with_name(fit_name(f".{path.name}", NAME_MAX - len(ending)) + ending)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError as error:
        raise OSError(error.errno, error.strerror or str(error), str(path)) from None
    finally:
        with contextlib.suppress(OSError):  # the error to report is the write's, never the clean-up's
            temporary.unlink(missing_ok=True)


def write_csv(path: "str | os.PathLike[str]", rows: "list[dict]") -> None:
    """``rows`` as a CSV file with a header, their columns those of the first row (in its order); text that cannot
    be encoded as UTF-8 (a file name's lone surrogates) is written readable (:data:`~vitroll.io.names.READABLE`).
    The tables of ``vitroll evaluate``, ``sanity`` and ``compare``."""
    with Path(path).open("w", newline="", encoding="utf-8", errors=READABLE) as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def make_output_folder(out_dir: "str | os.PathLike[str]") -> None:
    """Make ``out_dir`` and its missing parents, before any work, so that a folder that cannot be made stops a run
    before its work rather than losing it.

    Raises
    ------
    VitrollError
        ``cannot make the output folder OUT (Permission denied)`` for a folder that cannot be made (no permission, a
        read-only disk, a file in its place).
    """
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise VitrollError(f"cannot make the output folder {out_dir} ({error.strerror or error})") from error
