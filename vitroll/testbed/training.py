"""What the testbed models' training scripts share: their command-line knobs, the image batches' conversion and
augmentation, the schedule, one optimiser step and the model card's wrapping."""

from __future__ import annotations

import argparse
import math
import re
import textwrap

import numpy as np
import torch
from torch import nn


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """(n, S, S, 3) uint8 → (n, 3, S, S) float normalised with mean = std = 0.5 (what the image testbed models are
    shipped with: ``pretrained_cfg`` of the shapes ViT, the saved image processor of the CLIP)."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def augment(images: torch.Tensor) -> torch.Tensor:
    """A random flip and quarter turn of a batch (n, C, S, S): which shapes an image holds does not depend on them."""
    if torch.rand(()) < 0.5:
        images = images.flip(-1)
    return torch.rot90(images, int(torch.randint(4, ())), dims=(-2, -1))


def add_training_arguments(parser: argparse.ArgumentParser, *, steps: int, batch_size: int, lr: float,
                           weight_decay: float, warmup: int, eval_every: int) -> None:
    """``--steps --batch-size --lr --weight-decay --warmup --eval-every --threads`` with these defaults."""
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--weight-decay", type=float, default=weight_decay)
    parser.add_argument("--warmup", type=int, default=warmup, help="linear warm-up steps before the cosine decay")
    parser.add_argument("--eval-every", type=int, default=eval_every)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def start_training(args: argparse.Namespace) -> None:
    """Apply ``--threads`` and seed torch with 0: every training run starts from the same initialisation."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up to ``peak`` over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def optimise(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, step: int,
             args: argparse.Namespace) -> float:
    """One AdamW step on ``loss`` at the scheduled learning rate, gradients clipped to norm 1; returns the loss."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, args.steps, args.lr, args.warmup)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


CARD_WIDTH = 120
"""The widest line of a model card (the project's line length): values filled into a card's text made lines of up to
271 characters."""


BEFORE_A_MARKER = re.compile(r"(?<=\S) (?=(?:[-+*>#|=]+|\d+[.)])(?: |$))")
"""The space before a word that, starting a line, would begin another Markdown block (a list item, a heading, a quote,
a table row, a heading's underline): ``mean = std = 0.5``, ``1 - 2``. :func:`wrapped_card` breaks no line there."""
KEPT_SPACE = "\0"
"""A space :func:`wrapped_card` does not break at, while it wraps (``textwrap`` breaks at white space only)."""


def wrapped_card(card: str, width: int = CARD_WIDTH) -> str:
    """A Markdown model card with its paragraphs and list items wrapped to ``width`` columns (a list item's
    continuation lines indented two spaces), its headings, table rows and blank lines as they are.

    Parameters
    ----------
    card : str
        The card, its paragraphs and list items broken anywhere (Markdown joins a paragraph's lines).
    width : int
        The most characters a wrapped line has; a word longer than that (a long code span) stays whole, and so does
        a word with one that would start a Markdown block after it (:data:`BEFORE_A_MARKER`).

    Returns
    -------
    str
        The same card rendered: the same words in the same blocks, only the line breaks inside a block moved.
    """
    lines: list[str] = []
    block: list[str] = []

    def end_block() -> None:
        if block:
            text = " ".join(line.strip() for line in block)
            item = text.startswith("- ")  # the marker stays with the item's first word
            text = BEFORE_A_MARKER.sub(KEPT_SPACE, text[2:] if item else text)
            lines.extend(line.replace(KEPT_SPACE, " ") for line in textwrap.wrap(
                text, width, initial_indent="- " if item else "", subsequent_indent="  " if item else "",
                break_long_words=False, break_on_hyphens=False))
            block.clear()

    for line in card.split("\n"):
        if not line.strip() or line.startswith(("#", "|")):
            end_block()
            lines.append(line)
        else:
            if line.startswith("- "):
                end_block()
            block.append(line)
    end_block()
    return "\n".join(lines)
