"""File names that fit the file system: most allow 255 bytes of UTF-8 per name, and an input's own name (at that
limit already) plus an output's suffix may not."""

from __future__ import annotations

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


def utf8_name(name: str) -> str:
    """``name`` as valid UTF-8. A file name read from disk that is not (Python keeps its bytes as surrogates:
    ``caf\\udce9.png`` for Latin-1 ``café.png``) has those bytes spelt ``\\xe9`` and ``~`` with 12 hex digits of
    the SHA-256 of its bytes after it, so that it stays distinct from a name spelt that way.

    >>> utf8_name("photo.png"), utf8_name("caf\\udce9.png")
    ('photo.png', 'caf\\\\xe9.png~507c1cbe909e')
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raw = name.encode("utf-8", "surrogateescape")
        return spelt_bytes(name) + _HASH_MARK + hashlib.sha256(raw).hexdigest()[:12]
    return name


def spelt_bytes(text: str) -> str:
    """``text`` with the bytes that Python keeps as surrogates (a file name that is not UTF-8) spelt ``\\xe9``: a
    page would show each as "�".

    >>> spelt_bytes("caf\\udce9.png")
    'caf\\\\xe9.png'
    """
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
