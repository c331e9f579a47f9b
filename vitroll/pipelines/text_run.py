"""A resumable run over many texts, as ``vitroll annotate`` runs over many images: one manifest row per text in
``OUT/manifest.jsonl``, appended and fsync'ed as its batch finishes, so a crash or Ctrl-C keeps every finished batch.

A text's row is keyed by ``"<number>:<sha256 of the text>"`` (number = its 0-based index + 1: its line when all
texts come from one file). A rerun with the same output folder skips the texts whose latest row is ``ok`` with the
same settings hash; resuming a folder made with other settings is refused, naming them
(:func:`~vitroll.pipelines.manifest.check_resumable`, which ``OUT/settings.json`` serves). An empty text, or one the
tokenizer or model cannot take, becomes an ``error`` row with its reason and the others go on. ``text.html``,
``scores.json`` and ``scores.csv`` are then written from the manifest's rows of the texts given.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from torch import nn

from vitroll._version import __version__
from vitroll.errors import OptionValueError
from vitroll.io.text import TextReadout, UnexplainableText
from vitroll.methods import method_named
from vitroll.methods.text_batch import Position
from vitroll.pipelines import manifest as mf
from vitroll.pipelines.folder import batch_exit_code, one_interrupt
from vitroll.pipelines.text import TextResult, explain_texts, write_text_report
from vitroll.wording import argument, counted

_UNEXPLAINABLE = (ValueError, IndexError, RuntimeError)
"""What one bad text raises from the tokenizer or the model (no token, a position outside it, more tokens than the
model has positions); a batch that raises one is retried text by text, so that only the bad text fails."""


@dataclass
class TextRunSummary:
    """What a run did: ``total`` texts given, of which ``done_before`` were skipped, ``ok`` and ``failed`` now."""

    total: int
    done_before: int
    ok: int = 0
    failed: int = 0
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        """:func:`~vitroll.pipelines.folder.batch_exit_code`: 130 interrupted, 3 when a text of the report failed."""
        return batch_exit_code(self.interrupted, self.failed)

    def skip_line(self) -> str:
        return f"{self.done_before} of {self.total} texts already done"


@dataclass(frozen=True)
class TextReport:
    """The texts given, as the manifest holds them with the run's settings: results (with their 0-based indices)
    and failures (manifest rows)."""

    indices: list[int]
    results: list[TextResult]
    failures: list[dict[str, Any]]


def text_key(index: int, text: str) -> str:
    """The manifest key of the text at 0-based ``index``: its number and the SHA-256 of its characters."""
    return f"{index + 1}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


def run_texts(model: nn.Module, texts: Sequence[str], tokenizer: Any, out_dir: "str | Path", *,
              identity: Mapping[str, Any], method: str = "rollout", options: Optional[Mapping[str, object]] = None,
              batch_size: int = 16, resume: bool = True, readout: Optional[TextReadout] = None,
              position: Optional[Position] = None,
              announce: Callable[[TextRunSummary], None] = lambda summary: None,
              on_batch: Callable[[int], None] = lambda count: None) -> tuple[TextRunSummary, TextReport]:
    """Explain the texts not yet done in ``out_dir``'s manifest, a row per text, then rewrite the report from it.

    Parameters
    ----------
    identity : mapping
        What makes two runs' scores interchangeable (model, weights, method, options, readout); its hash decides what
        is skipped, and ``OUT/settings.json`` keeps it.
    resume : bool
        Skip the texts done with these settings, and refuse a folder whose newest settings differ (else redo every
        text).
    announce : callable
        Called once before the first batch with the summary so far (its :meth:`~TextRunSummary.skip_line`: "N of M
        texts already done").
    on_batch : callable
        Called with the number of texts of each finished batch (a progress bar's update).

    Returns
    -------
    summary : TextRunSummary
    report : TextReport
        What the report files were written from (after an interrupt too: the texts done so far).

    Raises
    ------
    VitrollError
        When ``resume`` and ``out_dir``'s scores of these texts were made with other settings.
    """
    out_dir = Path(out_dir)
    options = method_named(method).check(dict(options or {}))  # a bad option is the user's, not one text's
    common = {"model": identity.get("model"), "method": method, "method_options": options,
              "settings_hash": mf.settings_hash(dict(identity)), "vitroll_version": __version__}
    keys = [text_key(index, text) for index, text in enumerate(texts)]
    manifest = out_dir / mf.MANIFEST
    with mf.OutputLock(out_dir), one_interrupt() as hold_interrupts:
        latest = mf.latest_rows(mf.read_rows(manifest), key="key")
        if resume:
            mf.check_resumable(out_dir, [latest[key] for key in keys if key in latest], dict(identity))
        else:
            latest = {}
        mf.record_settings(out_dir, dict(identity))
        todo = [index for index, key in enumerate(keys)
                if not (key in latest and latest[key]["status"] == "ok"
                        and latest[key]["settings_hash"] == common["settings_hash"])]
        _check_position_fits_some([texts[index] for index in todo], tokenizer, position)
        summary = TextRunSummary(total=len(texts), done_before=len(texts) - len(todo))
        announce(summary)
        writer = mf.ManifestWriter(manifest)
        try:
            for first in range(0, len(todo), batch_size):
                batch = todo[first:first + batch_size]
                rows = _explained_rows(model, texts, keys, batch, tokenizer, common, method=method, options=options,
                                       readout=readout, position=position)
                writer.append(rows)
                on_batch(len(rows))
        except KeyboardInterrupt:
            summary.interrupted = True
        finally:
            hold_interrupts()  # from here a Ctrl-C is ignored: the rows written are kept and reported
            writer.close()
        rows = mf.read_rows(manifest)
        mf.write_rows(manifest, sorted(mf.latest_rows(rows, key="key").values(),
                                       key=lambda row: (row["index"], row["key"])))
        report = _report_of(mf.latest_rows(rows, key="key"), keys, common["settings_hash"])
        write_text_report(out_dir, report.results, model=str(identity.get("model")), method=method,
                          indices=report.indices, failures=report.failures)
    summary.ok, summary.failed = len(report.results), len(report.failures)
    return summary, report


def _explained_rows(model: nn.Module, texts: Sequence[str], keys: list[str], batch: list[int], tokenizer: Any,
                    common: dict[str, Any], **explain: Any) -> list[dict[str, Any]]:
    """The manifest rows of the texts at ``batch`` (indices into ``texts``): explained together, or one by one when
    one of them cannot be."""
    def error_row(index: int, message: str) -> dict[str, Any]:
        return {"index": index, "key": keys[index], "status": "error", "error": message, "text": texts[index],
                **common}

    wanted = [index for index in batch if texts[index].strip()]
    rows = {index: error_row(index, "empty text") for index in batch if index not in wanted}
    try:
        results = list(explain_texts(model, [texts[index] for index in wanted], tokenizer,
                                     batch_size=max(1, len(wanted)), **explain)) if wanted else []
    except OptionValueError:  # the same mistake for every text: one message, not a failed row per text
        raise
    except _UNEXPLAINABLE as error:
        if len(wanted) == 1:
            rows[wanted[0]] = error_row(wanted[0], "cannot explain it: " + _reason(error))
        else:
            for index in wanted:
                rows.update((row["index"], row) for row in _explained_rows(
                    model, texts, keys, [index], tokenizer, common, **explain))
    else:
        for index, result in zip(wanted, results):
            rows[index] = {"index": index, "key": keys[index], "status": "ok", "error": "", **result.as_record(),
                           **common}
    return [rows[index] for index in batch]


def _reason(error: Exception) -> str:
    """The first line of why one text could not be explained, without the batch's numbering of texts."""
    if isinstance(error, UnexplainableText):
        return error.alone
    return (str(error).splitlines() or [""])[0]


def _check_position_fits_some(texts: Sequence[str], tokenizer: Any, position: Optional[Position]) -> None:
    """Refuse one ``position`` (an int) that lies outside every text: that is the option's mistake, not the texts'.
    A position that fits some texts leaves the others to fail one by one.

    Raises
    ------
    OptionValueError
        Naming the position and the longest text's number of tokens.
    """
    texts = [text for text in texts if text.strip()]
    if not isinstance(position, int) or not texts:
        return
    longest = max(len(ids) for ids in tokenizer(texts, verbose=False)["input_ids"])
    if not -longest <= position < longest:
        raise OptionValueError(f"{argument('position', position)} is outside every text: the longest has "
                               f"{counted(longest, 'token')} (0 the first, -1 the last)")


def _report_of(latest: Mapping[str, dict[str, Any]], keys: list[str], settings_hash: str) -> TextReport:
    """The texts ``keys`` whose latest row has these settings, in order: the ok ones as results, the others as
    failures."""
    report = TextReport([], [], [])
    for index, key in enumerate(keys):
        row = latest.get(key)
        if row is None or row["settings_hash"] != settings_hash:
            continue
        if row["status"] == "ok":
            report.indices.append(index)
            report.results.append(TextResult.from_record(row))
        else:
            report.failures.append(row)
    return report
