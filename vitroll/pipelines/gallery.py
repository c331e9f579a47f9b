"""The gallery of an annotate run: ``OUT/index.html``, a page that opens from the file system (no server, no network)
with the overlays in a grid, sorted and filtered in the browser, and a per-class summary.

The rows travel in ``OUT/gallery/rows.js`` (a script the page loads, since a ``file://`` page may not fetch JSON), and
the page shows them a page of :data:`PAGE_SIZE` cards at a time, thumbnails loaded lazily, so that 10^5 rows stay
fast; the per-class summary is computed here, once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote

import numpy as np

from vitroll.io.names import readable
from vitroll.io.writing import write_atomic
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.legend import legend_html
from vitroll.pipelines.manifest import read_settings
from vitroll.templates import finite, render

PAGE_SIZE = 60
ENTROPY_BINS = 10
PEAK_BINS = 5
FIELDS = ("path", "status", "error", "top1_name", "top1_probability", "entropy", "top10_mass", "agreement", "peak_x",
          "peak_y", "width", "height", "overlay", "heatmap", "figure")
"""The manifest columns the page shows."""
LINK_FIELDS = ("overlay", "heatmap", "figure")
"""Output paths the page uses as URLs (image sources, links): percent-encoded, so that a ``#``, ``?``, ``%`` or space
in a file name stays part of the name."""
SORT_KEYS = (("path", "name"), ("top1_probability", "probability"), ("entropy", "entropy"),
             ("top10_mass", "top-10 % mass"), ("agreement", "agreement"), ("top1_name", "class"))
TEXT_KEYS = ("path", "top1_name")
"""Sort keys whose values are text: a missing value sorts as "" among them, as −∞ among numbers."""
Drawing = tuple[str, str]
"""How an overlay was coloured: (colormap, normalisation)."""


def _page_value(key: str, value: Any) -> Any:
    """A manifest value as the page takes it: a number that is not finite as null, an output path as a relative URL,
    a text :func:`~vitroll.io.names.readable` (a file name that is not UTF-8 with its bytes as ``\\xe9``)."""
    if isinstance(value, float):
        return finite(value)
    if key in LINK_FIELDS and value:
        return quote(str(value))
    return readable(value) if isinstance(value, str) else value


def _page_row(row: dict[str, Any]) -> dict[str, Any]:
    """The fields the page shows (:func:`_page_value`)."""
    return {key: _page_value(key, row.get(key)) for key in FIELDS}


def class_summary(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per predicted class of the explained rows: count, mean probability and entropy, the entropy histogram
    (:data:`ENTROPY_BINS` bins over [0, 1], as shares of the fullest bin) and where the peaks lie
    (:data:`PEAK_BINS` × :data:`PEAK_BINS` cells of the image, row-major, as shares of the fullest cell)."""
    by_class: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row.get("status") == "ok":
            by_class[readable(str(row.get("top1_name")))].append(row)
    summaries = []
    for name in sorted(by_class):
        members = by_class[name]
        entropies = np.array([e for e in (finite(r.get("entropy")) for r in members) if e is not None])
        probabilities = np.array([p for p in (finite(r.get("top1_probability")) for r in members) if p is not None])
        entropy_counts = np.histogram(entropies, bins=ENTROPY_BINS, range=(0.0, 1.0))[0]
        peaks = np.zeros((PEAK_BINS, PEAK_BINS))
        for row in members:
            if all(finite(row.get(key)) for key in ("width", "height")) and row.get("peak_x") is not None:
                column = min(int(row["peak_x"] / row["width"] * PEAK_BINS), PEAK_BINS - 1)
                line = min(int(row["peak_y"] / row["height"] * PEAK_BINS), PEAK_BINS - 1)
                peaks[line, column] += 1
        summaries.append({
            "name": name, "count": len(members),
            "probability": float(probabilities.mean()) if probabilities.size else float("nan"),
            "entropy": float(entropies.mean()) if entropies.size else float("nan"),
            "entropy_histogram": (entropy_counts / max(entropy_counts.max(), 1)).tolist(),
            "peak_histogram": (peaks / max(peaks.max(), 1)).ravel().tolist(),
        })
    return summaries


def drawing_of(row: dict[str, Any], recorded: dict[str, Any], settings: ExplainSettings) -> Drawing:
    """The colormap and normalisation ``row``'s overlay was drawn with: those it records, else those of its settings
    hash in the folder's ``settings.json`` (``recorded``; rows of a vitroll that did not record them in the row), else
    ``settings``'."""
    from_folder = recorded.get(row.get("settings_hash"), {})
    return (row.get("cmap") or from_folder.get("cmap") or settings.cmap,
            row.get("normalization") or from_folder.get("normalize") or settings.normalization)


def write_gallery(out_dir: "str | Path", rows: Sequence[dict[str, Any]],
                  settings: ExplainSettings = ExplainSettings()) -> Path:
    """Write ``out_dir/index.html`` and ``out_dir/gallery/rows.js`` for the manifest ``rows`` of an annotate run
    (their paths relative to ``out_dir``, as the manifest has them); returns the page's path.

    The page has the colour legend (:func:`~vitroll.pipelines.legend.legend_html`) of each colormap and normalisation
    its overlays were drawn with (:func:`drawing_of`; ``settings``' for rows that do not say): one above the grid
    when all agree, else each listed and every card naming its own (a run resumed with ``--overwrite --limit`` and
    another ``--cmap`` keeps the older rows' overlays).
    """
    out_dir = Path(out_dir)
    recorded = read_settings(out_dir)
    drawings = [drawing_of(row, recorded, settings) if row.get("status") == "ok" else None for row in rows]
    legends = sorted({drawing for drawing in drawings if drawing} or {(settings.cmap, settings.normalization)})
    page_rows = [{**_page_row(row), "legend": None if drawing is None else legends.index(drawing)}
                 for row, drawing in zip(rows, drawings)]
    data = "window.VITROLL_ROWS = " + json.dumps(page_rows, default=str, allow_nan=False) + ";\n"
    write_atomic(out_dir / "gallery" / "rows.js", data.encode())
    failed = sum(row["status"] != "ok" for row in page_rows)
    first = next((row for row in rows if row.get("status") == "ok"), {})
    html = render("gallery.html.j2",
        title=out_dir.resolve().name, model=first.get("model", "—"), method=first.get("method", "—"),
        counts={"ok": len(page_rows) - failed, "failed": failed, "total": len(page_rows)},
        classes=class_summary(rows), statuses=sorted({row["status"] for row in page_rows}), sort_keys=SORT_KEYS,
        text_keys=TEXT_KEYS, page_size=PAGE_SIZE, peak_bins=PEAK_BINS,
        legends=[legend_html(cmap, normalization) for cmap, normalization in legends])
    write_atomic(out_dir / "index.html", html.encode())
    return out_dir / "index.html"
