"""``vitroll evaluate [FOLDER]``: score methods against ground-truth masks (folder of NAME.png + NAME_mask.png,
or the generated shapes testbed): pointing game, energy in mask, top-10 % IoU, deletion and insertion AUC.
``--testbed-kind pairs`` / ``text`` / ``captions`` score the image–text, text and captioning testbeds instead (their
own metrics)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vitroll.commands.arguments import (
    TESTBED_NAME, add_batch_size_argument, add_max_pixels_argument, add_method_options, add_model_arguments,
    add_out_argument, given_path, integer, known_method, method_names, number, option_flag,
)
from vitroll.io.limits import DEFAULT_MAX_PIXELS
from vitroll.io.names import single_line
from vitroll.io.writing import make_output_folder, write_csv
from vitroll.wording import counted, told_at_the_end

DEFAULT_METHODS = "rollout,grad_rollout,chefer,attention,random,center"
TESTBEDS = {
    "shapes": (TESTBED_NAME, DEFAULT_METHODS),
    "pairs": ("vitroll-clip-shapes", "chefer,grad_rollout,rollout,random"),
    "text": ("vitroll-text-keyword", "rollout,attention,flow,chefer,grad_rollout,random"),
    "captions": ("vitroll-caption-shapes", "chefer,rollout,random"),
}
"""Each testbed's shipped model (the default ``--model``) and default methods: the shapes images with their
classifier, the two-shape images with a prompt naming one (an image–text model), the key-word sentences (a text
classifier)."""
DISAGREE_BELOW = 0.0
"""``--disagreement`` flags an image whose two maps' rank correlation is below this, unless ``--disagree-below``."""
TESTBED_COUNT = 200
"""How many testbed inputs ``vitroll evaluate`` draws without a FOLDER or ``--testbed N``."""
TESTBED_SEED = 3
"""The testbed split drawn without ``--seed``: the shipped models' held-out split."""
SHAPES_ONLY = ("pretrained", "num_classes", "class_names", "img_size", "dynamic_img_size", "model_arg", "crop_pct",
               "crop_mode", "input_size", "mean", "std", "interpolation", "steps", "substrate", "disagree_below")
"""The options that only the shapes testbed and a FOLDER use, by argparse name: the other testbeds load their model
without build options, preprocess their own way and have their own metrics."""


def method_list(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    for name in methods or [text]:
        known_method(name)
    return methods


def add_image_source_arguments(parser: argparse.ArgumentParser, folder_help: str, *, testbed_count: int,
                               methods_default: str) -> None:
    """FOLDER or ``--testbed N`` (``testbed_count`` inputs when neither is given), ``--seed``, ``--max-pixels`` (of
    the FOLDER's images), ``--methods`` (their default as ``--help`` states it: ``methods_default``), ``--out`` and
    the method and model options."""
    parser.add_argument("folder", nargs="?", type=given_path, metavar="FOLDER", help=folder_help)
    parser.add_argument("--testbed", type=integer(1), metavar="N", default=None,
                        help=f"use N generated testbed inputs instead of a folder (default without FOLDER: "
                             f"{testbed_count})")
    parser.add_argument("--seed", type=integer(0), default=None, metavar="SEED",
                        help=f"testbed split (default: {TESTBED_SEED}, the shipped models' held-out split; not with a "
                             "FOLDER, whose images are not drawn)")
    add_max_pixels_argument(parser, "a FOLDER's images")
    parser.add_argument("--methods", type=method_list, default=method_list(DEFAULT_METHODS), metavar="METHOD,…",
                        help=f"comma-separated, from {', '.join(method_names())} (default: {methods_default})")
    add_out_argument(parser, "evaluation")
    add_method_options(parser.add_argument_group("method options"))
    add_model_arguments(parser)


def check_one_image_source(args: argparse.Namespace) -> None:
    """Refuse a FOLDER given together with --testbed N or --seed, which would ignore them, and --max-pixels without
    one (ValueError: one error line)."""
    if args.folder and args.testbed:
        raise ValueError("give a FOLDER or --testbed N, not both")
    if args.folder and args.seed is not None:
        raise ValueError(f"--seed {args.seed} picks the generated testbed's inputs; a FOLDER's images are not drawn, "
                         "so leave --seed out (or give --testbed N instead of the FOLDER)")
    check_max_pixels_has_a_folder(args)


def check_max_pixels_has_a_folder(args: argparse.Namespace) -> None:
    """Refuse ``--max-pixels`` without a FOLDER, whose images are the only ones it limits (ValueError)."""
    if not args.folder and args.max_pixels != DEFAULT_MAX_PIXELS:
        raise ValueError("--max-pixels limits the images of a FOLDER; the generated testbed's are small")


def testbed_seed(args: argparse.Namespace) -> int:
    """The testbed split to draw: ``--seed``, else :data:`TESTBED_SEED`."""
    return TESTBED_SEED if args.seed is None else args.seed


def images_from_args(args: argparse.Namespace, default_count: int):
    from vitroll.pipelines.evaluate import MASK_SUFFIX, folder_images, shapes_images

    check_one_image_source(args)
    if not args.folder:
        return shapes_images(args.testbed or default_count, testbed_seed(args))
    images = folder_images(args.folder, max_pixels=args.max_pixels)
    if images.without_mask:
        example = Path(images.without_mask[0])
        print(single_line(f"vitroll: warning: {len(images.without_mask)} of "
                          f"{counted(len(images) + len(images.without_mask), 'image')} in {args.folder} left out for "
                          f"want of a mask (NAME{MASK_SUFFIX}.* beside NAME.*: none such as "
                          f"{example.stem}{MASK_SUFFIX}.png beside {example.name})"), file=sys.stderr)
    return images


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    methods_default = "; ".join(f"{kind}: {methods}" for kind, (_, methods) in TESTBEDS.items())
    add_image_source_arguments(parser, "images with masks beside them: NAME.png + NAME_mask.png",
                               testbed_count=TESTBED_COUNT, methods_default=methods_default)
    add_batch_size_argument(parser, 16)
    parser.add_argument("--steps", type=integer(1), default=16, metavar="N",
                        help="deletion/insertion steps (default: %(default)s)")
    parser.add_argument("--substrate", choices=("blur", "mean"), default="mean",
                        help="what deleted pixels become and insertion starts from: the image's mean colour or a "
                             "Gaussian blur (RISE; uninformative when blurred objects stay recognisable) "
                             "(default: %(default)s)")
    parser.add_argument("--disagreement", type=method_list, metavar="A,B",
                        help="per image, rank correlation between two of the methods (e.g. "
                             "rollout,integrated_gradients)")
    parser.add_argument("--disagree-below", type=number(), metavar="CORRELATION",
                        help=f"flag images whose --disagreement correlation is below this (default {DISAGREE_BELOW:g})")
    parser.add_argument("--testbed-kind", choices=list(TESTBEDS), default="shapes",
                        help="which generated testbed --testbed N draws from (default: %(default)s): shapes, pairs "
                             "(two shapes and a prompt naming one; default model vitroll-clip-shapes: pointing game "
                             "on the named shape) or text (a planted key word among fillers and a group word; "
                             "default model vitroll-text-keyword: pointing game on the key word, share on the group "
                             "word), "
                             "or captions (the two-shape images captioned; default model vitroll-caption-shapes: "
                             "pointing game of each shape word's map on its shape)")
    parser.set_defaults(run=run, shapes_only_defaults={name: parser.get_default(name) for name in SHAPES_ONLY})


def write_disagreement(args: argparse.Namespace, result) -> None:
    import numpy as np

    first, second = args.disagreement
    threshold = DISAGREE_BELOW if args.disagree_below is None else args.disagree_below
    rows = result.disagreement_rows(first, second, threshold)
    write_csv(args.out / "disagreement.csv", rows)
    flagged = [r["image"] for r in rows if r["flagged"]]
    print(f"{first} vs {second}: median Spearman {np.median([r['spearman'] for r in rows]):.3f}; "
          f"{len(flagged)} of {counted(len(rows), 'image')} below {threshold:g} (disagreement.csv)"
          f"{': ' + ', '.join(flagged[:5]) if flagged else ''}{' …' if len(flagged) > 5 else ''}")


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    # the model side imports torch: here, not at the top, so that --help and usage errors answer at once
    from vitroll.commands.common import method_options_from_args, model_from_args, preprocessing_from_args
    from vitroll.pipelines.evaluate import INTERVAL, evaluate, markdown_table, plot_curves, plot_examples, summarize

    if args.testbed_kind != "shapes":
        return run_generated(args)
    if args.disagreement and (len(args.disagreement) != 2 or not set(args.disagreement) <= set(args.methods)):
        raise ValueError(f"--disagreement takes two of the evaluated methods ({','.join(args.methods)})")
    if not args.disagreement and args.disagree_below is not None:
        raise ValueError("--disagree-below flags images by their --disagreement correlation; give --disagreement A,B")
    method_options = method_options_from_args(args, args.methods)
    images = images_from_args(args, default_count=TESTBED_COUNT)
    make_output_folder(args.out)
    model = model_from_args(args)
    result = evaluate(model, images, args.methods, method_options=method_options,
                      preprocessing=preprocessing_from_args(model, args), batch_size=args.batch_size,
                      steps=args.steps, substrate=args.substrate)
    summary = summarize(result.rows)
    table = markdown_table(summary)
    write_csv(args.out / "per_image.csv", result.rows)
    write_csv(args.out / "summary.csv", summary)
    source = f"shapes testbed, seed {testbed_seed(args)}"
    if args.folder:
        source = f"{args.folder}; {counted(len(images.without_mask), 'image')} without a mask left out"
    caption = f"{counted(len(images), 'image')} ({source}), model {args.model}; {INTERVAL}"
    (args.out / "summary.md").write_text(f"{caption}\n\n{table}\n", encoding="utf-8")
    if args.disagreement:
        write_disagreement(args, result)
    plot_curves(result, args.out / "curves.png")
    plot_examples(result, images, args.out / "examples.png")
    print(f"{caption}\n{table}")
    print(f"wrote {args.out}/: per_image.csv summary.csv summary.md curves.png examples.png")
    return 0


def run_generated(args: argparse.Namespace) -> int:
    """``--testbed-kind pairs``, ``text`` or ``captions``: a generated testbed with its own metrics."""
    from vitroll.commands.common import check_trusted_checkpoints, method_options_from_args, resolve_device
    from vitroll.models import load_model
    from vitroll.pipelines.evaluate import INTERVAL, evaluate_testbed, markdown_table, summarize
    from vitroll.pipelines.evaluate_captions import check_caption_options

    if args.folder:
        raise ValueError(f"--testbed-kind {args.testbed_kind} draws its inputs itself; give --testbed N, not a FOLDER")
    if args.disagreement:
        raise ValueError("--disagreement compares maps of the shapes testbed or a folder")
    check_max_pixels_has_a_folder(args)
    ignored = [option_flag(name) for name, default in args.shapes_only_defaults.items()
               if getattr(args, name) != default]
    if ignored:
        raise ValueError(f"--testbed-kind {args.testbed_kind} does not use {', '.join(ignored)} (only the shapes "
                         "testbed and a FOLDER do)")
    default_model, default_methods = TESTBEDS[args.testbed_kind]
    model_name = default_model if args.model == TESTBED_NAME else args.model
    methods = method_list(default_methods) if args.methods == method_list(DEFAULT_METHODS) else args.methods
    method_options = method_options_from_args(args, methods)
    if args.testbed_kind == "captions":  # before the model is loaded and the folder made
        check_caption_options(method_options)
    check_trusted_checkpoints(args, [args.checkpoint] if args.checkpoint else [])
    make_output_folder(args.out)
    model = load_model(model_name, checkpoint=args.checkpoint, trust_checkpoint=args.trust_checkpoint,
                       device=resolve_device(args.device))
    scores = evaluate_testbed(model, args.testbed_kind, args.testbed or TESTBED_COUNT, testbed_seed(args), methods,
                              method_options=method_options, batch_size=args.batch_size)
    summary = summarize(scores.rows, scores.metrics)
    table = markdown_table(summary, scores.metrics)
    write_csv(args.out / "per_input.csv", scores.rows)
    write_csv(args.out / "summary.csv", summary)
    caption = f"{scores.source}, model {model_name}; {INTERVAL}"
    (args.out / "summary.md").write_text(f"{caption}\n\n{table}\n", encoding="utf-8")
    print(f"{caption}\n{table}")
    print(f"wrote {args.out}/: per_input.csv summary.csv summary.md")
    return 0
