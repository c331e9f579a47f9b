"""``vitroll annotate INPUT --out DIR``: explain a whole folder (or a list of image paths) in batches.

Outputs are named by the input's path (OUT/overlays/a/b.jpg.png, OUT/heatmaps/a/b.jpg.npy as float16 grid maps,
OUT/figures/a/b.jpg.png; list entries outside the list's folder under @up/ and @root/); OUT/manifest.jsonl and
manifest.csv hold one row per input path. Runs resume by default; a changed input is redone; --limit and
--overwrite touch only the first N inputs and keep the other rows.
Exit status: 0 all ok, 3 some inputs failed (listed in the manifest), 2 usage error, 130 interrupted.
With --processes K (or under ``torchrun --nproc_per_node=K``, which exits 1 whatever went wrong) the inputs are
sharded by rank."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Any, Optional

from vitroll.commands.arguments import (
    PRECISIONS, add_batch_size_argument, add_explain_arguments, add_max_pixels_argument, add_out_argument,
    add_progress_argument, add_resume_arguments, given_path, integer, method_names, number,
)
from vitroll.errors import EXIT_USER_ERROR
from vitroll.io.names import error_line, single_line
from vitroll.pipelines.manifest import OUTPUT_COLUMNS as SAVE_KINDS
from vitroll.pipelines.ranks import (
    check_torchrun_ranks, launched_rank, leave_to_rank_zero, rank_gpus, refuse_one_gpu_for_all, run_ranks,
    torchrun_group, under_torchrun,
)
from vitroll.wording import told_at_the_end

if TYPE_CHECKING:
    import torch

    from vitroll.pipelines.explain import ExplainSettings
    from vitroll.pipelines.folder import AnnotateOptions
    from vitroll.preprocess import Preprocessing

DISAGREE_BELOW = 0.0
"""The default of ``--disagree-below``: ``AnnotateOptions.disagree_below``."""


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("input", type=given_path, metavar="INPUT",
                        help="a folder of images, or a .txt/.csv file listing image paths")
    add_out_argument(parser, None)
    add_batch_size_argument(parser, 16)
    parser.add_argument("--workers", type=integer(0), default=min(4, os.cpu_count() or 1), metavar="N",
                        help="decoding processes (default: %(default)s here, the CPU cores up to 4)")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="autocast for the model (fp16: CUDA only); maps are float32 (default: %(default)s)")
    parser.add_argument("--save", type=save_kinds, default="overlay,heatmap", metavar="KIND,…",
                        help=f"comma-separated from {','.join(SAVE_KINDS)}, or none for the manifest (and a gallery "
                             "without images) alone (default: %(default)s)")
    parser.add_argument("--recursive", action="store_true", help="include sub-folders")
    add_resume_arguments(parser, done="inputs", redo="redo the inputs (the first N with --limit) instead of skipping "
                                                      "done ones; other rows are kept")
    parser.add_argument("--limit", type=integer(1), metavar="N", help="only the first N inputs (sorted by path)")
    add_max_pixels_argument(parser)
    add_progress_argument(parser)
    parser.add_argument("--processes", type=integer(1), default=1, metavar="K",
                        help="run as K ranks on this machine, one GPU each on CUDA, as torchrun --standalone "
                             "--nproc_per_node K would, with the exit statuses above (default: %(default)s)")
    parser.add_argument("--compare-with", choices=method_names(), metavar="METHOD",
                        help="also run METHOD and record each image's rank correlation with the main map (agreement)")
    parser.add_argument("--disagree-below", type=number(), metavar="CORRELATION",
                        help="mark rows whose --compare-with agreement is below this as disagrees=true "
                             f"(default {DISAGREE_BELOW:g})")
    add_explain_arguments(parser)
    parser.set_defaults(run=run)


def save_kinds(text: str) -> tuple[str, ...]:
    """An argparse ``type`` for ``--save``: its comma-separated kinds, or none of them for ``none``; a kind given twice
    is the kind once (``none,none`` is ``none``). An empty list (``--save ,``, a script's empty variable) is refused:
    it wrote the manifest alone, without a word; so is an unknown kind, with the same words (they left ``none`` out),
    and ``none`` among kinds."""
    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in (*SAVE_KINDS, "none")]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"takes one or more of {', '.join(SAVE_KINDS)}, comma-separated, or none "
                                         f"for the manifest alone; got {unknown[0] if unknown else text!r}")
    if set(kinds) == {"none"}:
        return ()
    if "none" in kinds:  # told it takes "none", a user who gave it among kinds read "got 'none'" as a contradiction
        raise argparse.ArgumentTypeError(f"none (the manifest alone) is not combined with other kinds; got {text!r}")
    return kinds


def _settings_identity(args: argparse.Namespace, model: torch.nn.Module, preprocessing: Preprocessing,
                       settings: ExplainSettings, options: AnnotateOptions,
                       names: Optional[list[str]]) -> dict[str, Any]:
    """Everything that changes a run's outputs, by the name a user knows it by: a resume with other values is
    refused. The weights by content (a checkpoint's SHA-256, not its path), the class names as read. The
    preprocessing's channels and patch padding follow the model, already named: left out, the folders of earlier
    versions, which did not record them, resume."""
    from vitroll.commands.common import provenance_from_args

    preprocessing_fields = {name: value for name, value in dataclasses.asdict(preprocessing).items()
                            if name not in ("channels", "patch_padding")}
    return {"model": args.model, "weights": provenance_from_args(args, model).fingerprint,
            "num_classes": args.num_classes, "img_size": args.img_size, "dynamic_img_size": args.dynamic_img_size,
            **({"model_args": dict(args.model_arg)} if args.model_arg else {}),  # absent: earlier folders resume
            "class_names": names, "method": settings.method,
            "options": settings.method_options, "preprocessing": preprocessing_fields,
            "cmap": settings.cmap, "alpha": settings.alpha, "upsample": settings.interpolation,
            "normalize": settings.normalization, "key_patches": settings.key_patches, "save": options.save,
            "precision": options.precision, "compare_with": options.compare_with,
            "disagree_below": options.disagree_below}


def _options_from_args(args: argparse.Namespace) -> AnnotateOptions:
    from vitroll.pipelines.folder import AnnotateOptions

    if args.disagree_below is not None and not args.compare_with:
        raise ValueError("--disagree-below marks rows by their agreement with --compare-with METHOD; "
                         "give --compare-with")
    return AnnotateOptions(
        batch_size=args.batch_size, workers=args.workers,
        save=args.save,
        resume=args.resume, recursive=args.recursive, limit=args.limit, precision=args.precision,
        progress=not args.no_progress, compare_with=args.compare_with,
        disagree_below=DISAGREE_BELOW if args.disagree_below is None else args.disagree_below,
        max_pixels=args.max_pixels,
    )


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    try:
        options = _options_from_args(args)
        if under_torchrun():
            check_torchrun_ranks(args.device)
    except ValueError as error:
        if launched_rank() != 0:  # every rank reads the same command line: rank 0 tells it, not each rank
            return leave_to_rank_zero(error_line(str(error)), EXIT_USER_ERROR)
        raise
    if args.processes > 1 and not under_torchrun():
        refuse_one_gpu_for_all(args.device, args.processes)
        return run_ranks(args.argv, args.processes, rank_gpus(args.device))
    with torchrun_group(args.device) as args.device:
        return _run_in_group(args, options)


def _run_in_group(args: argparse.Namespace, options: AnnotateOptions) -> int:
    from vitroll.commands.common import (
        model_from_args, preprocessing_from_args, print_failed, print_sight_warnings, settings_from_args,
    )
    from vitroll.models import class_names
    from vitroll.pipelines.folder import ReportedByRankZero, annotate, find_inputs, together, world
    from vitroll.pipelines.inputs import heif_photos

    rank, world_size = world()
    try:
        with together(rank, world_size):  # a bad --model under torchrun: one line, not one per rank
            settings = settings_from_args(args)  # a bad --option is told before a folder that holds no image
            inputs = find_inputs(args.input, args.out, options)  # before a model load that may take minutes
            left_out = heif_photos(args.input, recursive=args.recursive, exclude=args.out) if rank == 0 else ""
            if left_out:  # told by rank 0 alone, so the other ranks do not walk the folder again for it
                print(single_line(f"vitroll: warning: {args.input}: left out {left_out}"), file=sys.stderr)
            model = model_from_args(args)
            preprocessing = preprocessing_from_args(model, args)
            names = class_names(model, args.class_names)
            identity = _settings_identity(args, model, preprocessing, settings, options, names)
        result = annotate(args.input, args.out, model, settings, identity=identity, preprocessing=preprocessing,
                          class_names=names, options=options, inputs=inputs)
    except ReportedByRankZero:
        return EXIT_USER_ERROR
    if rank == 0:
        for failure in result.failures[:10]:
            print_failed(failure)
        if len(result.failures) > 10:
            print(f"vitroll: … and {len(result.failures) - 10} more (see {args.out}/manifest.csv)", file=sys.stderr)
        print_sight_warnings(result.sights)
        print(result.line())
    return result.exit_code
