"""``vitroll overlay IMAGE…``: saliency overlays for a few images, with the top-5 predictions; for an image–text
model, one overlay per ``--text`` and their grid. Exit status: 0 all ok, 3 some images failed (one ``vitroll:
failed:`` line each, the others still written), 2 usage error."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vitroll.commands.arguments import (
    add_batch_size_argument, add_max_pixels_argument, add_method_arguments, add_model_arguments, add_out_argument,
    add_render_arguments, given_path, non_blank,
)
from vitroll.io.names import single_line
from vitroll.wording import told_at_the_end

if TYPE_CHECKING:
    from torch import nn

    from vitroll.pipelines.single import ImageExplanation


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("images", nargs="+", type=given_path, metavar="IMAGE", help="image files (PNG, JPEG, TIFF, …)")
    add_out_argument(parser, "out")
    parser.add_argument("--figure", action="store_true", help="also save image | heatmap | overlay figures")
    add_batch_size_argument(parser, 8)
    add_max_pixels_argument(parser)
    parser.add_argument("--text", action="append", default=[], type=non_blank, metavar="TEXT",
                        help="for an image–text model (CLIP, SigLIP, open_clip): explain its score for this text "
                             "(repeatable; the method defaults to chefer, whose maps follow the text); writes "
                             "IMAGE_METHOD_TEXT.png per text and IMAGE_METHOD_texts.png")
    add_model_arguments(parser)
    add_method_arguments(parser, default="rollout; chefer with --text")
    add_render_arguments(parser)
    parser.set_defaults(run=run, method=None)


def _with_texts(model: nn.Module, args: argparse.Namespace) -> nn.Module:
    """The model with ``--text`` bound when it is an image–text model; refuses texts without one and the reverse."""
    from vitroll.adapters.image_text import PromptedModel, text_inputs
    from vitroll.capture import family_of

    if family_of(model).image_text is None:
        if args.text:
            raise ValueError(f"--text needs an image–text model (CLIP, SigLIP, open_clip); {args.model} "
                             f"({type(model).__name__}) scores classes, not texts")
        return model
    if not args.text:
        raise ValueError(f"{args.model} is an image–text model: give the texts to explain with --text \"a photo of "
                         "a dog\" (repeatable)")
    return PromptedModel(model, text_inputs(model, args.text))


def _report(result: ImageExplanation, model: nn.Module) -> None:
    if result.text_overlays is not None:
        print(single_line(f"{result.path} -> {result.figure_path}"))
        texts = model.texts
        for each, cut in zip(result.text_overlays, texts.cut or [False] * len(texts)):
            print(single_line(f"  {_shown_text(each.text, cut, texts.input_ids.shape[1])}  S = {each.logit:.3f}  "
                              f"-> {each.path}"))
        return
    print(single_line(f"{result.path} -> {result.overlay_path}"))
    for rank, (_, name, probability) in enumerate(result.top or [], start=1):
        print(f"  {rank}. {name}  {probability:.3f}")


def _shown_text(text: str, cut: bool, context: int) -> str:
    """A text as its overlay's line shows it: quoted; where the text tower's ``context`` tokens cut it, its beginning
    alone and where the context ends (its files keep all of it)."""
    if not cut:
        return repr(text)
    from vitroll.adapters.image_text import quoted_start

    return f"{quoted_start(text)} (cut: the text tower reads its first {context} tokens)"


def _default_method(args: argparse.Namespace) -> str:
    """The method when ``--method`` is not given: chefer for texts (rollout's pure attention gives every text the
    same map), rollout otherwise."""
    return "chefer" if args.text else "rollout"


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    # the model side imports torch: here, not at the top, so that --help and usage errors answer at once
    from vitroll.commands.common import (
        IMAGE_KINDS, model_from_args, none_can_be_read, preprocessing_from_args, print_failed, print_sight_warnings,
        refuse_folders, settings_from_args,
    )
    from vitroll.io.images import print_warning
    from vitroll.models import class_names
    from vitroll.pipelines.folder import EXIT_SOME_FAILED
    from vitroll.pipelines.single import explain_files

    refuse_folders(args.images, "overlay", lambda folder: f"for a folder use `vitroll annotate {folder} --out OUT`")
    args.method = args.method or _default_method(args)
    if args.text and args.target_class is not None:
        raise ValueError("--target-class does not go with --text: each text is the target of its own map")
    if none_can_be_read(args.images, [args.model], IMAGE_KINDS):
        return EXIT_SOME_FAILED
    settings = settings_from_args(args)
    model = _with_texts(model_from_args(args), args)
    if args.text and args.figure:  # once the model is known to take texts: else --text itself is the error
        print_warning("--figure draws a classifier's map; with --text the grid IMAGE_METHOD_texts.png is the figure "
                      "(the image, then each text's overlay); ignored")
    names = class_names(model, args.class_names)
    failures = 0
    for result in explain_files(args.images, model, out_dir=args.out, settings=settings,
                                preprocessing=preprocessing_from_args(model, args), class_names=names,
                                batch_size=args.batch_size, save_figure=args.figure,
                                max_pixels=args.max_pixels):
        if result.error:
            failures += 1
            print_failed(result.error)
            continue
        _report(result, model)
        print_sight_warnings([(result.path, result.pixels_per_patch, result.seen_share)])
    return EXIT_SOME_FAILED if failures else 0
