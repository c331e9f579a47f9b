"""The invariant of an annotate output folder: the manifest and the files on disk describe each other exactly."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from vitroll.io.names import readable
from vitroll.pipelines.manifest import OUTPUT_COLUMNS


def assert_manifest_matches_folder(out: Path) -> list[dict]:
    """Every output file on disk has exactly one manifest row, every row's outputs exist, each input has one row,
    and manifest.csv lists the same inputs in the same order (spelt :func:`~vitroll.io.names.readable`); returns the
    rows."""
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    paths = [row["path"] for row in rows]
    assert paths == sorted(set(paths)), "one row per input, sorted by path"
    with (out / "manifest.csv").open(newline="", encoding="utf-8") as handle:
        assert [row["path"] for row in csv.DictReader(handle)] == [readable(path) for path in paths]
    named = [row[column] for row in rows for column in OUTPUT_COLUMNS if row.get(column)]
    assert len(named) == len(set(named)), "an output named by two rows"
    on_disk = {path.relative_to(out).as_posix() for column in OUTPUT_COLUMNS
               for path in (out / f"{column}s").rglob("*") if path.is_file()}
    assert on_disk == set(named), (sorted(on_disk - set(named)), sorted(set(named) - on_disk))
    for row in rows:
        assert (row["status"] == "ok") == any(row.get(column) for column in OUTPUT_COLUMNS), row
    return rows
