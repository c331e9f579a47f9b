"""The colour legend of an overlay: the colour bar of the colormap the overlays used, low to high, and how each map
was scaled onto it (per image, by the normalisation used), as one HTML fragment for the gallery and the explorer."""

from __future__ import annotations

from typing import Literal

import numpy as np
from markupsafe import Markup

from vitroll.errors import OptionValueError
from vitroll.overlay import lookup_table
from vitroll.templates import render

SCALING = {
    "minmax": "each map scaled on its own: its lowest value at the low end, its highest at the high end",
    "percentile": "each map scaled on its own: its 1st percentile and below at the low end, its 99th percentile and "
                  "above at the high end",
}
"""How :func:`~vitroll.overlay.overlay` puts a map on the colour bar, per normalisation (``--normalize``)."""


def gradient_stops(cmap: str) -> list[tuple[float, str]]:
    """The colour bar of ``cmap`` as (position in [0, 1], ``#rrggbb``): the 256 colours of the table the overlays are
    coloured with (:func:`~vitroll.overlay.lookup_table`), evenly spaced, so that the bar is exactly their colours."""
    table = lookup_table(cmap)
    positions = np.linspace(0.0, 1.0, len(table))
    return [(float(position), "#{:02x}{:02x}{:02x}".format(*colour)) for position, colour in zip(positions, table)]


def css_gradient(cmap: str) -> str:
    """A CSS ``linear-gradient`` from left (low) to right (high) through :func:`gradient_stops`."""
    stops = ", ".join(f"{colour} {position * 100:.4f}%" for position, colour in gradient_stops(cmap))
    return f"linear-gradient(to right, {stops})"


def legend_html(cmap: str, normalization: Literal["minmax", "percentile"]) -> Markup:
    """The legend as an HTML fragment with its own inline style (the gallery page and Gradio's ``gr.HTML`` alike).

    Raises
    ------
    ValueError
        For a colormap matplotlib does not know, or a normalisation other than ``minmax`` and ``percentile``.
    """
    if normalization not in SCALING:
        raise OptionValueError(f"normalization must be one of {', '.join(SCALING)}; got {normalization!r}")
    return Markup(render("legend.html.j2", cmap=cmap, gradient=css_gradient(cmap), scaling=SCALING[normalization]))
