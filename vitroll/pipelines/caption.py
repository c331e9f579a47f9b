"""``vitroll caption``: caption images with a captioner and map each word of the caption on the image.

Images go through the one batch loop (:func:`~vitroll.pipelines.stream.decoded_batches`); each batch is captioned
and mapped by :func:`~vitroll.methods.caption.caption_maps`. A word's map is the sum of its tokens' maps (a word of
several sub-word pieces, as the tokenizer splits it); special tokens (the end token) get none. Per image:
``OUT/<stem>_caption_<method>.png``, the image and one overlay per word under its word, the caption as its title;
``OUT/captions.json`` with each caption, its method, its words, their tokens and logits and each map's peak, an
entry per image (its absolute path) and method, the strip's name relative to ``OUT``: a later run, from whatever
folder, replaces its own images' entries for its method and keeps the others, and their strips (an image of the same
name in another folder gets ``<stem>-2``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from torch import nn

from vitroll.io.discovery import unique_paths
from vitroll.io.images import DEFAULT_MAX_PIXELS
from vitroll.io.writing import make_output_folder, write_atomic
from vitroll.maps import as_numpy, peak_location, to_original
from vitroll.methods.base import model_device
from vitroll.methods.caption import caption_maps, captioner_of
from vitroll.methods.map_checks import non_finite_problems
from vitroll.overlay import overlay
from vitroll.pipelines.explain import grid_png
from vitroll.pipelines.single import cannot_write, output_stems, stems_overwriting_inputs
from vitroll.pipelines.stream import Decoded, Failed, decoded_batches, read_image
from vitroll.preprocess import Preprocessing

CAPTIONS = "captions.json"
"""Every caption run into an output folder, one entry per image and method: a later run keeps the others."""


@dataclass(frozen=True)
class CaptionWord:
    """One word of a caption and the caption tokens it is made of."""

    word: str
    tokens: tuple[int, ...]
    """Positions of its tokens in the caption."""


@dataclass
class CaptionedImage:
    """The caption of one input and where its strip went, or why it failed."""

    path: Path
    caption: str = ""
    words: list[dict[str, Any]] = field(default_factory=list)
    strip_path: Optional[Path] = None
    error: Optional[str] = None
    tokens: list[str] = field(default_factory=list)
    """Every token the captioner generated, as the tokenizer spells it, special ones included."""

    @property
    def quoted(self) -> str:
        """The caption in quotes, or what was generated instead of one (:func:`quoted_caption`)."""
        return quoted_caption(self.caption, self.tokens)


MAX_TOKENS_SHOWN = 6
"""The most tokens :func:`quoted_caption` lists for a caption without words."""


def quoted_caption(caption: str, tokens: Sequence[str]) -> str:
    """``caption`` in quotes; an empty one (the captioner generated its end token first, or only blanks and special
    tokens) said so, with the ``tokens`` it generated, the first :data:`MAX_TOKENS_SHOWN` of them: a pair of empty
    quotes reads as a bug."""
    if caption:
        return f"“{caption}”"
    shown = " ".join(tokens[:MAX_TOKENS_SHOWN])
    more = f" … ({len(tokens)} tokens)" if len(tokens) > MAX_TOKENS_SHOWN else ""
    return f"(empty caption: only {shown}{more})"


def caption_words(token_ids: Sequence[int], tokenizer: Any, special_ids: Sequence[int]) -> list[CaptionWord]:
    """Group a caption's tokens into the words the tokenizer decodes them to: token j starts a new word when the
    text decoded from tokens 0 … j has more whitespace-separated words than the text before it (WordPiece's ``##``
    pieces and byte-level BPE's pieces without a leading space continue a word; punctuation the decoder attaches to
    a word, as BERT's does ``playing!``, stays with it). ``special_ids`` belong to none; a token that decodes to
    nothing (a blank, or a special token of the tokenizer's own such as ``[MASK]``) joins the word before it, or
    before the first word the one after it: a caption of only such tokens has no words."""
    words: list[list[int]] = []
    before_first: list[int] = []
    count = 0
    for position, token in enumerate(token_ids):
        if token in special_ids:
            continue
        decoded = tokenizer.decode(list(token_ids[:position + 1]), skip_special_tokens=True)
        now = len(decoded.split())
        if now > count:
            words.append(before_first + [position])
            before_first = []
        elif words:
            words[-1].append(position)
        else:
            before_first.append(position)
        count = now
    return [CaptionWord(tokenizer.decode([token_ids[i] for i in group], skip_special_tokens=True).strip(),
                        tuple(group)) for group in words]


def caption_files(paths: Sequence["str | os.PathLike[str]"], model: nn.Module, tokenizer: Any, *,
                  out_dir: "str | os.PathLike[str]", method: str = "chefer", max_new_tokens: int = 20,
                  batch_size: int = 8, preprocessing: Optional[Preprocessing] = None, cmap: str = "jet",
                  alpha: float = 0.5, window: Optional[int] = None,
                  max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> Iterator[CaptionedImage]:
    """Caption each file and write its strip; one result per input in input order, unreadable files (and those over
    ``max_pixels``, :func:`~vitroll.io.images.load_image`) with ``error`` set (the others go on). Merges its entries
    into ``OUT/captions.json`` (:func:`merged_captions`) once every input is done or, when the run stops early
    (Ctrl-C, an error), those of the inputs done, if the file can be written (what stopped the run is raised, not
    the file's OSError). ``window``: of ``occlusion``
    (:func:`~vitroll.methods.caption.caption_maps`)."""
    captioner = captioner_of(model)
    preprocessing = preprocessing or Preprocessing.from_model(model)
    out_dir = Path(out_dir)
    make_output_folder(out_dir)
    paths = unique_paths(paths)
    marker = f"_caption_{method}"
    earlier = _earlier_entries(out_dir / CAPTIONS)
    others = _strip_stems_of_others(earlier, {os.path.abspath(p) for p in paths}, marker)
    stems = output_stems(paths, marker, taken=stems_overwriting_inputs(paths, out_dir, marker[1:]) | others)
    special = set(captioner.special_ids(model))
    results: list[CaptionedImage] = []
    reader = functools.partial(read_image, max_pixels=max_pixels)
    try:
        for batch in decoded_batches(paths, reader, preprocessing, batch_size=batch_size,
                                        device=model_device(model)):
            result = None if batch.tensor is None else caption_maps(model, batch.tensor, method=method,
                                                                     max_new_tokens=max_new_tokens, window=window)
            problems = {} if result is None else non_finite_problems(batch.tensor, [(method, result.maps)])
            slot = 0
            for record in batch.records:
                if isinstance(record, Failed):
                    captioned = CaptionedImage(path=record.item, error=record.message)
                elif slot in problems:  # drawn, its word maps would be the bare image: "looked nowhere"
                    captioned = CaptionedImage(path=record.item, error=f"{record.item}: {problems[slot]}")
                    slot += 1
                else:
                    try:
                        captioned = _write_strip(record, stems[record.index], slot, result, tokenizer, special,
                                                 out_dir, method, cmap, alpha)
                    except OSError as error:  # this image's strip cannot be written: it alone fails
                        captioned = CaptionedImage(path=record.item, error=cannot_write(record.item, error, out_dir))
                    slot += 1
                results.append(captioned)
                yield captioned
    except BaseException:  # Ctrl-C, an error, the caller closing the generator: the strips written so far are listed
        # what stopped the run is what the caller hears, not a full disk's refusal of the list on its way out
        with contextlib.suppress(OSError):
            _write_captions(out_dir, earlier, results, method)
        raise
    _write_captions(out_dir, earlier, results, method)


def _write_captions(out_dir: Path, earlier: list[dict[str, Any]], results: list[CaptionedImage], method: str) -> None:
    """Merge the entries of ``results`` into ``OUT/captions.json`` (:func:`merged_captions`)."""
    summary = [{"path": os.path.abspath(each.path), "method": method, "caption": each.caption, "words": each.words,
                "strip": each.strip_path.name if each.strip_path else None, "error": each.error} for each in results]
    # a path that is not UTF-8 on disk keeps its bytes as a JSON escape (\udce9), read back as the same path
    write_atomic(out_dir / CAPTIONS, json.dumps({"images": merged_captions(earlier, summary)}, indent=1,
                                                ensure_ascii=False).encode("utf-8", "backslashreplace"))


def merged_captions(earlier: list[dict[str, Any]], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``earlier`` (an earlier run's ``captions.json`` entries, read once as the run started) with ``entries``
    merged in: an entry of the same image and method is replaced in its place, the others are kept, as their strips
    are. The same image is the same absolute path, as :func:`~vitroll.io.discovery.unique_paths` has it (``x.png``
    and ``/abs/x.png`` share one entry, as they share one strip); entries store it absolute, so that a run from
    another folder tells its ``x.png`` from theirs."""
    by_key = {_entry_key(entry): entry for entry in earlier}
    for entry in entries:
        by_key[_entry_key(entry)] = entry
    return list(by_key.values())


def _earlier_entries(path: Path) -> list[dict[str, Any]]:
    """The entries of an earlier run's ``captions.json`` (a file written before entries had their own ``method``
    gives them its top-level one; one that is not JSON is started afresh)."""
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
        return [{"method": earlier.get("method"), **entry} for entry in earlier["images"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def _strip_stems_of_others(entries: list[dict[str, Any]], images: set[str], marker: str) -> set[str]:
    """The stems of the strips (``<stem><marker>.png``) that ``entries`` of images other than ``images`` (absolute
    paths) list: kept, so not to be overwritten by this run's."""
    stems = set()
    for entry in entries:
        strip = entry.get("strip")
        if isinstance(strip, str) and _entry_key(entry)[0] not in images:
            name = Path(strip).name
            if name.endswith(f"{marker}.png"):
                stems.add(name[:-len(f"{marker}.png")])
    return stems


def _entry_key(entry: dict[str, Any]) -> tuple[Optional[str], Any]:
    """An entry's image (its absolute path; an entry of an earlier version, stored as given, taken from here) and
    method."""
    image = entry.get("path")
    return (os.path.abspath(image) if isinstance(image, str) else None, entry.get("method"))


def _write_strip(record: Decoded, stem: str, slot: int, result: Any, tokenizer: Any, special: set[int],
                 out_dir: Path, method: str, cmap: str, alpha: float) -> CaptionedImage:
    length = int(result.lengths[slot])
    token_ids = result.token_ids[slot, :length].tolist()
    token_maps = as_numpy(result.maps[slot, :length])  # (K, h, w)
    logits = result.token_logits[slot, :length].tolist()
    words = caption_words(token_ids, tokenizer, sorted(special))
    caption = tokenizer.decode(token_ids, skip_special_tokens=True).strip()
    overlays, described = [], []
    for word in words:
        grid_map = token_maps[list(word.tokens)].sum(axis=0)
        saliency = to_original(grid_map, record.geometry)
        overlays.append(overlay(record.image, saliency, cmap=cmap, alpha=alpha))
        row, column = peak_location(saliency)
        described.append({"word": word.word, "tokens": [tokenizer.convert_ids_to_tokens(token_ids[i])
                                                          for i in word.tokens],
                          "token_logits": [round(logits[i], 4) for i in word.tokens], "peak_xy": [column, row]})
    strip_path = out_dir / f"{stem}_caption_{method}.png"
    generated = tokenizer.convert_ids_to_tokens(token_ids)
    title = f"{record.item.name} — {method}: {quoted_caption(caption, generated)}"
    write_atomic(strip_path, grid_png(record.image, overlays, [each.word for each in words], record.geometry, title))
    return CaptionedImage(path=record.item, caption=caption, words=described, strip_path=strip_path, tokens=generated)

