"""The audit report: one self-contained HTML page (inline PNGs, a tiny table sorter), a CSV and a JSON file.

Nothing here reads a DICOM header: rows carry only salted keys, whitelisted fields and numbers, unless the user
passed ``--keep-ids``. PNGs are encoded without metadata chunks (but ``sRGB``, :func:`~vitroll.io.images.srgb_tagged`);
the thumbnails embedded here are made from overlays whose burned-in text is already filled, and each row says how
many text regions were filled and why its pixels were (or were not) searched.
"""

from __future__ import annotations

import base64
import contextlib
import csv
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
from vitroll.audit.summary import Coverage, group_table, sentences
from vitroll.io.images import encode_png
from vitroll.io.writing import write_atomic
from vitroll.models import ModelProvenance
from vitroll.models.provenance import no_weights_given
from vitroll.pipelines.explain import ExplainSettings
from vitroll.templates import finite, render
from vitroll.wording import argument

METRIC_LABELS = {
    "outside_body": "outside body", "border": "border band", "annotation": "on annotations",
    "roi_energy": "in ROI", "pointing_hit": "pointing hit", "topk_iou": "top-k IoU",
}
ID_FIELDS = ("file", "PatientID", "StudyInstanceUID", "SOPInstanceUID")


def _fmt(value: object, digits: int = 3) -> str:
    number = finite(value)
    return "" if number is None else f"{number:.{digits}f}"


def which_frames(row: AuditRow) -> str:
    """Which frames a row not audited stands for: ``4-7`` (a run of parts), ``2`` (one frame), ``all`` (the file)."""
    if row.frames is not None:
        return f"{row.frames.start}-{row.frames[-1]}"
    return "all" if row.frame is None else str(row.frame)


def _status(row: AuditRow) -> str:
    """``interrupted`` (not reached), ``error`` (not audited otherwise), ``flagged`` or ``ok``."""
    if row.error:
        return "interrupted" if row.interrupted else "error"
    return "flagged" if row.flagged else "ok"


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
        return sorted(measured, key=lambda row: (not row.flagged, -(finite(row.metrics.get("outside_body")) or 0.0)))

    @property
    def errors(self) -> list[AuditRow]:
        """Files that gave no image, in input order."""
        return sorted((row for row in self.rows if row.error is not None), key=lambda row: row.input_number or 0)

    @property
    def interrupted(self) -> list[AuditRow]:
        """The rows not audited because the audit was interrupted before it reached them, in input order."""
        return [row for row in self.errors if row.interrupted]

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The metrics with at least one value (ROI metrics only when ROIs were given)."""
        return tuple(name for name in METRIC_NAMES
                     if any(finite(row.metrics.get(name)) is not None for row in self.images)) or METRIC_NAMES[:3]

    @property
    def coverage(self) -> Coverage:
        """Files, images and frames audited and not."""
        return Coverage.of(self.images, self.errors, self.files)

    def sentences(self):
        return sentences(self.images, self.errors, self.files, self.options)

    def groups(self) -> list[dict]:
        return group_table(self.images, self.options.group_by)

    # --- flat records (CSV, JSON) -------------------------------------------------------------------------------

    def columns(self) -> list[str]:
        columns = ["case", "input", "study", "frame", "frames", "status", "reason", "flagged", *GROUP_FIELDS,
                   *self.metric_names, "not_measured", "prediction", "probability", "height", "width", "overlay",
                   "text_regions_filled", "text_check"]
        return columns + list(ID_FIELDS) if self.options.keep_ids else columns

    def record(self, row: AuditRow) -> dict[str, object]:
        record: dict[str, object] = {
            "case": row.case, "input": row.input_number, "study": row.study, "frame": row.frame,
            "frames": which_frames(row) if row.error else None,
            "status": _status(row), "reason": row.error,
            "flagged": row.flagged if row.error is None else None,
            **{name: row.metadata.get(name) for name in GROUP_FIELDS},
            **{name: finite(row.metrics.get(name)) for name in self.metric_names},
            "not_measured": "; ".join(f"{name}: {why}" for name, why in row.not_measured.items()) or None,
            "prediction": row.prediction, "probability": finite(row.probability),
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
            "trust_burned_in_header": self.options.trust_burned_in_header,
            "allow_recognizable_features": self.options.allow_recognizable_features,
            "salt": "not stored (keys are comparable only between runs given the same --salt)",
            "input_order": INPUT_ORDER,
        }

    def to_json(self) -> str:
        document = {
            "tool": f"vitroll {__version__} audit",
            "settings": self.settings_record(),
            "counts": self.coverage.record(),
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
        """Write ``report.csv``, ``report.json`` and ``report.html`` into ``out_dir``; return their paths.

        The tables go first: they are the smallest, so a disk that fills up keeps the audit's results in them rather
        than losing all three to the HTML with its inline images.

        Raises
        ------
        OSError
            A file could not be written; its message names the files that were. The report files of an earlier
            audit into ``out_dir`` that this one did not replace are removed: left, they would be taken for this
            audit's.
        """
        out_dir = Path(out_dir)
        contents = {"csv": self.to_csv, "json": self.to_json, "html": lambda: render_html(self)}
        paths = {kind: out_dir / f"report.{kind}" for kind in contents}
        written: list[str] = []
        for kind, content in contents.items():
            try:
                write_atomic(paths[kind], content().encode("utf-8"))
            except OSError as error:
                for stale in (path for name, path in paths.items() if name not in written):
                    with contextlib.suppress(OSError):  # the error to report is the write's
                        stale.unlink(missing_ok=True)
                kept = f" ({' and '.join(paths[name].name for name in written)} written)" if written else ""
                raise OSError(error.errno, f"{error.strerror or error}{kept}", error.filename) from None
            written.append(kind)
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
    """One PNG (no metadata but ``sRGB``) with a histogram per metric, the flag threshold marked on the outside-body
    panel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [name for name in report.metric_names if name != "pointing_hit"]
    if not report.images or not names:
        return None
    figure = Figure(figsize=(3.2 * len(names), 2.6), dpi=100, layout="constrained")
    canvas = FigureCanvasAgg(figure)
    for axes, name in zip(figure.subplots(1, len(names), squeeze=False)[0], names):
        values = [v for v in (finite(row.metrics.get(name)) for row in report.images) if v is not None]
        axes.hist(values, bins=20, range=(0.0, 1.0), color="#4a7ab5", edgecolor="white")
        axes.set_title(f"saliency {METRIC_LABELS[name]}", fontsize=10)
        axes.set_xlabel("fraction of the map's mass" if name != "topk_iou" else "IoU", fontsize=8)
        axes.set_ylabel("images", fontsize=8)
        if name == "outside_body":
            axes.axvline(report.options.flag_threshold, color="#c0392b", linestyle="--", linewidth=1)
    canvas.draw()
    return encode_png(np.ascontiguousarray(np.asarray(canvas.buffer_rgba())[..., :3]), compression=6)


def render_html(report: AuditReport) -> str:
    """The whole report as one HTML document with everything inline (``audit.html.j2``, every value escaped)."""
    settings = report.settings_record()
    window = settings["window_width_level"]
    phi = (f"Identifiers are included ({argument('keep_ids', True)}): this report is NOT de-identified."
           if report.options.keep_ids else
           ("Text de-identified (pixels not checked, see below)" if report.options.keep_burned_in_text else
            "De-identified") + ": no names, IDs, dates, institutions, accession numbers or file names in the text. "
           "Cases and studies are keys hashed with a salt that is not stored; only scanner, body part, modality, sex "
           "and age band are shown.")
    if report.options.allow_recognizable_features:
        phi += (" Images whose header says RecognizableVisualFeatures YES (faces, surface renderings) are included "
                f"({argument('allow_recognizable_features', True)}): their pixels can identify patients.")
    searched = [row for row in report.images if row.text_regions is not None]
    text_search = {"searched": len(searched), "regions": sum(row.text_regions for row in searched),
                   "with_text": sum(1 for row in searched if row.text_regions),
                   "skipped": len(report.images) - len(searched)}
    return render(
        "audit.html.j2", report=report, options=report.options, settings=report.settings,
        provenance=report.provenance, version=__version__, phi=phi, text_search=text_search,
        sentences=report.sentences(), groups=report.groups(), histograms=histograms(report),
        method_options=", ".join(f"{k}={v}" for k, v in settings["method_options"].items()) or "default options",
        window=f"W {window[0]:g}, L {window[1]:g}" if window else "from each file",
        labels=METRIC_LABELS, group_fields=GROUP_FIELDS, id_fields=ID_FIELDS if report.options.keep_ids else (),
        input_order=INPUT_ORDER, as_finite=finite, formatted=_fmt, png_uri=_png_uri,
        which_frames=which_frames, untrained=no_weights_given(),
        keep_text=argument("keep_burned_in_text", True), trust_header=argument("trust_burned_in_header", True))
