"""Writing an output file whole or not at all: apart from the image codecs, so that what writes text (a batch's
manifest) imports neither numpy nor Pillow."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from vitroll.io.names import NAME_MAX, fit_name


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
