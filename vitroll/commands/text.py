"""``vitroll text "a sentence" … [--file texts.txt] --model FOLDER_OR_ID``: token and word scores of a Hugging Face
text model (encoders: BERT, RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, ModernBERT, DeBERTa-v2, ALBERT classifiers,
bare models or masked language models, explained at each text's first [MASK]/<mask>; decoders: GPT-2, Llama, Qwen2/3,
Mistral, Gemma 1–3, Phi, GPT-NeoX, OPT language models, explained at the last token, or classifiers), shaded in the
terminal and written to OUT/text.html, OUT/scores.json and OUT/scores.csv (each token as the tokenizer stores it,
"token": "ĠcafÃ©" or "##ing", and as text, "decoded": " café" or "ing"; each word; their character spans and scores).
The model is a save_pretrained folder with its tokenizer files, or a hub id in the local cache.

Each text's row goes to OUT/manifest.jsonl as its batch finishes; a rerun with the same --out skips the texts
already done with the same settings (keyed by their number and SHA-256), so a big --file survives Ctrl-C; resuming
with other settings (the model's weights or tokenizer files by content, its labels, the method, its options, the
readout) is refused, naming them, unless --overwrite. An empty
line (but for blank lines that end the file), or a text the model cannot take, is an error row and the others go
on. Up to 20 texts are printed shaded; more get a progress bar.
Exit status: 0 all ok, 3 some texts failed (listed in scores.json), 2 usage error, 130 interrupted."""

from __future__ import annotations

import argparse
import contextlib
import sys

from typing import TYPE_CHECKING

from vitroll.commands.arguments import (
    add_batch_size_argument, add_device_argument, add_method_arguments, add_out_argument, add_progress_argument,
    add_resume_arguments, given_path, integer, utf8_text,
)
from vitroll.errors import VitrollError
from vitroll.io.names import single_line
from vitroll.wording import told_at_the_end

if TYPE_CHECKING:
    from rich.console import Console
    from tqdm import tqdm

    from vitroll.pipelines.text_run import TextReport, TextRunSummary

PRINTED_TEXTS = 20
"""Up to this many texts are printed shaded in the terminal; more get a progress bar instead."""


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__
    parser.add_argument("texts", nargs="*", type=utf8_text, metavar="TEXT", help="texts to explain (quote each)")
    parser.add_argument("--file", type=given_path, metavar="FILE",
                        help="a UTF-8 file with one text per line (after any TEXT given); - reads them from "
                             "standard input")
    add_progress_argument(parser)
    parser.add_argument("--model", required=True, metavar="MODEL",
                        help="a save_pretrained folder (config.json, weights, tokenizer files) or a cached hub id")
    add_out_argument(parser, "out")
    add_batch_size_argument(parser, 16, items="texts")
    add_resume_arguments(parser, done="texts", redo="redo the texts instead of skipping done ones")
    parser.add_argument("--readout", choices=("class_token", "token_mean", "position"),
                        help="the explained row: class token (encoders' default), mean of the real tokens "
                             "(mean-pooled embeddings), or one position (language models' default: the last token)")
    parser.add_argument("--position", type=integer(), metavar="INDEX",
                        help="which real token to explain (0 the first, -1 the last); alone, it implies "
                             "--readout position")
    add_device_argument(parser)
    add_method_arguments(parser, texts=True)
    parser.set_defaults(run=run)


@told_at_the_end()
def run(args: argparse.Namespace) -> int:
    if not args.texts and not args.file:  # before the imports below: a usage error answers at once
        raise VitrollError("no text to explain: give TEXT arguments, or --file FILE with one text per line "
                           "(--file - reads them from standard input)")
    # the model side imports torch: here, not at the top, so that --help and usage errors answer at once
    from rich.console import Console

    from vitroll.adapters.tokenizers import registered_tokenizer
    from vitroll.commands.common import load_model_of_kind, method_options_from_args, resolve_device
    from vitroll.io.text import read_texts
    from vitroll.models import ModelProvenance, class_names
    from vitroll.models.transformers import tokenizer_fingerprint
    from vitroll.pipelines.progress import progress_bar
    from vitroll.pipelines.text_run import run_texts

    texts = list(args.texts) + (read_texts(args.file) if args.file else [])
    options = method_options_from_args(args, [args.method])
    model = load_model_of_kind(args.model, ("a text model",), device=resolve_device(args.device))
    tokenizer = registered_tokenizer(model)
    weights = ModelProvenance.of(args.model, pretrained=False, checkpoint=None).fingerprint
    identity = {"model": args.model, "weights": weights, "tokenizer": tokenizer_fingerprint(args.model),
                "class_names": class_names(model), "method": args.method, "options": options, "readout": args.readout,
                "position": args.position}
    console = Console(highlight=False, soft_wrap=True)
    progress = progress_bar(len(texts), "text", shown=not args.no_progress and len(texts) > PRINTED_TEXTS)
    with contextlib.closing(progress):  # a run that raises leaves no bar above its error line
        summary, report = run_texts(
            model, texts, tokenizer, args.out, identity=identity, method=args.method, options=options,
            batch_size=args.batch_size, resume=args.resume, readout=args.readout, position=args.position,
            announce=lambda before: _announce(console, progress, before), on_batch=progress.update)
    if len(texts) <= PRINTED_TEXTS:
        _print_texts(console, report)
    for failure in report.failures[:10]:
        print(f"vitroll: failed: #{failure['index'] + 1}: {failure['error']}", file=sys.stderr)
    if len(report.failures) > 10:
        print(f"vitroll: … and {len(report.failures) - 10} more (see {args.out}/scores.json)", file=sys.stderr)
    state = "interrupted — rerun the same command to resume; " if summary.interrupted else ""
    texts = "text" if summary.ok == 1 else "texts"
    console.print(f"{state}{summary.ok} {texts} ok, {summary.failed} failed -> {args.out / 'text.html'} "
                  f"(scores: {args.out / 'scores.json'} and .csv)", markup=False)
    return summary.exit_code


def _announce(console: Console, progress: tqdm, before: TextRunSummary) -> None:
    """Say how many texts a resumed run skips, and leave them out of the bar, as annotate does: counted as done at
    once, they would make the rate and the time left of the texts still to do far too short."""
    if before.done_before:
        console.print(before.skip_line(), markup=False)
        progress.total -= before.done_before
        progress.refresh()


def _print_texts(console: Console, report: TextReport) -> None:
    from vitroll.text_view import terminal_text

    for index, result in zip(report.indices, report.results):
        heading = f"#{index + 1}"
        if result.prediction is not None:
            heading += f"  {result.prediction_kind}: {result.shown_prediction} ({result.probability:.3f})"
        if result.target is not None:
            heading += f"  explained: {result.shown_target}"
        console.print(single_line(heading), markup=False)  # class names come from the model's config
        console.print(terminal_text(result.segments))
        words = ", ".join(f"{word.word} {word.score:.3g}" for word in result.top_words)
        console.print(single_line(f"  words: {words}"), markup=False)
