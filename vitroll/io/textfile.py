"""Reading the small text files a user gives (lists of inputs, class names, texts, boxes): one set of rules.

They are UTF-8; a leading byte-order mark, which Windows editors write, is dropped rather than read as part of the
first line. A file that cannot be read, or is not UTF-8, is one error naming the file, what it was read for and why.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from vitroll.errors import VitrollError


class TextFileError(VitrollError):
    """A text file the user gave cannot be read or is not UTF-8."""

    def __init__(self, path: object, what: str, reason: str) -> None:
        super().__init__(f"{path}: cannot read {what} ({reason})")
        self.path = path
        self.reason = reason


def not_utf8(error: UnicodeDecodeError) -> str:
    """Why bytes are not UTF-8, in words: ``not UTF-8 text: byte 0xe9 at offset 3``."""
    return f"not UTF-8 text: byte 0x{error.object[error.start]:02x} at offset {error.start}"


def _why(error: "OSError | UnicodeDecodeError") -> str:
    if isinstance(error, UnicodeDecodeError):
        return not_utf8(error)
    return error.strerror or str(error)


def read_text_file(path: "str | os.PathLike[str]", what: str) -> str:
    """The text of the UTF-8 file ``path`` without a leading byte-order mark; ``what`` (``the list of inputs``,
    ``class names``…) names its use in the :class:`TextFileError` raised when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise TextFileError(path, what, _why(error)) from None


STANDARD_INPUT = "-"
"""The name that stands for standard input where a command reads a file of texts (``vitroll text --file -``)."""


def is_standard_input(path: "str | os.PathLike[str]") -> bool:
    """Whether ``path`` stands for standard input: the string ``-``, as the command line gives it. A path object is a
    file, ``Path("-")`` and ``Path("./-")`` too (both of which ``os.fspath`` spells ``-``)."""
    return isinstance(path, str) and path == STANDARD_INPUT


def read_text_file_or_input(path: "str | os.PathLike[str]", what: str) -> str:
    """:func:`read_text_file`, or the whole of standard input, by the same rules, when ``path`` is the string ``-``
    (as ``cat`` and ``sort`` read it; a file named ``-`` is ``./-``, or any path object,
    :func:`is_standard_input`): named ``standard input`` in the :class:`TextFileError`."""
    if not is_standard_input(path):
        return read_text_file(path, what)
    stream = getattr(sys.stdin, "buffer", None)  # sys.stdin is None when the process was started without one
    if stream is None:
        raise TextFileError("standard input", what, "there is none")
    try:
        return stream.read().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise TextFileError("standard input", what, _why(error)) from None
