"""The HTML pages vitroll writes — the annotate gallery, the text page and the audit report — as jinja2 templates that
extend one base page (``base.html.j2``: skeleton and shared style), and the one environment that renders them.

A template line that starts with ``{{-``, ``{%-`` or ``{#- #}`` continues the line above: the minus strips the line
break and indentation before it, so the page is byte for byte what the one long line gave (a line break is not always
white space a browser ignores: the text page's tokens are ``white-space: pre-wrap``)."""

from __future__ import annotations

import functools
import math
from typing import Optional

import jinja2


@functools.cache
def environment() -> jinja2.Environment:
    """The environment of vitroll's templates, built once.

    Autoescape is on, so every value a renderer passes is HTML-escaped unless it is marked safe; a name a template
    uses but the renderer did not pass is an error (``StrictUndefined``), not an empty string; ``None`` prints as
    nothing (an empty cell), not as the word.
    """
    return jinja2.Environment(loader=jinja2.PackageLoader("vitroll", "templates"), autoescape=True,
                              undefined=jinja2.StrictUndefined, finalize=_blank_none)


def _blank_none(value: object) -> object:
    return "" if value is None else value


def render(template: str, **context: object) -> str:
    """The page ``template`` (a file name in this folder, e.g. ``"audit.html.j2"``) filled with ``context``."""
    return environment().get_template(template).render(**context)


def finite(value: object) -> Optional[float]:
    """A number a page can show: ``value`` as a float, or None for NaN, infinities and anything not a number."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
