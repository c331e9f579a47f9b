"""``vitroll compare IMAGE… --model A --model B``: where do two (or more) models look? Writes a grid figure
(images × models, with predictions) and a CSV of per-image agreement (Spearman, top-10 % IoU) for every pair,
measured in the original image's pixels, so models of different patch and input sizes compare directly.
Exit status: 0 all ok, 3 some images failed (one ``vitroll: failed:`` line each; the others are compared), 2 usage
error."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TypeVar

from vitroll.commands.arguments import (
    add_device_argument, add_max_pixels_argument, add_method_arguments, add_out_argument, add_render_arguments,
    add_trust_checkpoint_argument, given_path, integer, model_argument,
)
from vitroll.io.writing import make_output_folder, write_csv
from vitroll.wording import told_at_the_end

if TYPE_CHECKING:
    from vitroll.pipelines.compare import Explainer

T = TypeVar("T")


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("images", nargs="+", type=given_path, metavar="IMAGE", help="image files (PNG, JPEG, TIFF, …)")
    parser.add_argument("--model", action="append", required=True, metavar="MODEL",
                        help="a model to compare (repeat: two or more)")
    parser.add_argument("--checkpoint", action="append", type=given_path, metavar="FILE",
                        help="weights for the model in the same position (repeat per model; 'none' for none)")
    add_trust_checkpoint_argument(parser)
    parser.add_argument("--img-size", action="append", nargs="+", type=_size_or_none, metavar="SIZE",
                        help="build the model in the same position for this input size (H or H W; timm resamples "
                             "position embeddings; repeat per model, 'none' for its default size)")
    parser.add_argument("--model-arg", action="append", nargs="+", type=_model_argument_or_none,
                        metavar="KEY=VALUE",
                        help="other timm.create_model (or torchvision builder) arguments for the model in the same "
                             "position, to rebuild a model saved with them (VALUE read as an int, float, true/false, "
                             "none or else text): e.g. depth=6 reg_tokens=4; repeat per model, 'none' for none")
    parser.add_argument("--pretrained", action="store_true",
                        help="load the pretrained weights (timm's or torchvision's) for every model")
    add_device_argument(parser)
    add_max_pixels_argument(parser)
    add_out_argument(parser, "compare")
    add_method_arguments(parser, repeated="compare runs one method on every model; to compare methods on the same "
                                          "images, see `vitroll annotate --compare-with` or `vitroll evaluate "
                                          "--disagreement`")
    add_render_arguments(parser)
    parser.set_defaults(run=run)


def _size_or_none(text: str) -> int | str:
    """An argparse ``type`` for one word of compare's ``--img-size``: a side ≥ 1, or ``none``."""
    return text if text == "none" else integer(1)(text)


def _model_argument_or_none(text: str) -> tuple[str, object] | str:
    """An argparse ``type`` for one word of compare's ``--model-arg``: ``KEY=VALUE`` (:func:`model_argument`), or
    ``none``."""
    return text if text == "none" else model_argument(text)


def _one_per_model(values: Optional[list[T]], models: list[str], flag: str, none: str) -> list[Optional[T]]:
    """The values of a per-model ``flag`` in ``--model`` order (None for each model when the flag is not given);
    ``none`` says what its value ``none`` means.

    Raises ValueError when the flag is given, but not once per model.
    """
    if values and len(values) != len(models):
        raise ValueError(f"{len(values)} {flag} for {len(models)} --model; give one per model ('none' {none})")
    return list(values) if values else [None] * len(models)


def _build_options(size: Optional[list[int | str]],
                   arguments: Optional[list[tuple[str, object] | str]] = None) -> dict[str, object]:
    """``load_model`` keyword arguments for one model's ``--img-size`` words (``none``: its default size) and
    ``--model-arg`` words (``none``: none)."""
    from vitroll.commands.common import img_size_option, model_arguments

    build = {}
    if arguments is not None and arguments != ["none"]:
        if "none" in arguments:
            raise ValueError("--model-arg takes KEY=VALUE words or none, not both")
        build.update(model_arguments(arguments))
    if size is None or size == ["none"]:
        return build
    if "none" in size:
        raise ValueError(f"--img-size {' '.join(map(str, size))}: give H, H W or none")
    return {"img_size": img_size_option([int(side) for side in size]), **build}


def _label(name: str, checkpoint: Optional[str], img_size: Optional[int | tuple[int, int]]) -> str:
    """A model's name in the figure and the CSV: its ``--model`` name, its checkpoint's stem after ``:``, and the
    input size it was built for after ``@`` (``vit_small@384``, ``vit_small@224x320``)."""
    label = name if checkpoint is None else f"{name}:{Path(checkpoint).stem}"
    if img_size is None:
        return label
    height, width = (img_size, img_size) if isinstance(img_size, int) else img_size
    return f"{label}@{height}" if height == width else f"{label}@{height}x{width}"


def explainers_from_args(args: argparse.Namespace) -> list[Explainer]:
    from vitroll.commands.common import (
        COMPARED_KINDS, check_trusted_checkpoints, load_model_of_kind, note_if_random, resolve_device,
    )
    from vitroll.models import class_names
    from vitroll.pipelines.compare import Explainer
    from vitroll.preprocess import Preprocessing

    if len(args.model) < 2:
        raise ValueError("give at least two --model options to compare")
    given = _one_per_model(args.checkpoint, args.model, "--checkpoint", "to skip")
    checkpoints = [None if checkpoint == "none" else checkpoint for checkpoint in given]
    sizes = _one_per_model(args.img_size, args.model, "--img-size", "for its default size")
    arguments = _one_per_model(args.model_arg, args.model, "--model-arg", "for none")
    builds = [_build_options(size, given) for size, given in zip(sizes, arguments)]
    check_trusted_checkpoints(args, [c for c in checkpoints if c is not None])
    explainers, seen = [], {}
    for name, checkpoint, build in zip(args.model, checkpoints, builds):
        model = load_model_of_kind(name, COMPARED_KINDS, pretrained=args.pretrained, checkpoint=checkpoint,
                                   trust_checkpoint=args.trust_checkpoint, device=resolve_device(args.device), **build)
        label = _label(name, checkpoint, build.get("img_size"))
        seen[label] = seen.get(label, 0) + 1
        label = label if seen[label] == 1 else f"{label}#{seen[label]}"
        explainers.append(Explainer(label, model, Preprocessing.from_model(model), class_names(model)))
    for name, checkpoint in dict.fromkeys(zip(args.model, checkpoints)):  # after every load: a mistake is one line
        note_if_random(name, pretrained=args.pretrained, checkpoint=checkpoint)
    return explainers


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    # the model side imports torch: here, not at the top, so that --help and usage errors answer at once
    from vitroll.commands.common import (
        COMPARED_KINDS, none_can_be_read, print_failed, print_sight_warnings, refuse_folders, settings_from_args,
    )
    from vitroll.pipelines.compare import compare, pair_summaries, plot_comparison
    from vitroll.pipelines.folder import EXIT_SOME_FAILED

    refuse_folders(args.images, "compare", lambda folder: f"pass the folder's images, e.g. {folder}/*.png")
    settings = settings_from_args(args)
    if none_can_be_read(args.images, args.model, COMPARED_KINDS):
        return EXIT_SOME_FAILED
    make_output_folder(args.out)
    result = compare(args.images, explainers_from_args(args), settings, max_pixels=args.max_pixels)
    for error in result.errors:
        print_failed(error)
    print_sight_warnings(result.sights, whole_image=None)  # each model reads the images its own way: no flag for it
    if not result.images:
        return EXIT_SOME_FAILED
    write_csv(args.out / "agreement.csv", result.rows)
    plot_comparison(result, args.out / "grid.png")
    for line in pair_summaries(result.rows):
        print(line)
    print(f"wrote {args.out}/grid.png and agreement.csv")
    return EXIT_SOME_FAILED if result.errors else 0
