"""Explain a handful of image files through the batch stream (decoded in this process) and save overlays (and
figures)."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence

from torch import nn

from vitroll.io import encode_png
from vitroll.io.discovery import unique_paths
from vitroll.io.images import DEFAULT_MAX_PIXELS
from vitroll.io.names import NAME_MAX, fit_name, utf8_name
from vitroll.io.writing import make_output_folder, write_atomic
from vitroll.pipelines.explain import ExplainSettings, figure_png, render, text_grid_png, top_classes
from vitroll.pipelines.stream import Explained, Failed, explain_stream, read_image
from vitroll.preprocess import Preprocessing


@dataclass(frozen=True)
class TextOverlay:
    """The overlay of one text on one image (an image–text model)."""

    text: str
    path: Path
    logit: float
    """The image–text logit ``S[i, t]`` that the map explains."""


@dataclass
class ImageExplanation:
    """What was made for one input file."""

    path: Path
    overlay_path: Optional[Path] = None
    figure_path: Optional[Path] = None
    """The image | heatmap | overlay figure, or for an image–text model the grid of one overlay per text."""
    top: Optional[list[tuple[int, str, float]]] = None
    text_overlays: Optional[list[TextOverlay]] = None
    """For an image–text model: one overlay per text, in the order of the texts."""
    seen_share: Optional[float] = None
    """The share of the image's area the model saw (:meth:`~vitroll.preprocess.CropGeometry.seen_share`)."""
    pixels_per_patch: Optional[float] = None
    """The image's pixels a patch covers along a side (:meth:`~vitroll.preprocess.CropGeometry.pixels_per_patch`)."""
    error: Optional[str] = None


def unique_names(names: Sequence[str], taken: Iterable[str] = ()) -> list[str]:
    """``names`` made unique: a name stays as it is the first time it appears unless ``taken`` holds it; a repeat
    gets the first suffix ``-2``, ``-3``… that no other name and nothing in ``taken`` has (``x``, ``x``, ``x-2`` →
    ``x``, ``x-3``, ``x-2``)."""
    used = set(taken)
    reserved = used | set(names)
    unique = []
    for name in names:
        candidate, count = name, 1
        while candidate in used or (count > 1 and candidate in reserved):
            count += 1
            candidate = f"{name}-{count}"
        used.add(candidate)
        unique.append(candidate)
    return unique


def output_stems(paths: Sequence[Path], marker: str, taken: Iterable[str] = ()) -> list[str]:
    """File stems for outputs named ``<stem><marker>…`` (``marker`` such as ``_rollout``), made unique by suffixing
    ``-2``, ``-3``… when inputs share a name or a stem is ``taken``; a stem too long for the file system with the
    marker and :data:`SUFFIX_ROOM` after it is cut, with a hash of it (:func:`~vitroll.io.names.fit_name`), and one
    that is not UTF-8 spelt with escapes and a hash, as ``annotate`` names it (:func:`~vitroll.io.names.utf8_name`)."""
    room = NAME_MAX - len(marker.encode("utf-8")) - SUFFIX_ROOM
    return [fit_name(utf8_name(stem), room) for stem in unique_names([path.stem for path in paths], taken)]


def stems_overwriting_inputs(paths: Sequence[Path], out_dir: Path, method: str) -> set[str]:
    """The output stems whose files (``OUT/<stem>_<method>….png``) could replace one of the input files ``paths``:
    every part of an input's name in ``out_dir`` before a ``_<method>``."""
    out_dir = out_dir.resolve()
    marker = re.compile(re.escape(f"_{method}"))
    return {path.name[:found.start()] for path in paths if path.parent.resolve() == out_dir
            for found in marker.finditer(path.name)}


SLUG_LENGTH = 40
SUFFIX_ROOM = SLUG_LENGTH + len("_-1000.png")
"""Bytes an output's name keeps after ``<stem>_<method>``: ``_figure.png``, ``_texts.png``, ``_<text slug>-N.png``."""


def text_slugs(texts: Sequence[str], max_length: int = SLUG_LENGTH) -> list[str]:
    """File-name parts for texts: lower case, runs of anything but letters and digits as one ``-``, at most
    ``max_length`` characters, unique, and never ``texts``, the grid's (``a dog`` → ``a-dog``; ``A dog!`` after it →
    ``a-dog-2``; ``Texts`` → ``texts-2``)."""
    return unique_names([re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:max_length].strip("-") or "text"
                         for text in texts], taken={"texts"})


def explain_files(
    paths: Sequence["str | os.PathLike[str]"],
    model: nn.Module,
    *,
    out_dir: "str | os.PathLike[str]",
    settings: ExplainSettings,
    preprocessing: Optional[Preprocessing] = None,
    class_names: Optional[list[str]] = None,
    batch_size: int = 8,
    save_figure: bool = False,
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
) -> Iterator[ImageExplanation]:
    """Explain each file and write ``OUT/<stem>_<method>.png`` (and ``_figure.png``; ``<stem>`` made unique among
    the inputs and such that no output replaces an input file), one result per input in input order; for an
    image–text model with its texts bound (:class:`~vitroll.adapters.image_text.PromptedModel`), one overlay per
    text and their grid.

    Unreadable files, files larger than ``max_pixels`` (:func:`~vitroll.io.images.load_image`) and files whose
    outputs cannot be written yield a result with ``error`` set; the others are still processed. A file given twice
    is explained once.
    """
    preprocessing = preprocessing or Preprocessing.from_model(model)
    out_dir = Path(out_dir)
    make_output_folder(out_dir)
    paths = unique_paths(paths)
    stems = output_stems(paths, f"_{settings.method}", taken=stems_overwriting_inputs(paths, out_dir, settings.method))
    reader = functools.partial(read_image, max_pixels=max_pixels)
    for record in explain_stream(model, paths, reader, preprocessing, settings, batch_size=batch_size):
        if isinstance(record, Failed):
            yield ImageExplanation(path=record.item, error=record.message)
            continue
        try:
            if record.text_logits is not None:
                yield _explain_texts(record, stems[record.index], list(model.texts.labels), out_dir, settings)
            else:
                yield _explain_image(record, stems[record.index], out_dir, settings, class_names, save_figure)
        except OSError as error:  # this image's outputs cannot be written (a folder in the way, no permission)
            yield ImageExplanation(path=record.item, error=cannot_write(record.item, error, out_dir))


def cannot_write(path: Path, error: OSError, out_dir: Path) -> str:
    """The one-line reason why the outputs of input ``path`` were not written: the file refused and why."""
    return f"{path}: cannot write outputs: {error.filename or out_dir}: {error.strerror or error}"


def _explain_image(record: Explained, stem: str, out_dir: Path, settings: ExplainSettings,
                   class_names: Optional[list[str]], save_figure: bool) -> ImageExplanation:
    """Write ``OUT/<stem>_<method>.png`` (and ``_figure.png``) for one image's map; its top classes."""
    path = record.item
    saliency, overlaid = render(record.image, record.grid_map, record.geometry, settings)
    explanation = ImageExplanation(path=path, overlay_path=out_dir / f"{stem}_{settings.method}.png",
                                   seen_share=record.geometry.seen_share(),
                                   pixels_per_patch=record.geometry.pixels_per_patch(record.grid_map.shape[-2:]))
    write_atomic(explanation.overlay_path, encode_png(overlaid))
    if record.probabilities is not None:
        explanation.top = top_classes(record.probabilities, class_names)
    if save_figure:
        explanation.figure_path = out_dir / f"{stem}_{settings.method}_figure.png"
        top = explanation.top[0] if explanation.top else None
        write_atomic(explanation.figure_path, figure_png(path.name, record.image, saliency, overlaid, settings, top))
    return explanation


def _explain_texts(record: Explained, stem: str, texts: list[str], out_dir: Path,
                   settings: ExplainSettings) -> ImageExplanation:
    """Write ``OUT/<stem>_<method>_<text-slug>.png`` per text and the grid ``OUT/<stem>_<method>_texts.png`` for
    one image's maps (T, h, w) against ``texts``."""
    path = record.item
    explanation = ImageExplanation(path=path, text_overlays=[], seen_share=record.geometry.seen_share(),
                                   pixels_per_patch=record.geometry.pixels_per_patch(record.grid_map.shape[-2:]),
                                   figure_path=out_dir / f"{stem}_{settings.method}_texts.png")
    overlays = []
    for text, slug, grid_map, logit in zip(texts, text_slugs(texts), record.grid_map, record.text_logits):
        _saliency, overlaid = render(record.image, grid_map, record.geometry, settings)
        overlays.append(overlaid)
        written = TextOverlay(text, out_dir / f"{stem}_{settings.method}_{slug}.png", float(logit))
        write_atomic(written.path, encode_png(overlaid))
        explanation.text_overlays.append(written)
    write_atomic(explanation.figure_path,
                 text_grid_png(path.name, record.image, overlays, texts, record.text_logits, record.geometry,
                               settings))
    return explanation
