"""Numbers → words: per-group statistics and the plain-language sentences at the top of an audit report."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from vitroll.audit.metrics import METRIC_NAMES, group_statistics
from vitroll.audit.records import AuditOptions, AuditRow
from vitroll.io.dicom import UNKNOWN
from vitroll.wording import counted

BORDER_NOTE = 0.25
"""An image is mentioned for its border band when more than this share of its saliency lies there."""
ANNOTATION_NOTE = 0.10
"""…and for burned-in annotations above this share."""
CONCENTRATION = 0.5
"""A scanner model is named when at least this share of the flagged images, and two of them or more, comes from it."""


@dataclass
class Sentence:
    text: str
    cases: list[str] = field(default_factory=list)
    """Anchors (case keys) of the images the sentence is about."""
    anchor: Optional[str] = None
    """Section the sentence itself links to."""


@dataclass(frozen=True)
class Coverage:
    """What the audit covers and what it left out, each count naming what it counts: a file streamed in parts can
    have several rows not audited (one per run of failing parts) and images too."""

    files: int
    images: int
    """Frames explained and measured (one per single-frame file)."""
    files_not_audited: int
    """Files that gave no image at all."""
    files_partly_audited: int
    """Files some of whose frames gave images and others none."""
    frames_not_audited: int
    """Frames of the partly audited files that gave no image."""
    rows_not_audited: int
    """Rows of the report's list of what was not audited (a file, a run of frames, or a frame each)."""
    files_interrupted: int = 0
    """Files (of those not audited or partly audited) that the audit, interrupted, did not reach or finish."""

    @classmethod
    def of(cls, rows: list[AuditRow], errors: list[AuditRow], files: int) -> "Coverage":
        """``rows``: the measured images; ``errors``: the rows not audited; ``files``: every file found."""
        with_images = {row.input_number for row in rows}
        failed = {row.input_number for row in errors}
        # a row not audited in a file that gave images too stands for its frames, or for the one frame whose
        # overlay could not be written
        left_out = sum(1 if row.frames is None else len(row.frames)
                       for row in errors if row.input_number in with_images)
        return cls(files=files, images=len(rows), files_not_audited=len(failed - with_images),
                   files_partly_audited=len(failed & with_images), frames_not_audited=left_out,
                   rows_not_audited=len(errors),
                   files_interrupted=len({row.input_number for row in errors if row.interrupted}))

    def not_audited(self) -> str:
        """``2 files``, ``8 frames of 1 file``, ``1 file and 8 frames of 1 other file``, or ``0 files``."""
        parts = [counted(self.files_not_audited, "file")] if self.files_not_audited else []
        if self.files_partly_audited:
            files = counted(self.files_partly_audited, "other file" if parts else "file")
            parts.append(f"{counted(self.frames_not_audited, 'frame')} of {files}")
        return " and ".join(parts) or "0 files"

    def not_audited_verb(self) -> str:
        """``was`` or ``were``, after :meth:`not_audited`."""
        one = (self.files_not_audited, self.frames_not_audited if self.files_partly_audited else 0) in ((1, 0), (0, 1))
        return "was" if one else "were"

    def record(self) -> dict[str, int]:
        """The counts for the JSON report."""
        return {"files": self.files,
                "files_audited": self.files - self.files_not_audited - self.files_partly_audited,
                "files_partly_audited": self.files_partly_audited, "files_not_audited": self.files_not_audited,
                "images": self.images, "frames_not_audited_in_partly_audited_files": self.frames_not_audited,
                "rows_not_audited": self.rows_not_audited, "files_interrupted": self.files_interrupted}


def percent(value: float) -> str:
    return f"{100 * value:.0f} %"


def share(part: int, whole: int, noun: str = "images") -> str:
    """``3 of 5 images (60 %)``."""
    return f"{part} of {whole} {noun} ({percent(part / whole) if whole else '–'})".replace("  ", " ")


def group_key(row: AuditRow, fields: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(row.metadata.get(name, UNKNOWN) for name in fields)


def group_table(rows: list[AuditRow], fields: tuple[str, ...]) -> list[dict]:
    """Per combination of ``fields``: count, flagged count and mean/median/count of every metric; largest first."""
    groups: dict[tuple[str, ...], list[AuditRow]] = {}
    for row in rows:
        groups.setdefault(group_key(row, fields), []).append(row)
    table = [{
        "group": dict(zip(fields, key)),
        "count": len(members),
        "flagged": sum(row.flagged for row in members),
        "metrics": group_statistics([row.metrics for row in members]),
    } for key, members in groups.items()]
    return sorted(table, key=lambda entry: (-entry["count"], tuple(entry["group"].values())))


def _above(rows: list[AuditRow], metric: str, threshold: float) -> list[AuditRow]:
    return [row for row in rows if np.isfinite(row.metrics.get(metric, np.nan)) and row.metrics[metric] > threshold]


def _cases(rows: list[AuditRow]) -> list[str]:
    return [row.case for row in rows]


def sentences(rows: list[AuditRow], errors: list[AuditRow], files: int, options: AuditOptions) -> list[Sentence]:
    """The report's opening paragraph, each sentence with the cases it speaks of."""
    n = len(rows)
    coverage = Coverage.of(rows, errors, files)
    said = [Sentence(
        f"The audit covers {counted(n, 'image')} from {counted(files, 'file')} in "
        f"{counted(len({row.study for row in rows}), 'study')}"
        + (f"; {coverage.not_audited()} {coverage.not_audited_verb()} not audited (listed by number in the input "
           f"list, with the reason{'' if len(errors) == 1 else 's'})." if errors else "."),
        _cases(errors), "errors" if errors else "cases")]
    left = [row for row in errors if row.interrupted]
    if left:
        said.append(Sentence(f"The audit was interrupted (Ctrl-C) before it reached {not_reached(left)}: listed as "
                             "not audited, with the reason \"interrupted\".", _cases(left), "errors"))
    if not n:
        return said
    said.extend(_not_measured_sentences(rows, "outside_body", "the share of saliency outside the body",
                                        "these images are never flagged on it"))
    measured = [row for row in rows if "outside_body" not in row.not_measured]
    threshold = options.flag_threshold
    phrase = "more than half" if threshold == 0.5 else f"more than {percent(threshold)}"
    flagged = [row for row in measured if row.flagged]
    if measured and not flagged:
        said.append(Sentence(f"In none of the {len(measured)} {'measured ' if len(measured) < n else ''}images does "
                             f"{phrase} of the saliency lie outside the body.", [], "cases"))
    elif flagged:
        noun = "measured images" if len(measured) < n else "images"
        text = f"In {share(len(flagged), len(measured), noun)} {phrase} of the saliency lies outside the body"
        model, count = Counter(row.metadata.get("ManufacturerModelName", UNKNOWN) for row in flagged).most_common(1)[0]
        if count >= 2 and model != UNKNOWN and count >= CONCENTRATION * len(flagged):  # one image shows no pattern
            overall = sum(row.metadata.get("ManufacturerModelName") == model for row in rows)
            them = "all of them come" if count == len(flagged) else f"{count} of them come"
            text += f"; {them} from one scanner model ({model}), which supplied {overall} of all {n} images"
        said.append(Sentence(text + ".", _cases(flagged), "cases"))
    said.extend(_group_sentence(rows, options.group_by))
    border = _above(rows, "border", BORDER_NOTE)
    if border:
        said.append(Sentence(
            f"In {share(len(border), n)} more than {percent(BORDER_NOTE)} of the saliency lies in the "
            f"{percent(options.metrics.border_fraction)} border band of the image.", _cases(border), "cases"))
    on_text = _above(rows, "annotation", ANNOTATION_NOTE)
    if on_text:
        said.append(Sentence(
            f"In {share(len(on_text), n)} more than {percent(ANNOTATION_NOTE)} of the saliency lies on likely "
            "burned-in annotations (text the detector found, or small bright markers).", _cases(on_text), "cases"))
    marked = [row for row in rows if row.metadata.get("BurnedInAnnotation", "").upper() == "YES"]
    if marked:
        said.append(Sentence(f"{share(len(marked), n)} are marked BurnedInAnnotation = YES in their header.",
                             _cases(marked), "cases"))
    wrong_header = [row for row in rows
                    if row.metadata.get("BurnedInAnnotation", "").upper() == "NO" and row.text_regions]
    if wrong_header:
        said.append(Sentence(
            f"{share(len(wrong_header), n)} say BurnedInAnnotation = NO in their header, yet the text detector found "
            "text in their pixels (filled black in this report): the header may be wrong for them.",
            _cases(wrong_header), "cases"))
    with_roi = [row for row in rows if np.isfinite(row.metrics.get("roi_energy", np.nan))]
    if with_roi:
        energy = float(np.mean([row.metrics["roi_energy"] for row in with_roi]))
        hits = [row for row in with_roi if row.metrics["pointing_hit"] == 1.0]
        iou = float(np.nanmean([row.metrics["topk_iou"] for row in with_roi]))
        said.append(Sentence(
            f"{len(with_roi)} images have a region of interest: on average {percent(energy)} of the saliency lies "
            f"inside it, the peak falls inside it (the pointing game) in {share(len(hits), len(with_roi), '')}, and "
            f"the top {options.metrics.top_percent:g} % of the map overlaps it with a mean IoU of {iou:.2f}.",
            _cases([row for row in with_roi if row not in hits]), "cases"))
    said.extend(_not_measured_sentences(rows, "roi_energy", "the saliency inside the region of interest"))
    return said


def not_reached(rows: list[AuditRow]) -> str:
    """What the rows an interrupt left stand for, by file number: ``frames 4 to 6 of file 3 and files 4 to 9, 12``."""
    parts = [f"{_span('frame', row.frames.start, row.frames[-1])} of file {row.input_number}"
             for row in rows if row.frames is not None]
    runs: list[list[int]] = []
    for number in sorted(row.input_number for row in rows if row.frames is None):
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    if runs:
        noun = "file" if runs[0][0] == runs[-1][1] else "files"
        parts.append(f"{noun} " + ", ".join(str(a) if a == b else f"{a} to {b}" for a, b in runs))
    return " and ".join(parts)


def _span(noun: str, first: int, last: int) -> str:
    """``frame 4`` or ``frames 4 to 6``."""
    return f"{noun} {first}" if first == last else f"{noun}s {first} to {last}"


def _not_measured_sentences(rows: list[AuditRow], metric: str, what: str, after: str = "") -> list[Sentence]:
    """One sentence per reason for which ``metric`` was left unmeasured by rule, with its images, ``after`` (words in
    brackets) ending each."""
    by_reason: dict[str, list[AuditRow]] = {}
    for row in rows:
        if metric in row.not_measured:
            by_reason.setdefault(row.not_measured[metric], []).append(row)
    return [Sentence(f"For {share(len(members), len(rows))} {what} is {reason}{f' ({after})' if after else ''}.",
                     _cases(members), "cases")
            for reason, members in sorted(by_reason.items(), key=lambda item: -len(item[1]))]


def _group_sentence(rows: list[AuditRow], fields: tuple[str, ...]) -> list[Sentence]:
    """Which group (of at least two images) has the most and the least saliency outside the body."""
    if not fields:
        return []
    table = [entry for entry in group_table(rows, fields)
             if entry["count"] >= 2 and np.isfinite(entry["metrics"]["outside_body"]["mean"])]
    if len(table) < 2:
        return []
    table.sort(key=lambda entry: entry["metrics"]["outside_body"]["mean"])
    low, high = table[0], table[-1]

    def name(entry: dict) -> str:
        return ", ".join(f"{field_name} {value}" for field_name, value in entry["group"].items())

    members = [row for row in rows if group_key(row, fields) == tuple(high["group"].values())]
    return [Sentence(
        f"By {', '.join(fields)}, the share of saliency outside the body is highest for {name(high)} "
        f"(mean {percent(high['metrics']['outside_body']['mean'])} over {high['count']} images) and lowest for "
        f"{name(low)} (mean {percent(low['metrics']['outside_body']['mean'])} over {low['count']} images).",
        _cases(members), "groups")]


__all__ = ["Sentence", "counted", "group_table", "sentences", "METRIC_NAMES"]
