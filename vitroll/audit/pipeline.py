"""The audit pipeline: collect inputs, decode DICOM/PNG/TIFF frames, explain them in batches, measure, report.

Decoding is :func:`audit_frames`, the reader the batch stream (:mod:`vitroll.pipelines.stream`) runs in its
workers; :func:`audit_items` measures what the stream explained and builds the rows. A multi-frame file with more
frames than a batch is streamed as parts of at most ``batch_size`` frames (:func:`audit_inputs`), so that memory
holds a few batches of frames, never a whole long cine.

PHI: rows carry a salted case key and study key, the file's position in the input list
(:data:`~vitroll.audit.records.INPUT_ORDER`), the whitelisted header fields and numbers only. File paths, identifiers
and error messages that could quote a path enter a row only with ``keep_ids``. Burned-in text is found on the decoded
frame (:mod:`vitroll.io.redact`) and filled in every image written, after the heatmap is blended; the model still sees
the original pixels.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

import cv2
import numpy as np
from PIL import Image
from torch import nn

from vitroll.audit.metrics import (
    ROI_METRICS, MaskShapeError, annotation_mask, body_mask, body_outline_exemption, image_metrics,
)
from vitroll.audit.records import AuditItem, AuditOptions, AuditRow
from vitroll.audit.report import AuditReport
from vitroll.errors import ImageReadError, ImageTooLargeError, RecognizableFeaturesError, VitrollError
from vitroll.io.dicom import DicomImage, header_frames, read_any, recognizable_withheld, salted_key
from vitroll.io.discovery import FoundFile, given_found_files
from vitroll.io.images import encode_png, srgb_display
from vitroll.io.writing import write_atomic
from vitroll.io.redact import (TextCheck, fill_regions, find_text_regions, region_mask, require_text_detector,
                               skipped_on_request, text_check)
from vitroll.maps import peak_location
from vitroll.models import ModelProvenance
from vitroll.pipelines.explain import ExplainSettings, render, top_classes
from vitroll.pipelines.folder import one_interrupt
from vitroll.pipelines.inputs import inside_output
from vitroll.pipelines.manifest import OutputLock
from vitroll.pipelines.progress import progress_bar
from vitroll.pipelines.stream import Explained, Failed, Frame, explain_stream
from vitroll.preprocess import Preprocessing
from vitroll.wording import argument


def _scrub(text: str, path: Path) -> str:
    """Replace the file's path and name in an error message by ``<file>`` (they may carry names, IDs or dates).

    A needle with more than letters and digits (``DOE_JOHN_0001.dcm``, a path) is replaced wherever it stands as a
    whole; a name that is one plain word (``face``, ``image``, ``Smith``) only where it is quoted as a file — after a
    quote, a slash or the start of the message, or before a quote, a slash or a colon — since the sentence itself may
    use that word ("a face photograph"). A name inside a longer word (stem ``jpeg`` in ``pylibjpeg``) is left alone.
    """
    for needle in sorted({str(path), str(path.resolve()), path.name, path.stem}, key=len, reverse=True):
        if not needle:
            continue
        if re.fullmatch(r"[^\W_]+", needle):
            pattern = rf"(?:(?<=['\"/\\])|^){re.escape(needle)}(?![^\W_])|(?<![^\W_]){re.escape(needle)}(?=['\"/\\:])"
        else:
            pattern = rf"(?<![^\W_]){re.escape(needle)}(?![^\W_])"
        text = re.sub(pattern, "<file>", text)
    return text


def _sentence(text: str) -> str:
    """``text`` as a sentence: capital first letter, final full stop."""
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "." if text else "Unknown reason."


def _file_key(item: AuditInput, options: AuditOptions) -> str:
    return salted_key(options.salt, "file:" + item.name, 10)


def _study_key(item: AuditInput, study_uid: Optional[str], options: AuditOptions) -> str:
    return salted_key(options.salt, study_uid or item.name)


@dataclass(frozen=True)
class AuditInput:
    """One input of the batch stream: a file, or a part of a long multi-frame file's frames."""

    path: Path
    number: int
    """The file's position in the input list, from 1 (:data:`~vitroll.audit.records.INPUT_ORDER`)."""
    name: str
    """What its case key hashes: its path relative to the folder given (its name if given on its own), so that keys
    survive a move of the folder; a name an earlier file of the run has too (two folders given with the same layout)
    followed by a NUL and the how-manyth file of that name it is, from 2."""
    frames: Optional[range] = None
    """The frames of this part; None for the whole file (or ``--frame``)."""
    count: int = 1
    """The file's number of frames, from its header when the input list was made (1 under ``--frame``): what a row
    of frames not audited counts them against, even once the file is gone."""

    def __str__(self) -> str:
        return str(self.path)


def _distinct_names(files: Sequence[FoundFile]) -> list[str]:
    """The :attr:`AuditInput.name` of each of ``files``."""
    seen: dict[str, int] = {}
    names = []
    for file in files:
        seen[file.key] = seen.get(file.key, 0) + 1
        names.append(file.key if seen[file.key] == 1 else f"{file.key}\0{seen[file.key]}")
    return names


def audit_inputs(files: Sequence[FoundFile], options: AuditOptions) -> list[AuditInput]:
    """The stream's inputs for ``files``: a file whose header counts more frames than ``batch_size`` (and no
    ``--frame`` chosen) as consecutive parts of ``batch_size`` frames, any other file whole; so is a file whose native
    pixel data does not hold the frames its header counts, which is one row at once (a header claiming 20000 frames
    over one frame's data was 1250 parts, each reading the header again to be refused)."""
    inputs = []
    for number, (file, name) in enumerate(zip(files, _distinct_names(files)), 1):
        count, problem = (1, None) if options.frame is not None else header_frames(file.path)
        if count <= options.batch_size or problem is not None:
            inputs.append(AuditInput(file.path, number, name, count=count))
        else:
            inputs += [AuditInput(file.path, number, name, range(start, min(start + options.batch_size, count)), count)
                       for start in range(0, count, options.batch_size)]
    return inputs


def _gone(path: Path) -> bool:
    """Whether nothing is at ``path`` (or at the end of its link), its folder still readable: ``Path.exists`` raises
    a PermissionError for a file in a folder made unreadable, which is there but cannot be opened."""
    try:
        path.stat()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def audit_frames(item: AuditInput, options: AuditOptions) -> list[Frame]:
    """Decode one input for the batch stream: one :class:`Frame` per frame, its :class:`AuditItem` (row without
    input number, burned-in text mask) as ``info``; for a file that gives no image, a :class:`VitrollError` whose
    message is the reason (not yet scrubbed of the path: :func:`_error_row` does that)."""
    path = item.path
    try:
        decoded = read_any(path, window=options.window, frame=options.frame, frames=item.frames,
                           allow_recognizable=options.allow_recognizable_features, max_pixels=options.max_pixels)
    except Exception as error:  # every file must become a row: a decoder's bug fails this file, not the run
        if _gone(path):  # whatever failed reading it, its message would only quote the path or the system's
            raise VitrollError("the file is a link to a file that is not there" if path.is_symlink()
                               else "the file is gone: removed or moved while the audit ran") from None
        if isinstance(error, RecognizableFeaturesError):  # it names read_dicom's argument: the audit's is its option
            raise VitrollError(recognizable_withheld("allow_recognizable_features")) from None
        reason = getattr(error, "reason", None) or (
            str(error) if isinstance(error, VitrollError) else f"Reading failed ({type(error).__name__}: {error})")
        raise VitrollError(reason) from None
    file_key = _file_key(item, options)
    identifiers = {"file": str(path)} if options.keep_ids else {}
    study = _study_key(item, decoded.study_uid, options)
    if options.keep_ids:
        identifiers.update({k: v for k, v in decoded.identifiers.items() if v})
    many = decoded.frame_count > 1 or options.frame is not None
    check = _text_check_of(decoded, options)
    frames = []
    for index, image in decoded.frames:
        case = f"case-{file_key}" + (f"-f{index}" if many else "")
        polygons = find_text_regions(image) if check.check else np.zeros((0, 4, 2), dtype=np.float32)
        row = AuditRow(case=case, study=study, frame=index if decoded.dicom else None,
                       metadata=dict(decoded.metadata), identifiers=dict(identifiers), size_hw=image.shape[:2],
                       text_check=check.reason, text_regions=len(polygons) if check.check else None)
        profiled = Image.fromarray(image) if decoded.profiled is None else decoded.profiled
        display = srgb_display(profiled, decoded.icc_profile, case) if decoded.icc_profile else None
        frames.append(Frame(image, AuditItem(row=row, text_mask=region_mask(polygons, image.shape[:2]),
                                             colour=decoded.colour),
                            display=None if display is None else np.asarray(display)))
    return frames


def _error_row(failed: Failed, options: AuditOptions, frames: Optional[range] = None) -> AuditRow:
    """The row of a file that gave no image, or of its ``frames`` (of a file streamed in parts) that gave none, which
    its case and reason then name; its reason scrubbed of the file's path and name unless ``keep_ids``. Under
    ``--frame K`` the row is of frame K, the only one asked for."""
    reason = _sentence(failed.message if options.keep_ids else _scrub(failed.message, failed.item.path))
    return _not_audited_row(failed.item, reason, options, frames)


def _not_audited_row(item: AuditInput, reason: str, options: AuditOptions, frames: Optional[range]) -> AuditRow:
    """The row of ``item``'s ``frames`` (None: the whole file, or frame K under ``--frame K``, which its case names as
    an audited frame's does), not audited for ``reason`` (a sentence)."""
    path = item.path
    case = f"case-{_file_key(item, options)}" + (f"-f{options.frame}" if options.frame is not None else "")
    part = None  # the frames this row stands for, when not the whole file
    if frames is not None and len(frames) < item.count:
        part = frames
        one, start, last = len(frames) == 1, frames.start, frames[-1]
        case += f"-f{start}" if one else f"-f{start}-{last}"
        which = f"Frame {start} of {item.count} is" if one else f"Frames {start} to {last} of {item.count} are"
        first = reason[:1].lower() if reason[1:2].islower() else reason[:1]  # "DICOM …" keeps its capital
        reason = f"{which} not audited: {first}{reason[1:]}"
    return AuditRow(case=case, study=_study_key(item, None, options), input_number=item.number,
                    frame=options.frame, frames=part, error=reason,
                    identifiers={"file": str(path)} if options.keep_ids else {})


def _text_check_of(decoded: DicomImage, options: AuditOptions) -> TextCheck:
    if options.keep_burned_in_text:
        return skipped_on_request()
    return text_check(decoded.metadata, has_header=decoded.dicom, secondary_capture=decoded.secondary_capture,
                      trust_header=options.trust_burned_in_header)


def _resized(mask: np.ndarray, thumb: np.ndarray) -> np.ndarray:
    return cv2.resize(mask.astype(np.uint8), (thumb.shape[1], thumb.shape[0]), interpolation=cv2.INTER_NEAREST)


def _outline(thumb: np.ndarray, mask: np.ndarray, colour: tuple[int, int, int]) -> None:
    contours, _ = cv2.findContours(_resized(mask, thumb), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(thumb, contours, -1, colour, 1)


def thumbnail(overlaid: np.ndarray, saliency: np.ndarray, body: Optional[np.ndarray], annotations: np.ndarray,
              roi: Optional[np.ndarray], size: int, text_mask: Optional[np.ndarray] = None) -> bytes:
    """A PNG (no metadata but its ``sRGB`` chunk) of the overlay scaled to longer side ``size``, with outlines (no body
    outline where ``body`` is None) and a cross at the peak. Inside ``text_mask`` (H, W), the burned-in text filled in
    ``overlaid``, the outlines are filled again: the body outline found on the original pixels follows the strokes of
    letters that touch the body."""
    height, width = overlaid.shape[:2]
    scale = size / max(height, width)
    thumb_hw = (max(1, round(height * scale)), max(1, round(width * scale)))
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_NEAREST  # small images enlarged, pixels kept sharp
    thumb = np.ascontiguousarray(cv2.resize(overlaid, (thumb_hw[1], thumb_hw[0]), interpolation=interpolation))
    if body is not None:
        _outline(thumb, body, (0, 255, 0))
    _outline(thumb, annotations, (255, 0, 255))
    if roi is not None:
        _outline(thumb, roi, (0, 255, 255))
    if text_mask is not None and text_mask.any():  # its border kept: the outlines show where text was filled
        thumb = fill_regions(thumb, cv2.erode(_resized(text_mask, thumb), np.ones((3, 3), np.uint8)).astype(bool))
    row, col = peak_location(saliency)
    cv2.drawMarker(thumb, (round(col * scale), round(row * scale)), (255, 255, 255), cv2.MARKER_CROSS, 9, 1)
    return encode_png(thumb, compression=6)


def audit_items(
    inputs: Sequence[AuditInput],
    model: nn.Module,
    *,
    out_dir: "str | os.PathLike[str]",
    settings: ExplainSettings,
    options: AuditOptions,
    preprocessing: Optional[Preprocessing] = None,
    class_names: Optional[list[str]] = None,
) -> Iterator[AuditRow]:
    """One row per frame of the files of ``inputs`` (:func:`audit_inputs`), or per file that gives none: each frame
    explained in the batch stream, measured, and its overlay written to ``OUT/images/<case>.png`` (burned-in text
    filled). A file streamed in parts has one row for each run of consecutive parts that fail alike, naming their
    frames (a frame whose codestream is unlike the header fails the part it is in, and a cine cut short every part
    from where it ends); a part that failed otherwise was left out without a word."""
    # Workers not forked from this process: once it has run the text detector (an ONNX session with its own
    # threads), a forked worker can wait forever on a lock that a thread which did not survive the fork held.
    stream = explain_stream(model, inputs, functools.partial(audit_frames, options=options),
                            preprocessing or Preprocessing.from_model(model), settings, batch_size=options.batch_size,
                            workers=options.workers, multiprocessing_context="forkserver")
    held: Optional[Failed] = None  # a failure, held until the next parts of its file are known to fail alike or not
    frames: Optional[range] = None
    for record in stream:
        if isinstance(record, Failed) and held is not None and frames is not None and record.item.frames is not None \
                and (record.item.number, record.message) == (held.item.number, held.message):
            frames = range(frames.start, record.item.frames.stop)
            continue
        if held is not None:
            yield _error_row(held, options, frames)
            held = None
        if isinstance(record, Failed):
            held, frames = record, record.item.frames
        else:
            try:
                yield _measure(record, out_dir=Path(out_dir), settings=settings, options=options,
                               class_names=class_names)
            except OSError as error:  # its overlay cannot be written: this image's row says so, the audit goes on
                yield _unwritten_row(record, error)
    if held is not None:
        yield _error_row(held, options, frames)


def _unwritten_row(record: Explained, error: OSError) -> AuditRow:
    """The row of an image whose overlay could not be written: its case and header fields, no metrics, the reason
    (without the path, which is the report folder's or may name the case)."""
    row = record.info.row
    row.input_number = record.item.number
    row.metrics, row.flagged, row.overlay_file, row.thumbnail = {}, False, None, None
    row.error = f"Its overlay cannot be written into the report folder ({error.strerror or type(error).__name__})."
    return row


def _measure(record: Explained, *, out_dir: Path, settings: ExplainSettings, options: AuditOptions,
             class_names: Optional[list[str]]) -> AuditRow:
    item, image, path = record.info, record.image, record.item.path
    row = item.row
    row.input_number = record.item.number
    saliency, overlaid = render(image, record.grid_map, record.geometry, settings)
    shape_hw = image.shape[:2]
    try:
        body = options.body_masks.get(path, shape_hw, max_pixels=options.max_pixels) if options.body_masks else None
    except (ValueError, ImageTooLargeError) as error:  # its share outside the body is not measured; the audit goes on
        body, exemption = None, _mask_unread("body_masks", error)
    else:
        exemption = body_outline_exemption(row.metadata.get("Modality", ""), item.colour) if body is None else None
    if exemption is not None:
        row.not_measured["outside_body"] = exemption
    elif body is None:
        body = body_mask(image)
    # the detector's text regions find text of any colour; the heuristic adds bright markers and rulers
    annotations = annotation_mask(image, body) | item.text_mask
    roi = _region_of_interest(path, shape_hw, options, row)
    row.metrics = image_metrics(saliency, body, annotations, roi, options.metrics)
    row.flagged = bool(row.metrics["outside_body"] > options.flag_threshold)
    if record.probabilities is not None:
        _, row.prediction, row.probability = top_classes(record.probabilities, class_names, k=1)[0]
    shown = fill_regions(overlaid, item.text_mask)  # after blending: a translucent heatmap would let text through
    row.overlay_file = f"images/{row.case}.png"
    write_atomic(out_dir / row.overlay_file, encode_png(shown))
    row.thumbnail = thumbnail(shown, saliency, body, annotations, roi, options.thumbnail_size, item.text_mask)
    return row


def _mask_unread(field: str, error: Exception) -> str:
    """Why a metric is not measured when the image's mask file of :class:`AuditOptions` ``field`` (``"masks"`` or
    ``"body_masks"``) cannot be read, the field named as the caller sets it (``--body-masks`` on the command line): the
    reason of a mask over the ``max_pixels`` limit, which names no file, is told; a mask of another width to height
    than the image's (:class:`~vitroll.audit.metrics.MaskShapeError`) is said to be one, its sizes left to the
    image's row (the reason is the same for every image, as the summary counts them)."""
    if isinstance(error, MaskShapeError):
        return (f"not measured: its {argument(field)} file has another width to height than the image, so it is not "
                "this image's mask")
    reason = f": {error.reason}" if isinstance(error, ImageTooLargeError) else ""
    return f"not measured: its {argument(field)} file cannot be read as an image{reason}"


def _region_of_interest(path: Path, shape_hw: tuple[int, int], options: AuditOptions,
                        row: AuditRow) -> Optional[np.ndarray]:
    """The image's ROI from ``--masks``/``--boxes``, or None. A mask file that cannot be read, or an ROI with no pixel
    inside the image, leaves its ROI metrics not measured, with the reason (which names no file: names may be PHI)."""
    if not options.masks:
        return None
    try:
        roi = options.masks.get(path, shape_hw, max_pixels=options.max_pixels)
    except (ValueError, ImageTooLargeError) as error:
        reason = _mask_unread("masks", error)
    else:
        if roi is None or roi.any():
            return roi
        reason = "not measured: its region of interest covers no pixel of the image"
    row.not_measured.update(dict.fromkeys(ROI_METRICS, reason))
    return None


def run_audit(
    paths: Sequence["str | os.PathLike[str]"],
    model: nn.Module,
    *,
    out_dir: "str | os.PathLike[str]",
    settings: ExplainSettings,
    options: Optional[AuditOptions] = None,
    preprocessing: Optional[Preprocessing] = None,
    class_names: Optional[list[str]] = None,
    provenance: Optional[ModelProvenance] = None,
    on_interrupt: Callable[[], None] = lambda: None,
    progress: bool = False,
) -> AuditReport:
    """Audit files and folders and write ``OUT/report.html``, ``report.csv``, ``report.json`` and ``OUT/images/``.

    Every file found (:func:`~vitroll.io.discovery.given_found_files`: every file counts, each once, none under
    ``out_dir``) is one row or more;
    ``provenance`` (the model's name and weights source) heads the report, else it says the weights were not stated.

    A first Ctrl-C (in the main thread) calls ``on_interrupt`` and lets the file in flight finish; a second stops at
    once. The report is then written of what was audited, every file (or frame) not reached a row
    :attr:`~AuditRow.interrupted`; a Ctrl-C while it is written is ignored.

    With ``progress``, a bar on stderr (:func:`~vitroll.pipelines.progress.progress_bar`: plain lines now and then
    when stderr is no terminal) counts the files done and, of a multi-frame file in flight, its frames done (numbers
    only: never a file's name).
    """
    options = options or AuditOptions()
    if not options.keep_burned_in_text:
        require_text_detector()
    inputs = given_found_files(paths, exclude=out_dir)
    if not inputs:
        for path in paths:  # the one folder that is the output folder, or inside it, is named alone
            if Path(path).is_dir() and (inside := inside_output(path, out_dir)):
                raise ImageReadError(path, inside)
        raise ImageReadError(", ".join(str(p) for p in paths), "no DICOM or image files found")
    images = Path(out_dir) / "images"
    if images.exists() and not images.is_dir():  # else every image would be a row "cannot be written (File exists)"
        raise VitrollError(f"{images} is a file, not a folder: the audit writes its overlays there; move it, or write "
                           "the audit into another folder")
    stop_asked: list[bool] = []
    frame_counts: dict[int, int] = {}  # each file's frame count by its number, from its header read once

    def files_done(count: int) -> None:
        bar.update(max(0, count - bar.n))

    def frames_done(row: AuditRow) -> None:
        """The bar's postfix: the frames done of the file in flight, when it has more than one (a long cine would
        leave the count of files still for minutes)."""
        done, count = _frames_done(row), frame_counts[row.input_number]
        shown = f"file {row.input_number}: {int(done)}/{count} frames" if 1 < count and done < count else ""
        if not bar.disable and shown != (bar.postfix or ""):
            bar.set_postfix_str(shown)

    def first_interrupt() -> None:
        stop_asked.append(True)
        bar.clear()  # the message on a line of its own, not after the bar
        on_interrupt()
        bar.refresh()

    # one audit at a time per folder: another's end would remove this one's overlays as not in its report
    with OutputLock(Path(out_dir)), \
            contextlib.closing(progress_bar(len(inputs), "file", shown=progress)) as bar, \
            one_interrupt(first_interrupt) as hold_interrupts:
        rows: list[AuditRow] = []
        in_flight: Optional[int] = None  # once Ctrl-C is pressed: the file of the row it came while making
        try:
            parts = audit_inputs(inputs, options)
            frame_counts.update((part.number, part.count) for part in parts)
            with contextlib.closing(audit_items(parts, model, out_dir=out_dir, settings=settings, options=options,
                                                preprocessing=preprocessing, class_names=class_names)) as audited:
                for row in audited:
                    if in_flight is not None and row.input_number != in_flight:
                        files_done(in_flight)
                        break  # the file in flight is done: this row's file is left, its overlay removed below
                    files_done(row.input_number - 1)  # the stream keeps input order: the files before are done
                    frames_done(row)
                    rows.append(row)
                    if stop_asked and in_flight is None:
                        in_flight = row.input_number
                    # its last row: the next batch is not waited for
                    if in_flight is not None and _frames_done(row) >= frame_counts[row.input_number]:
                        files_done(in_flight)
                        break
                else:
                    files_done(len(inputs))
        except KeyboardInterrupt:  # the second Ctrl-C: the file in flight is left too, where it stands
            stop_asked.append(True)
        finally:
            hold_interrupts()
        if stop_asked:
            rows += interrupted_rows(inputs, rows, options, frame_counts)
        # a file's frames not audited are of its study, which its audited frames' headers name
        studies = {row.input_number: row.study for row in rows if row.error is None}
        for row in rows:
            row.study = studies.get(row.input_number, row.study)
        report = AuditReport(rows=rows, options=options, settings=settings, files=len(inputs),
                             provenance=provenance or ModelProvenance.unstated(model))
        try:
            report.write(out_dir)
        finally:  # a report that cannot be written (a full disk) leaves no earlier audit's overlay beside its tables
            _remove_overlays_not_in(report, Path(out_dir))
    return report


def interrupted_rows(files: Sequence[FoundFile], rows: Sequence[AuditRow], options: AuditOptions,
                     frame_counts: Mapping[int, int]) -> list[AuditRow]:
    """The rows of what an interrupted audit, whose ``rows`` are those done, left: each file without a row as a whole
    (of frame ``--frame`` K where given), and the frames after the last done of a file left in its middle, counted
    against its ``frame_counts`` (by input number, read when the input list was made: the file may be gone since).
    Their keys are the salted ones of an error row: no path or name unless ``keep_ids``."""
    done: dict[int, float] = {}  # input number -> frames done
    for row in rows:
        done[row.input_number] = max(done.get(row.input_number, 0), _frames_done(row))
    in_flight = max(done, default=None)  # the stream keeps input order: only it can be left in its middle
    left = []
    for number, (file, name) in enumerate(zip(files, _distinct_names(files)), 1):
        if number not in done:
            row = _not_audited_row(AuditInput(file.path, number, name), "Not audited: interrupted (Ctrl-C).", options,
                                   None)
        elif number == in_flight and options.frame is None and done[number] < (count := frame_counts[number]):
            row = _not_audited_row(AuditInput(file.path, number, name, count=count), "Interrupted (Ctrl-C).", options,
                                   range(int(done[number]), count))
        else:
            continue
        row.interrupted = True
        left.append(row)
    return left


def _frames_done(row: AuditRow) -> float:
    """How many of its file's frames are done once ``row`` is (the stream keeps frame order; a row not audited counts
    its frames, infinitely many for the whole file)."""
    if row.error is not None and row.frames is None and row.frame is None:
        return float("inf")
    return (row.frames[-1] if row.frames is not None else (row.frame or 0)) + 1


def _remove_overlays_not_in(report: AuditReport, out_dir: Path) -> None:
    """Remove the overlays an earlier audit into ``out_dir`` left that this report does not show (another salt, other
    inputs): left, they could be an earlier run's with its burned-in text kept (``--keep-burned-in-text``) or of
    recognizable features, beside a report that says the folder is de-identified."""
    shown = {row.overlay_file for row in report.rows if row.overlay_file}
    for path in (out_dir / "images").glob("case-*.png"):
        if f"images/{path.name}" not in shown:
            path.unlink(missing_ok=True)
