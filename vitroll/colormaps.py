"""matplotlib colormaps by name, with the closest names for a misspelt one; without torch, so that the command line
checks ``--cmap`` while it parses."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from vitroll.errors import OptionValueError

if TYPE_CHECKING:
    from matplotlib.colors import Colormap


def named_colormap(name: str) -> "Colormap":
    """matplotlib's colormap ``name``.

    Raises
    ------
    OptionValueError
        For a name matplotlib does not know, with the closest names it does.
    """
    import matplotlib

    try:
        return matplotlib.colormaps[name]
    except KeyError:
        by_lower = {known.lower(): known for known in matplotlib.colormaps}
        close = [by_lower[known] for known in difflib.get_close_matches(name.lower(), by_lower, n=3, cutoff=0.75)]
        hint = f"did you mean {', '.join(close)}?" if close else "e.g. jet, viridis, inferno, gray"
        raise OptionValueError(f"unknown matplotlib colormap {name!r} ({hint})") from None
