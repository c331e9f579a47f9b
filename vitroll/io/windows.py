"""Grey windows for display, written **width first, then level** (``--window W,L``): the named presets and the
option's parsing, apart from :mod:`vitroll.io.dicom`, which applies them, so that ``vitroll audit --help`` lists the
presets without importing numpy and Pillow."""

from __future__ import annotations

from typing import Optional

from vitroll.errors import OptionValueError
from vitroll.wording import argument

WINDOW_PRESETS: dict[str, tuple[float, float]] = {
    "lung": (1500.0, -600.0),
    "bone": (2000.0, 300.0),
    "soft-tissue": (400.0, 40.0),
}
"""Named windows as (width W, level L) in Hounsfield units."""


def parse_window(text: Optional[str]) -> Optional[tuple[float, float]]:
    """``lung`` / ``bone`` / ``soft-tissue`` or ``W,L`` (width, level) → (W, L); None for None."""
    if text is None:
        return None
    key = text.strip().lower().replace("_", "-")
    if key in WINDOW_PRESETS:
        return WINDOW_PRESETS[key]
    parts = key.split(",")
    try:
        width, level = (float(part) for part in parts)
    except ValueError:
        raise OptionValueError(f"{argument('window')} must be one of {', '.join(WINDOW_PRESETS)} or W,L (width,level); "
                               f"got {text!r}") from None
    if width < 1:
        raise OptionValueError(f"{argument('window')} width must be at least 1; got {width:g}")
    return width, level
