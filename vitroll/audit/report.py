"""The audit report: one self-contained HTML page (inline PNGs, a tiny table sorter), a CSV and a JSON file.

Nothing here reads a DICOM header: rows carry only salted keys, whitelisted fields and numbers, unless the user
passed ``--keep-ids``. PNGs are encoded without metadata chunks; the thumbnails embedded here are made from overlays
whose burned-in text is already filled, and each row says how many text regions were filled and why its pixels were
(or were not) searched.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from vitroll._version import __version__
from vitroll.audit.metrics import METRIC_NAMES
from vitroll.audit.records import GROUP_FIELDS, INPUT_ORDER, AuditOptions, AuditRow
from vitroll.audit.summary import group_table, sentences
from vitroll.io.images import encode_png, write_atomic
from vitroll.models import ModelProvenance
from vitroll.pipelines.explain import ExplainSettings

METRIC_LABELS = {
    "outside_body": "outside body", "border": "border band", "annotation": "on annotations",
    "roi_energy": "in ROI", "pointing_hit": "pointing hit", "topk_iou": "top-k IoU",
}
ID_FIELDS = ("file", "PatientID", "StudyInstanceUID", "SOPInstanceUID")


def _finite(value: object) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _fmt(value: object, digits: int = 3) -> str:
    number = _finite(value)
    return "" if number is None else f"{number:.{digits}f}"


def _png_uri(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


PROVENANCE_COLUMNS = ("model", "weights", "weights_sha256", "method", "vitroll_version")
"""Columns repeated on every CSV row so that a row copied out of its file still says what produced it."""


@dataclass
class AuditReport:
    rows: list[AuditRow]
    options: AuditOptions
    settings: ExplainSettings
    files: int
    provenance: ModelProvenance = ModelProvenance("unknown", "not stated", "not stated by the caller")
    """The model's name and weights source (:meth:`ModelProvenance.unstated` when the caller gave none)."""

    @property
    def images(self) -> list[AuditRow]:
        """Measured images: flagged first, each part by decreasing share outside the body."""
        measured = [row for row in self.rows if row.error is None]
        return sorted(measured, key=lambda row: (not row.flagged, -(_finite(row.metrics.get("outside_body")) or 0.0)))

    @property
    def errors(self) -> list[AuditRow]:
        """Files that gave no image, in input order."""
        return sorted((row for row in self.rows if row.error is not None), key=lambda row: row.input_number or 0)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metrics with at least one value (ROI metrics only when ROIs were given)."""
        return tuple(name for name in METRIC_NAMES
                     if any(_finite(row.metrics.get(name)) is not None for row in self.images)) or METRIC_NAMES[:3]

    def sentences(self):
        return sentences(self.images, self.errors, self.files, self.options)

    def groups(self) -> list[dict]:
        return group_table(self.images, self.options.group_by)

    # --- flat records (CSV, JSON) -------------------------------------------------------------------------------

    def columns(self) -> list[str]:
        columns = ["case", "input", "study", "frame", "status", "reason", "flagged", *GROUP_FIELDS, *self.metric_names,
                   "not_measured", "prediction", "probability", "height", "width", "overlay",
                   "text_regions_filled", "text_check"]
        return columns + list(ID_FIELDS) if self.options.keep_ids else columns

    def record(self, row: AuditRow) -> dict[str, object]:
        record: dict[str, object] = {
            "case": row.case, "input": row.input_number, "study": row.study, "frame": row.frame,
            "status": "error" if row.error else ("flagged" if row.flagged else "ok"), "reason": row.error,
            "flagged": row.flagged if row.error is None else None,
            **{name: row.metadata.get(name) for name in GROUP_FIELDS},
            **{name: _finite(row.metrics.get(name)) for name in self.metric_names},
            "not_measured": "; ".join(f"{name}: {why}" for name, why in row.not_measured.items()) or None,
            "prediction": row.prediction, "probability": _finite(row.probability),
            "height": row.size_hw[0] if row.size_hw else None, "width": row.size_hw[1] if row.size_hw else None,
            "overlay": row.overlay_file,
            "text_regions_filled": row.text_regions, "text_check": row.text_check,
        }
        if self.options.keep_ids:
            record.update({name: row.identifiers.get(name) for name in ID_FIELDS})
        return record

    def records(self) -> list[dict[str, object]]:
        return [self.record(row) for row in (*self.images, *self.errors)]

    def settings_record(self) -> dict[str, object]:
        window = self.options.window
        return {
            "vitroll_version": __version__, "model": self.provenance.model, "weights": self.provenance.weights,
            "weights_description": self.provenance.description, "weights_sha256": self.provenance.sha256,
            "random_weights": self.provenance.random,
            "method": self.settings.method, "method_options": self.settings.method_options,
            "window_width_level": list(window) if window else None, "frame": self.options.frame,
            "flag_threshold": self.options.flag_threshold, "border_fraction": self.options.metrics.border_fraction,
            "top_percent": self.options.metrics.top_percent, "group_by": list(self.options.group_by),
            "keep_ids": self.options.keep_ids, "keep_burned_in_text": self.options.keep_burned_in_text,
            "salt": "not stored (keys are comparable only between runs given the same --salt)",
            "input_order": INPUT_ORDER,
        }

    def to_json(self) -> str:
        document = {
            "tool": f"vitroll {__version__} audit",
            "settings": self.settings_record(),
            "summary": [{"text": s.text, "cases": s.cases} for s in self.sentences()],
            "groups": self.groups(),
            "cases": self.records(),
        }
        return json.dumps(_json_safe(document), indent=2, ensure_ascii=False)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=[*self.columns(), *PROVENANCE_COLUMNS], lineterminator="\n")
        writer.writeheader()
        provenance = dict(zip(PROVENANCE_COLUMNS, (self.provenance.model, self.provenance.weights,
                                                   self.provenance.sha256, self.settings.method, __version__)))
        for record in self.records():
            writer.writerow({key: "" if value is None else value for key, value in {**record, **provenance}.items()})
        return buffer.getvalue()

    def write(self, out_dir: "str | os.PathLike[str]") -> dict[str, Path]:
        """Write ``report.html``, ``report.csv`` and ``report.json`` into ``out_dir``; return their paths."""
        out_dir = Path(out_dir)
        paths = {kind: out_dir / f"report.{kind}" for kind in ("html", "csv", "json")}
        write_atomic(paths["html"], render_html(self).encode("utf-8"))
        write_atomic(paths["csv"], self.to_csv().encode("utf-8"))
        write_atomic(paths["json"], self.to_json().encode("utf-8"))
        return paths


def _json_safe(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def histograms(report: AuditReport) -> Optional[bytes]:
    """One PNG (no metadata) with a histogram per metric, the flag threshold marked on the outside-body panel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [name for name in report.metric_names if name != "pointing_hit"]
    if not report.images or not names:
        return None
    figure = Figure(figsize=(3.2 * len(names), 2.6), dpi=100, layout="constrained")
    canvas = FigureCanvasAgg(figure)
    for axes, name in zip(figure.subplots(1, len(names), squeeze=False)[0], names):
        values = [v for v in (_finite(row.metrics.get(name)) for row in report.images) if v is not None]
        axes.hist(values, bins=20, range=(0.0, 1.0), color="#4a7ab5", edgecolor="white")
        axes.set_title(f"saliency {METRIC_LABELS[name]}", fontsize=10)
        axes.set_xlabel("fraction of the map's mass" if name != "topk_iou" else "IoU", fontsize=8)
        axes.set_ylabel("images", fontsize=8)
        if name == "outside_body":
            axes.axvline(report.options.flag_threshold, color="#c0392b", linestyle="--", linewidth=1)
    canvas.draw()
    return encode_png(np.ascontiguousarray(np.asarray(canvas.buffer_rgba())[..., :3]), compression=6)


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
.summary p{margin:.35em 0;line-height:1.45}.summary .cases{font-size:.85em;color:#555}
table{border-collapse:collapse;font-size:.85em}th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:middle}
th{background:#eef;cursor:pointer;user-select:none;position:sticky;top:0}th.sorted-asc::after{content:" ▲"}th.sorted-desc::after{content:" ▼"}
tr.flagged td{background:#fdecea}td.num{text-align:right;font-variant-numeric:tabular-nums}
:target td{outline:2px solid #e67e22}img.thumb{display:block;max-width:192px}
.legend{font-size:.85em;color:#555}td.not-measured{color:#777;font-style:italic}
.banner{background:#c0392b;color:#fff;font-weight:bold;padding:.6em .8em;font-size:1.1em}
.phi{font-size:.85em;color:#555;border-left:3px solid #4a7ab5;padding-left:.6em}
"""

_SORTER = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
    var up = !th.classList.contains("sorted-asc");
    table.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
    th.classList.add(up ? "sorted-asc" : "sorted-desc");
    function key(row) { var c = row.cells[col], v = c.getAttribute("data-v"); v = v === null ? c.textContent.trim() : v;
      var n = parseFloat(v); return isNaN(n) ? [1, v.toLowerCase()] : [0, n]; }
    Array.prototype.slice.call(body.rows).map(function (r) { return [key(r), r]; }).sort(function (a, b) {
      var x = a[0], y = b[0], s = x[0] !== y[0] ? x[0] - y[0] : (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0);
      return x[0] !== y[0] ? s : (up ? s : -s);
    }).forEach(function (p) { body.appendChild(p[1]); });
  });
});
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num_cell(value: object, digits: int = 3) -> str:
    number = _finite(value)
    return f'<td class="num" data-v="{"" if number is None else number!r}">{_fmt(number, digits)}</td>'


def _summary_html(report: AuditReport) -> str:
    parts = []
    for sentence in report.sentences():
        text = f'<a href="#{_e(sentence.anchor)}">{_e(sentence.text)}</a>' if sentence.anchor else _e(sentence.text)
        links = ", ".join(f'<a href="#{_e(case)}">{_e(case)}</a>' for case in sentence.cases[:12])
        more = f" and {len(sentence.cases) - 12} more" if len(sentence.cases) > 12 else ""
        parts.append(f"<p>{text}" + (f' <span class="cases">({links}{more})</span>' if links else "") + "</p>")
    return "\n".join(parts)


def _groups_html(report: AuditReport) -> str:
    fields = report.options.group_by
    if not fields or not report.images:
        return "<p>No grouping (pass --group-by).</p>" if not fields else "<p>No images.</p>"
    names = report.metric_names
    head = "".join(f"<th>{_e(f)}</th>" for f in fields) + "<th>images</th><th>flagged</th>" + "".join(
        f"<th>{_e(METRIC_LABELS[n])} mean</th><th>{_e(METRIC_LABELS[n])} median</th>" for n in names)
    body = []
    for entry in report.groups():
        cells = "".join(f"<td>{_e(v)}</td>" for v in entry["group"].values())
        cells += _num_cell(entry["count"], 0) + _num_cell(entry["flagged"], 0)
        cells += "".join(_num_cell(entry["metrics"][n]["mean"]) + _num_cell(entry["metrics"][n]["median"]) for n in names)
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="sortable" id="group-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _metric_cell(row: AuditRow, name: str) -> str:
    """A metric's cell; ``not measured`` (the reason on hover, sorted last) where a rule left it NaN."""
    if name in row.not_measured:
        return f'<td class="not-measured" title="{_e(row.not_measured[name])}" data-v="">not measured</td>'
    return _num_cell(row.metrics.get(name))


def _cases_html(report: AuditReport) -> str:
    names = report.metric_names
    ids = ID_FIELDS if report.options.keep_ids else ()
    head = ("<th>image</th><th>case</th><th>flag</th>" + "".join(f"<th>{_e(METRIC_LABELS[n])}</th>" for n in names)
            + "<th>prediction</th><th>p</th>" + "".join(f"<th>{_e(f)}</th>" for f in GROUP_FIELDS)
            + "<th>study</th><th>frame</th><th>text regions filled</th><th>pixels searched for text</th>"
            + "".join(f"<th>{_e(f)}</th>" for f in ids))
    body = []
    for row in report.images:
        image = (f'<a href="{_e(row.overlay_file)}"><img class="thumb" alt="overlay {_e(row.case)}" '
                 f'src="{_png_uri(row.thumbnail)}"></a>' if row.thumbnail else "")
        cells = (f"<td>{image}</td><td>{_e(row.case)}</td>"
                 f'<td data-v="{0 if row.flagged else 1}">{"FLAGGED" if row.flagged else ""}</td>'
                 + "".join(_metric_cell(row, n) for n in names)
                 + f"<td>{_e(row.prediction)}</td>" + _num_cell(row.probability)
                 + "".join(f"<td>{_e(row.metadata.get(f))}</td>" for f in GROUP_FIELDS)
                 + f"<td>{_e(row.study)}</td><td>{_e(row.frame)}</td>"
                 + _num_cell(row.text_regions, 0) + f"<td>{_e(row.text_check)}</td>"
                 + "".join(f"<td>{_e(row.identifiers.get(f))}</td>" for f in ids))
        body.append(f'<tr id="{_e(row.case)}"{" class=flagged" if row.flagged else ""}>{cells}</tr>')
    return f'<table class="sortable" id="case-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _errors_html(report: AuditReport) -> str:
    if not report.errors:
        return "<p>Every file was read.</p>"
    extra = "<th>file</th>" if report.options.keep_ids else ""
    rows = "".join(f'<tr id="{_e(row.case)}">' + _num_cell(row.input_number, 0)
                   + f"<td>{_e(row.case)}</td><td>{_e(row.error)}</td>"
                   + (f"<td>{_e(row.identifiers.get('file'))}</td>" if report.options.keep_ids else "") + "</tr>"
                   for row in report.errors)
    return (f'<p class="legend">Each file is listed by its number in the input list. {_e(INPUT_ORDER)}</p>'
            f'<table class="sortable" id="error-table"><thead><tr><th>file number</th><th>case</th><th>reason</th>'
            f"{extra}</tr></thead><tbody>{rows}</tbody></table>")


def _provenance_html(report: AuditReport) -> str:
    """Who made the maps: vitroll's version, the model, its weights (a loud banner when random or unstated)."""
    source = report.provenance
    digest = f"; SHA-256 {source.sha256}" if source.sha256 else ""
    line = (f'<p class="provenance" id="provenance">Produced by vitroll {_e(__version__)} with model '
            f"<b>{_e(source.model)}</b>, weights: {_e(source.description)}{_e(digest)}.</p>")
    if source.random:
        return ('<p class="banner" id="random-weights">RANDOM WEIGHTS: this model was not trained (no --pretrained '
                "or --checkpoint). Its saliency maps, predictions and every number in this report mean nothing.</p>"
                + line)
    if source.weights == "not stated":
        return ('<p class="banner" id="unstated-weights">The caller did not state where the weights came from; '
                "check them before trusting this report.</p>" + line)
    return line


def _burned_in_text_html(report: AuditReport) -> str:
    """The banner on burned-in text: a warning when it was kept, else what was searched and filled."""
    if report.options.keep_burned_in_text:
        return ('<p class="banner" id="burned-in-text-kept">Burned-in text was NOT searched for or removed '
                "(--keep-burned-in-text): the pixels were not checked, and the images below may show names, IDs and "
                "dates written into them.</p>")
    searched = [row for row in report.images if row.text_regions is not None]
    regions = sum(row.text_regions for row in searched)
    with_text = sum(1 for row in searched if row.text_regions)
    skipped = len(report.images) - len(searched)
    return (f'<p class="phi">Burned-in text: {len(searched)} of {len(report.images)} images searched with a text '
            f"detector; {regions} text region{'s' if regions != 1 else ''} in {with_text} of them filled black in "
            f"every image of this report"
            + (f"; {skipped} not searched because the header says BurnedInAnnotation NO" if skipped else "")
            + ". The column “pixels searched for text” gives each image's reason.</p>")


def render_html(report: AuditReport) -> str:
    """The whole report as one HTML document with everything inline."""
    hist = histograms(report)
    settings = report.settings_record()
    window = settings["window_width_level"]
    phi = ("Identifiers are included (--keep-ids): this report is NOT de-identified." if report.options.keep_ids else
           ("Text de-identified (pixels not checked, see below)" if report.options.keep_burned_in_text else
            "De-identified") + ": no names, IDs, dates, institutions, accession numbers or file names in the text. "
           "Cases and studies are keys hashed with a salt that is not stored; only scanner, body part, modality, sex "
           "and age band are shown.")
    method = ", ".join(f"{k}={v}" for k, v in settings["method_options"].items()) or "default options"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>vitroll saliency audit</title>
<style>{_STYLE}</style></head>
<body>
<h1>Saliency audit</h1>
{_provenance_html(report)}
<p class="phi">{_e(phi)}</p>
{_burned_in_text_html(report)}
<section class="summary" id="summary"><h2>Summary</h2>
{_summary_html(report)}
</section>
<p class="legend">Method {_e(report.settings.method)} ({_e(method)}); window {_e(f"W {window[0]:g}, L {window[1]:g}" if window else "from each file")};
an image is flagged when more than {_e(_fmt(report.options.flag_threshold, 2))} of its saliency lies outside the body;
the border band is {_e(_fmt(report.options.metrics.border_fraction, 2))} of each side.
Thumbnails: body outline green, likely burned-in annotations magenta, region of interest cyan, peak white cross.</p>
<section id="groups"><h2>By {_e(", ".join(report.options.group_by) or "group")}</h2>
{_groups_html(report)}
</section>
<section id="histograms"><h2>Distributions</h2>
{f'<img alt="histograms of the metrics" src="{_png_uri(hist)}">' if hist else "<p>No images.</p>"}
</section>
<section id="cases"><h2>Images ({len(report.images)}; flagged first; click a column to sort)</h2>
{_cases_html(report)}
</section>
<section id="errors"><h2>Files that could not be read ({len(report.errors)})</h2>
{_errors_html(report)}
</section>
<script>{_SORTER}</script>
</body></html>
"""
