"""File names that fit the file system: most allow 255 bytes of UTF-8 per name, and an input's own name (at that
limit already) plus an output's suffix may not."""

from __future__ import annotations

import codecs
import hashlib

NAME_MAX = 255
"""Bytes of UTF-8 in one file name (ext4, XFS, Btrfs, APFS, NTFS in UTF-16 units, which UTF-8 bytes bound)."""
_HASH_MARK = "~"


def fit_name(name: str, max_bytes: int = NAME_MAX) -> str:
    """``name`` itself when its UTF-8 fits ``max_bytes``; else its start, cut at a character boundary, then ``~`` and
    12 hex digits of the SHA-256 of the whole name, at most ``max_bytes`` in all — the same for the same name,
    another for another.

    >>> fit_name("photo"), fit_name("a" * 30, 20), fit_name("é" * 30, 20)
    ('photo', 'aaaaaaa~3a54fc0cbc0b', 'ééé~f96161c7582c')
    """
    encoded = name.encode("utf-8")
    if len(encoded) <= max_bytes:
        return name
    tag = _HASH_MARK + hashlib.sha256(encoded).hexdigest()[:12]
    if max_bytes < len(tag):
        raise ValueError(f"no name fits in {max_bytes} bytes")
    return encoded[: max_bytes - len(tag)].decode("utf-8", "ignore") + tag


def readable(text: str) -> str:
    """``text`` as valid UTF-8 that a person can read: the bytes of a file name that is not UTF-8 (which Python keeps
    as surrogates, ``caf\\udce9.png`` for Latin-1 ``café.png``) spelt ``\\xe9``, as output names, ``manifest.csv``,
    the gallery, figure titles and the command line's messages spell them (``manifest.jsonl`` keeps them exactly).

    >>> readable("café.png"), readable("caf\\udce9.png")
    ('café.png', 'caf\\\\xe9.png')
    """
    return text.encode("utf-8", READABLE).decode("utf-8")


_CONTROL_SPELT = {code: repr(chr(code))[1:-1] for code in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)}


def single_line(text: str) -> str:
    """``text`` with its line breaks and other control characters spelt as Python writes them (``\\n``, ``\\r``,
    ``\\x1b``): a file name that holds them, printed in a message, keeps it one line and cannot move the terminal's
    cursor.

    >>> print(single_line("new\\nline.png"), single_line("café.png"))
    new\\nline.png café.png
    """
    return text.translate(_CONTROL_SPELT)


def error_line(message: str) -> str:
    """The one line a mistake is told in, ``vitroll: error: message`` (:func:`single_line`, without its newline)."""
    return f"vitroll: error: {single_line(message)}"


def _spelt(error: UnicodeError) -> tuple[str, int]:
    """The :data:`READABLE` encoding error handler."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    spelt = [f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF  # a byte kept by the file-system decoding
             else f"\\u{code:04x}" for code in map(ord, error.object[error.start:error.end])]
    return "".join(spelt), error.end


READABLE = "vitroll.readable"
"""The name of an encoding error handler that spells text as :func:`readable` does (the CLI's standard streams use
it: a path that is not UTF-8 printed with the default ``strict`` one stopped a command that had done its work)."""
codecs.register_error(READABLE, _spelt)


def utf8_name(name: str) -> str:
    """``name`` as valid UTF-8. A file name read from disk that is not (Python keeps its bytes as surrogates:
    ``caf\\udce9.png`` for Latin-1 ``café.png``) is spelt :func:`readable`, ``\\xe9``, with ``~`` and 12 hex digits of
    the SHA-256 of its bytes after it, so that it stays distinct from a name spelt that way.

    A lone surrogate that no file-system decoding makes (``\\ud800``, from a ``str`` built in Python) is spelt
    ``\\ud800``, hashed by its code point's UTF-8 form (``surrogatepass``).

    >>> utf8_name("photo.png"), utf8_name("caf\\udce9.png")
    ('photo.png', 'caf\\\\xe9.png~507c1cbe909e')
    """
    spelt = readable(name)
    if spelt == name:
        return name
    try:
        encoded = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # not a name read from disk: no bytes to give back
        encoded = name.encode("utf-8", "surrogatepass")
    return spelt + _HASH_MARK + hashlib.sha256(encoded).hexdigest()[:12]
