"""``vitroll sanity [FOLDER]``: model-parameter randomisation check (Adebayo et al. 2018). Re-initialises the
head and then the blocks from the top down, and reports how much each method's maps still correlate with the
trained model's (Spearman); methods whose maps do not change are flagged."""

from __future__ import annotations

import argparse

from vitroll.commands.arguments import add_batch_size_argument
from vitroll.commands.evaluate import (
    DEFAULT_METHODS, add_image_source_arguments, check_one_image_source, testbed_seed,
)
from vitroll.io.writing import make_output_folder, write_csv
from vitroll.wording import counted, told_at_the_end

TESTBED_COUNT = 32
"""How many shapes images ``vitroll sanity`` draws without a FOLDER or ``--testbed N``."""


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    add_image_source_arguments(parser, "a folder of images (files named NAME_mask.* are taken for masks and left out)",
                               testbed_count=TESTBED_COUNT, methods_default=DEFAULT_METHODS)
    add_batch_size_argument(parser, 16)
    parser.set_defaults(run=run)


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    # the model side imports torch: here, not at the top, so that --help and usage errors answer at once
    from PIL import Image

    from vitroll.commands.common import method_options_from_args, model_from_args, preprocessing_from_args
    from vitroll.pipelines.evaluate import folder_images_without_masks, shapes_images
    from vitroll.pipelines.sanity import FLAG_CORRELATION, sanity_check

    method_options = method_options_from_args(args, args.methods)
    check_one_image_source(args)
    named = (folder_images_without_masks(args.folder, max_pixels=args.max_pixels) if args.folder else
             [(item.name, item.image) for item in shapes_images(args.testbed or TESTBED_COUNT, testbed_seed(args))])
    names, images = [name for name, _ in named], [image for _, image in named]
    make_output_folder(args.out)
    model = model_from_args(args)
    preprocessing = preprocessing_from_args(model, args)
    tensor, _ = preprocessing.batch([Image.fromarray(image) for image in images])
    result = sanity_check(model, tensor, args.methods, method_options=method_options, batch_size=args.batch_size,
                          names=names)
    table = result.table()
    header = "| method | " + " | ".join(result.stages) + " | flagged |"
    lines = [header, "|---" * (len(result.stages) + 2) + "|"]
    for row in table:
        lines.append(f"| {row['method']} | " + " | ".join(f"{row[s]:.2f}" for s in result.stages)
                     + f" | {'yes' if row['flagged'] else ''} |")
    text = "\n".join(lines)
    write_csv(args.out / "sanity.csv", table)
    (args.out / "sanity.md").write_text(
        f"Spearman correlation with the trained model's maps, {counted(len(images), 'image')}, cascading randomisation "
        f"(head, then blocks top down); flagged: ≥ {FLAG_CORRELATION} after every block is random.\n\n{text}\n",
        encoding="utf-8")
    print(text)
    flagged = result.flagged()
    print(f"flagged (maps survive randomisation): {', '.join(flagged) if flagged else 'none'}")
    print(f"wrote {args.out}/sanity.csv and sanity.md")
    return 0
