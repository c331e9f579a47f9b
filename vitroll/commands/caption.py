"""``vitroll caption IMAGE… --model FOLDER_OR_ID``: caption each image with a captioner (transformers
VisionEncoderDecoderModel: ViT/DeiT encoder, GPT-2/BERT decoder) and map every word of its caption on the image.

Writes OUT/<stem>_caption_<method>.png (the image, then one overlay per word under its word) and OUT/captions.json
(captions, words, their tokens, logits and map peaks; one entry per image, by its absolute path, and method, so
runs of other methods or images into the same --out are kept, from whatever folder they run). Methods: chefer
(Chefer et al. 2021b's encoder–decoder relevance for each token's logit, the default), rollout (pure attention
through encoder, decoder and cross-attention) or occlusion (each --window × --window block of patches hidden in
turn). Exit status: 0 all ok, 3 some images failed, 2 usage error."""

from __future__ import annotations

import argparse

from vitroll.commands.arguments import (
    CAPTION_METHODS, add_batch_size_argument, add_colour_arguments, add_device_argument, add_max_pixels_argument,
    add_out_argument, given_path, integer,
)
from vitroll.io.names import single_line
from vitroll.wording import told_at_the_end


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("images", nargs="+", type=given_path, metavar="IMAGE", help="image files (PNG, JPEG, TIFF, …)")
    parser.add_argument("--model", required=True, metavar="MODEL",
                        help="a captioner: a save_pretrained folder (config.json, weights, tokenizer and image "
                             "processor files), a cached hub id, or vitroll-caption-shapes")
    parser.add_argument("--method", choices=CAPTION_METHODS, default="chefer", metavar="METHOD",
                        help=f"{', '.join(CAPTION_METHODS)} (default: %(default)s)")
    parser.add_argument("--window", type=integer(1), default=None, metavar="N",
                        help="occlusion: the side, in patches, of the blocks it hides (default 1)")
    parser.add_argument("--max-new-tokens", type=integer(1), default=20, metavar="N",
                        help="longest caption, in tokens (default 20; never more than the decoder has positions)")
    add_out_argument(parser, "out")
    add_batch_size_argument(parser, 8)
    add_max_pixels_argument(parser)
    add_colour_arguments(parser)
    add_device_argument(parser)
    parser.set_defaults(run=run)


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    # the model side imports torch: here, not at the top, so that --help and usage errors answer at once
    from vitroll.adapters.tokenizers import registered_tokenizer
    from vitroll.commands.common import (
        load_model_of_kind, none_can_be_read, print_failed, refuse_folders, resolve_device,
    )
    from vitroll.pipelines.caption import caption_files
    from vitroll.pipelines.folder import EXIT_SOME_FAILED

    refuse_folders(args.images, "caption", lambda folder: f"pass the folder's images, e.g. {folder}/*.png")
    if none_can_be_read(args.images, [args.model], ("a captioner",)):
        return EXIT_SOME_FAILED
    model = load_model_of_kind(args.model, ("a captioner",), device=resolve_device(args.device))
    tokenizer = registered_tokenizer(model)
    failed = 0
    for result in caption_files(args.images, model, tokenizer, out_dir=args.out, method=args.method,
                                max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, cmap=args.cmap,
                                alpha=args.alpha, window=args.window, max_pixels=args.max_pixels):
        if result.error is not None:
            failed += 1
            print_failed(result.error)
            continue
        print(single_line(f"{result.path}: {result.quoted} -> {result.strip_path}"))
    print(f"captions: {args.out / 'captions.json'}")
    return EXIT_SOME_FAILED if failed else 0
