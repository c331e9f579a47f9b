"""``vitroll audit INPUT…``: a PHI-free saliency audit of DICOM (and PNG/TIFF) images as HTML, CSV and JSON.

Measures, per image, how much of the saliency lies outside the body, in the border band, on burned-in
annotations and (with --masks/--boxes) inside a region of interest; flags images whose saliency lies mostly
outside the body and summarises by scanner, body part, sex and age band. Every file under the inputs is a row:
an image, or the reason it gave none (listed by its number in the sorted input list).

Ctrl-C finishes the file in flight, then writes the report of what was audited: every file not reached is a row
"not audited: interrupted". A second Ctrl-C leaves the file in flight too.

Exit status: 0 every file gave an image, 3 some files gave none (the report is still written), 2 usage error,
130 interrupted.

Burned-in text (names, IDs, dates written into the pixels) is found with a text detector and filled black in
every image the report shows; the model sees the original pixels. Every image's pixels are searched, whatever
its header's BurnedInAnnotation says (headers can be wrong); --trust-burned-in-header skips those whose header
says NO (not ultrasound, secondary captures or PNG/TIFF inputs).
"""

from __future__ import annotations

import argparse
import sys

from vitroll.commands.arguments import (
    add_batch_size_argument, add_explain_arguments, add_max_pixels_argument, add_out_argument, add_progress_argument,
    given_path, integer, number,
)
from vitroll.io.windows import WINDOW_PRESETS, parse_window
from vitroll.wording import counted, told_at_the_end


def register(parser: argparse.ArgumentParser) -> None:
    presets = ", ".join(f"{name} (W {w:g}, L {l:g})" for name, (w, l) in WINDOW_PRESETS.items())
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("inputs", nargs="+", type=given_path, metavar="INPUT",
                        help="DICOM or image files, or folders (searched recursively)")
    add_out_argument(parser, "audit", what="report folder")
    group = parser.add_argument_group("DICOM")
    group.add_argument("--window", metavar="PRESET|W,L",
                       help=f"grey window for every DICOM: {presets}, or W,L = width,level (default: the file's VOI "
                            "LUT or Window Center/Width, else min–max)")
    group.add_argument("--frame", type=integer(0), metavar="INDEX",
                       help="only this frame of every file, from 0; a file with fewer frames (a single-frame file "
                            "for any INDEX but 0) is a row saying so (default: every frame)")
    group = parser.add_argument_group("privacy")
    group.add_argument("--salt", metavar="TEXT",
                       help="salt of the hashed case/study keys; give the same salt to compare runs (default: random "
                            "for this run, printed and stored nowhere)")
    group.add_argument("--keep-ids", action="store_true",
                       help="also write file paths, PatientID, StudyInstanceUID and SOPInstanceUID (NOT de-identified)")
    # with the pixels not searched at all, trusting the header for some of them means nothing
    burned_in_text = group.add_mutually_exclusive_group()
    burned_in_text.add_argument("--keep-burned-in-text", action="store_true",
                                help="do not search the pixels for burned-in text, only for images already cleaned: "
                                     "names, IDs and dates written into the pixels then appear in the report's images")
    burned_in_text.add_argument("--trust-burned-in-header", action="store_true",
                                help="do not search the pixels of images whose header says BurnedInAnnotation NO "
                                     "(faster). RISK: the attribute is often wrong or copied by converters, and text "
                                     "in those images then appears in the report's images. Ultrasound, secondary "
                                     "captures and PNG/TIFF inputs are searched all the same (default: search every "
                                     "image)")
    group.add_argument("--allow-recognizable-features", action="store_true",
                       help="also explain and draw files whose header says RecognizableVisualFeatures YES (face "
                            "photographs, 3D surface renderings); without it they are rows withheld with that reason. "
                            "Their pixels identify the patient: the report's images are then NOT de-identified")
    group = parser.add_argument_group("audit")
    group.add_argument("--flag-threshold", type=number(0, 1), default=0.5, metavar="FRACTION",
                       help="flag images with more than this fraction of saliency outside the body (default 0.5)")
    group.add_argument("--border", type=number(0, 0.5, high_open=True), default=0.05, metavar="FRACTION",
                       help="border band width as a fraction of each side, in [0, 0.5) (default: %(default)s)")
    group.add_argument("--top-percent", type=number(0, 100, low_open=True), default=5.0, metavar="PERCENT",
                       help="top-k %% of the map compared with the ROI (IoU), in (0, 100] (default: %(default)g)")
    group.add_argument("--masks", type=given_path, metavar="FOLDER",
                       help="folder of ROI masks: <image stem>.png, non-zero inside")
    group.add_argument("--boxes", type=given_path, metavar="FILE",
                       help="CSV of ROI boxes: file,x0,y0,x1,y1 (original pixels, x1/y1 exclusive)")
    group.add_argument("--body-masks", type=given_path, metavar="FOLDER",
                       help="folder of body masks <image stem>.png replacing the automatic one (also for ultrasound "
                            "and colour photographs, where it is not measured)")
    group.add_argument("--group-by", default="ManufacturerModelName", metavar="FIELD,…",
                       help="comma-separated: Manufacturer, ManufacturerModelName, BodyPartExamined, Modality, "
                            "PatientSex, age-band, BurnedInAnnotation (default: ManufacturerModelName; '' for no "
                            "groups)")
    add_batch_size_argument(group, 8, items="frames")
    group.add_argument("--workers", type=integer(0), default=0, metavar="N",
                       help="decoding processes (default 0: the main process)")
    add_progress_argument(group)
    add_max_pixels_argument(group, "PNG, JPEG, TIFF… inputs, masks and compressed DICOM frames (Rows × Columns)")
    add_explain_arguments(parser)
    parser.set_defaults(run=run)


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    # the model side imports torch, and the audit's measures OpenCV and numpy: here, not at the top, so that --help
    # and usage errors answer at once
    from vitroll.audit.metrics import MaskSource, MetricSettings
    from vitroll.audit.pipeline import run_audit
    from vitroll.audit.records import AuditOptions, parse_group_by
    from vitroll.audit.summary import not_reached
    from vitroll.commands.common import (
        model_from_args, preprocessing_from_args, provenance_from_args, settings_from_args,
    )
    from vitroll.io.discovery import check_given_paths_exist
    from vitroll.io.redact import require_text_detector
    from vitroll.models import class_names
    from vitroll.pipelines.folder import EXIT_SOME_FAILED

    check_given_paths_exist(args.inputs)
    options = AuditOptions(
        window=parse_window(args.window), frame=args.frame, salt=args.salt, keep_ids=args.keep_ids,
        flag_threshold=args.flag_threshold,
        metrics=MetricSettings(border_fraction=args.border, top_percent=args.top_percent),
        masks=MaskSource(args.masks, args.boxes), body_masks=MaskSource(args.body_masks),
        group_by=parse_group_by(args.group_by), batch_size=args.batch_size, workers=args.workers,
        max_pixels=args.max_pixels,
        keep_burned_in_text=args.keep_burned_in_text, trust_burned_in_header=args.trust_burned_in_header,
        allow_recognizable_features=args.allow_recognizable_features,
    )
    if args.keep_burned_in_text:
        print("vitroll: WARNING: --keep-burned-in-text: the pixels are NOT searched for burned-in text; names, IDs and "
              "dates written into the images will appear in the report's images", file=sys.stderr)
    else:
        require_text_detector()  # before the model loads: the audit cannot write images without it
        if args.trust_burned_in_header:
            print("vitroll: warning: --trust-burned-in-header: images whose header says BurnedInAnnotation NO are not "
                  "searched for burned-in text; if the header is wrong, their names, IDs and dates appear in the "
                  "report's images", file=sys.stderr)
    if args.allow_recognizable_features:
        print("vitroll: warning: --allow-recognizable-features draws images whose header says "
              "RecognizableVisualFeatures YES (faces, surface renderings): the report's images can identify patients",
              file=sys.stderr)
    if args.keep_ids:
        print("vitroll: warning: --keep-ids writes file paths and DICOM identifiers (PatientID, StudyInstanceUID, "
              "SOPInstanceUID) into the report; it is NOT de-identified", file=sys.stderr)
    settings = settings_from_args(args)
    model = model_from_args(args)
    report = run_audit(args.inputs, model, out_dir=args.out, settings=settings, options=options,
                       preprocessing=preprocessing_from_args(model, args),
                       class_names=class_names(model, args.class_names),
                       provenance=provenance_from_args(args, model), on_interrupt=_tell_interrupted,
                       progress=not args.no_progress)
    for row in report.errors:
        if not row.interrupted:
            print(f"vitroll: not audited: file {row.input_number} ({row.case}): {row.error}", file=sys.stderr)
    if report.interrupted:
        print(f"vitroll: interrupted: not audited: {not_reached(report.interrupted)} (the report lists them as "
              "\"interrupted\"); rerun the audit to cover them", file=sys.stderr)
    for sentence in report.sentences():
        print(sentence.text)
    print(f"{counted(len(report.images), 'image')} from {counted(report.files, 'file')}, "
          f"{report.coverage.not_audited()} not audited -> {args.out}/report.html (.csv, .json)")
    return 130 if report.interrupted else (EXIT_SOME_FAILED if report.errors else 0)


def _tell_interrupted() -> None:
    print("vitroll: interrupted: finishing the file in flight, then writing the report of what was audited "
          "(Ctrl-C again to stop at once)", file=sys.stderr)
