"""Explain a handful of image files through the batch stream (decoded in this process) and save overlays (and
figures)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from torch import nn

from vitroll.io import encode_png, write_atomic
from vitroll.pipelines.explain import ExplainSettings, figure_png, render, top_classes
from vitroll.pipelines.stream import Failed, explain_stream, read_image
from vitroll.preprocess import Preprocessing


@dataclass
class ImageExplanation:
    """What was made for one input file."""

    path: Path
    overlay_path: Optional[Path] = None
    figure_path: Optional[Path] = None
    top: Optional[list[tuple[int, str, float]]] = None
    error: Optional[str] = None


def output_stems(paths: Sequence[Path]) -> list[str]:
    """File stems for outputs, made unique by suffixing ``-2``, ``-3``… when inputs share a name."""
    seen: dict[str, int] = {}
    stems = []
    for path in paths:
        count = seen.get(path.stem, 0) + 1
        seen[path.stem] = count
        stems.append(path.stem if count == 1 else f"{path.stem}-{count}")
    return stems


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
) -> Iterator[ImageExplanation]:
    """Explain each file and write ``OUT/<stem>_<method>.png`` (and ``_figure.png``), one result per input in
    input order.

    Unreadable files yield a result with ``error`` set; the others are still processed.
    """
    preprocessing = preprocessing or Preprocessing.from_model(model)
    out_dir = Path(out_dir)
    paths = [Path(p) for p in paths]
    stems = output_stems(paths)
    for record in explain_stream(model, paths, read_image, preprocessing, settings, batch_size=batch_size):
        if isinstance(record, Failed):
            yield ImageExplanation(path=record.item, error=record.message)
            continue
        path, stem = record.item, stems[record.index]
        saliency, overlaid = render(record.image, record.grid_map, record.geometry, settings)
        explanation = ImageExplanation(path=path, overlay_path=out_dir / f"{stem}_{settings.method}.png")
        write_atomic(explanation.overlay_path, encode_png(overlaid))
        if record.probabilities is not None:
            explanation.top = top_classes(record.probabilities, class_names)
        if save_figure:
            explanation.figure_path = out_dir / f"{stem}_{settings.method}_figure.png"
            top = explanation.top[0] if explanation.top else None
            write_atomic(explanation.figure_path,
                         figure_png(path.name, record.image, saliency, overlaid, settings, top))
        yield explanation
