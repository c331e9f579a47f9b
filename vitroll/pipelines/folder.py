"""Annotate a whole folder: decode in worker processes, explain in batches on the device, write outputs off the
critical path, and keep a manifest that makes the run resumable.

    the batch stream (:mod:`vitroll.pipelines.stream`: loader workers decode + preprocess, the main
    thread runs the model + saliency, batched) ──► writer threads (render, encode, atomic writes)
    ──► manifest rows, appended and fsync'ed once a batch's files are on disk

So a crash or Ctrl-C loses at most the batches in flight, and their files are either complete or absent. Under
``torchrun`` every rank takes every K-th input of the sorted list, writes its own manifest shard, and rank 0
merges the shards at the end. A rank that fails (a full disk) makes the others stop after their batch in flight;
the shards are still merged, and rank 0 reports the failure in one line. A run touches only its own inputs (the
first ``limit``): the rows of the others stay, and a redone input's new row replaces its old one, whose outputs that
the new row no longer lists are removed.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import signal
import threading
import time
from collections import deque
from contextlib import ExitStack, contextmanager
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
from torch import nn

from vitroll._version import __version__
from vitroll.errors import ImageReadError, OptionValueError, VitrollError, one_line
from vitroll.io import encode_png
from vitroll.io.formats import is_dicom
from vitroll.io.images import DEFAULT_MAX_PIXELS, DICOM_HERE
from vitroll.io.names import single_line
from vitroll.io.writing import write_atomic
from vitroll.maps import key_patches, summary
from vitroll.metrics import rank_correlation
from vitroll.methods.base import model_device
from vitroll.pipelines import manifest as mf
from vitroll.pipelines.explain import ExplainSettings, figure_png, render, top_classes, warn_of_sights
from vitroll.pipelines.gallery import write_gallery
from vitroll.pipelines.inputs import InputItem, assign_output_names, discover, nothing_found
from vitroll.pipelines.progress import progress_bar
from vitroll.pipelines.single import cannot_write
from vitroll.pipelines.stream import Explained, Failed, decoded_batches, explained_batches, read_image
from vitroll.preprocess import Preprocessing
from vitroll.wording import argument, counted

SAVE_KINDS = mf.OUTPUT_COLUMNS
PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
EXIT_SOME_FAILED = 3
"""Exit status of a run in which some inputs could not be processed (2 is a usage error, 130 an interrupt)."""


def batch_exit_code(interrupted: bool, failed: int) -> int:
    """The exit status of a run over many inputs: 130 interrupted, :data:`EXIT_SOME_FAILED` when ``failed`` inputs
    did, else 0."""
    return 130 if interrupted else (EXIT_SOME_FAILED if failed else 0)


def default_writer_threads() -> int:
    """Half the CPU cores, 2 to 8: rendering and PNG encoding (OpenCV, outside the GIL) take a few ms per image, so
    two threads cap a run near 2 / (that time) images per second however fast the model is."""
    return max(2, min(8, (os.cpu_count() or 2) // 2))


@dataclass(frozen=True)
class AnnotateOptions:
    batch_size: int = 16
    workers: int = 2
    writer_threads: int = field(default_factory=default_writer_threads)
    save: tuple[str, ...] = ("overlay", "heatmap")
    resume: bool = True
    recursive: bool = False
    limit: Optional[int] = None
    precision: str = "fp32"
    key_patches: int = 5
    """How many key patches each manifest row lists."""
    progress: bool = True
    compare_with: Optional[str] = None
    """A second method (e.g. ``integrated_gradients``) whose maps are rank-correlated with the main method's per
    image (manifest columns ``agreement`` and ``disagrees``); nothing of it is written."""
    disagree_below: float = 0.0
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS
    """The largest image to decode (:func:`~vitroll.io.images.load_image`); a larger one is an ``error`` row."""

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.save if kind not in SAVE_KINDS]
        if unknown:
            raise OptionValueError(f"{argument('save')} takes {', '.join(SAVE_KINDS)}; got {unknown[0]!r}")
        # the same outputs however the kinds are ordered or repeated: one settings hash, so a resume is not refused
        object.__setattr__(self, "save", tuple(kind for kind in SAVE_KINDS if kind in self.save))
        # the command line's parsing refuses these before: only a Python caller is told
        if self.precision not in PRECISIONS:
            raise OptionValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")
        if self.batch_size < 1:
            raise OptionValueError(f"batch_size must be at least 1; got {self.batch_size}")
        if self.workers < 0:
            raise OptionValueError(f"workers must be at least 0; got {self.workers}")


@dataclass
class RunSummary:
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    kept: int = 0
    """Rows of earlier runs for inputs this run did not touch (no longer in INPUT, another INPUT, past ``limit``):
    kept with their outputs, and in the gallery."""
    elapsed: float = 0.0
    interrupted: bool = False
    failures: list[str] = field(default_factory=list)
    sights: list[tuple[str, float, float]] = field(default_factory=list)
    """Per image explained by this run, its path, the pixels a patch covers a side (``patch_pixels``) and the share
    of it the model saw (``seen``), for :func:`~vitroll.pipelines.explain.sight_warnings`."""

    @property
    def files_per_second(self) -> float:
        """The files explained or failed (a file of an image's name that is none too) a second."""
        return (self.ok + self.failed) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def exit_code(self) -> int:
        """:func:`batch_exit_code`."""
        return batch_exit_code(self.interrupted, self.failed)

    def line(self) -> str:
        state = "interrupted — rerun the same command to resume; " if self.interrupted else ""
        kept = (f"; {counted(self.kept, 'row')} of other inputs kept from earlier runs "
                "(in the manifest and the gallery)") if self.kept else ""
        return (f"{state}{self.ok} ok, {self.failed} failed, {self.skipped} skipped (done before), "
                f"{self.elapsed:.1f} s, {self.files_per_second:.2f} files/s{kept}")


def shard_of(items: Sequence[InputItem], rank: int, world_size: int) -> list[InputItem]:
    """Rank ``rank``'s share of the sorted inputs: every ``world_size``-th, starting at ``rank``."""
    return list(items[rank::world_size])


def world() -> tuple[int, int]:
    """(rank, world size) of the initialised torch.distributed group, or (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class _Annotator:
    """One run's state: what it writes, and the rows it owes the manifest."""

    def __init__(self, out_dir: Path, settings: ExplainSettings, options: AnnotateOptions,
                 identity: dict[str, Any], class_names: Optional[list[str]]) -> None:
        self.out_dir, self.settings, self.options, self.class_names = out_dir, settings, options, class_names
        self.common = {"model": identity.get("model"), "method": settings.method,
                       "method_options": settings.method_options, "cmap": settings.cmap,
                       "normalization": settings.normalization, "settings_hash": mf.settings_hash(identity),
                       "vitroll_version": __version__}

    def error_row(self, item: InputItem, message: str) -> dict[str, Any]:
        """An ``error`` row whose reason is ``message``'s first line (an exception's text may run on), the input's path
        that starts it spelt on one line first (:func:`~vitroll.io.names.single_line`): a name with a line break in
        it left the reason ``/in/bad``."""
        name = str(item.path)
        if message.startswith(name):
            message = single_line(name) + message[len(name):]
        return {**_identity(item), "status": "error", "error": message.splitlines()[0], **self.common}

    def output_path(self, kind: str, item: InputItem) -> Path:
        return self.out_dir / _output_file(kind, item.output_name)

    def finish(self, item: InputItem, explained: Explained) -> dict[str, Any]:
        """Render and write one image's outputs (in a writer thread); return its manifest row. Any failure is this
        input's ``error`` row, and the outputs it had written are removed: they would have no row."""
        rgb, grid_map, geometry, probabilities = (explained.image, explained.grid_map, explained.geometry,
                                                  explained.probabilities)
        outputs: dict[str, str] = {}
        try:
            saliency, overlaid = render(rgb, grid_map, geometry, self.settings)
            top = top_classes(probabilities, self.class_names, k=1)[0] if probabilities is not None else None
            for kind in self.options.save:
                path = self.output_path(kind, item)
                if kind == "overlay":
                    data = encode_png(overlaid)
                elif kind == "heatmap":
                    buffer = io.BytesIO()
                    np.save(buffer, grid_map.astype(np.float16))
                    data = buffer.getvalue()
                else:
                    data = figure_png(item.path.name, rgb, saliency, overlaid, self.settings, top)
                write_atomic(path, data)
                outputs[kind] = str(path.relative_to(self.out_dir).as_posix())
            stats = summary(saliency)
            patches = [{"row": p.row, "col": p.col, "score": round(p.score, 6), "box": list(p.box)}
                       for p in key_patches(grid_map, geometry, self.options.key_patches)]
        except Exception as error:  # noqa: BLE001 — one input's failure must not stop its batch or lose its rows
            for name in outputs.values():
                (self.out_dir / name).unlink(missing_ok=True)
            if isinstance(error, OSError):
                return self.error_row(item, cannot_write(item.path, error, self.out_dir))
            return self.error_row(item, f"{item.path}: cannot be rendered ({type(error).__name__}: {error})")
        if explained.compared_maps:
            agreement = float(rank_correlation(grid_map, explained.compared_maps[0])[0])
            outputs.update(agreement=round(agreement, 6), disagrees=agreement < self.options.disagree_below)
        return {
            **_identity(item), "status": "ok", "error": "", "width": geometry.original_hw[1],
            "height": geometry.original_hw[0], "seen": round(geometry.seen_share(), 4),
            "patch_pixels": round(geometry.pixels_per_patch(grid_map.shape[-2:]), 4),
            "top1_index": top[0] if top else None, "top1_name": top[1] if top else None,
            "top1_probability": round(top[2], 6) if top else None, "peak_x": stats["peak_col"],
            "peak_y": stats["peak_row"],
            "entropy": round(stats["entropy"], 6), "top10_mass": round(stats["top_mass"], 6), "key_patches": patches,
            **outputs, **self.common,
        }


def annotate(
    source: "str | os.PathLike[str]",
    out_dir: "str | os.PathLike[str]",
    model: nn.Module,
    settings: ExplainSettings,
    *,
    identity: dict[str, Any],
    preprocessing: Optional[Preprocessing] = None,
    class_names: Optional[list[str]] = None,
    options: AnnotateOptions = AnnotateOptions(),
    inputs: Optional[list[InputItem]] = None,
) -> RunSummary:
    """Explain every image under ``source`` (a folder or a list file) into ``out_dir``.

    Parameters
    ----------
    inputs : list of InputItem, optional
        ``source``'s inputs as :func:`find_inputs` found them (the CLI looks before it loads the model, so that a
        missing INPUT is told at once); found here when None.
    identity : dict
        What makes two runs' outputs interchangeable (model name, weights, method, options, rendering); its hash
        decides what ``resume`` may skip. Kept in ``OUT/settings.json``: resuming a folder whose newest settings
        differ is refused, naming what differs (:func:`~vitroll.pipelines.manifest.check_resumable`).

    Returns
    -------
    RunSummary — counts and failures for this process (of all ranks under torchrun).

    Warns
    -----
    UserWarning
        Once a run, when images were smaller than the model's patch grid or strips the model saw little of
        (:attr:`RunSummary.sights`), naming how many and ``preprocessing`` that shows the model all of a strip.

    Raises
    ------
    VitrollError
        When ``options.resume`` and ``out_dir``'s outputs of these inputs were made with other settings.
    """
    out_dir = Path(out_dir)
    preprocessing = preprocessing or Preprocessing.from_model(model)
    rank, world_size = world()
    annotator = _Annotator(out_dir, settings, options, identity, class_names)
    lock_name = ".vitroll.lock" if rank == 0 else f".vitroll.rank{rank}.lock"
    shard_file = out_dir / (mf.MANIFEST if world_size == 1 else f"manifest.rank{rank}.jsonl")
    stop_flag = out_dir / STOP_FLAG
    result = RunSummary()
    started = time.perf_counter()
    with ExitStack() as held:
        hold_interrupts = held.enter_context(one_interrupt())
        with together(rank, world_size):
            items = find_inputs(source, out_dir, options) if inputs is None else inputs
            held.enter_context(mf.OutputLock(out_dir, lock_name))
            if rank == 0:
                stop_flag.unlink(missing_ok=True)  # a killed run's
                # this run's rows, appended after, are then the newest wherever a rank writes them
                _remove_unlisted_outputs(out_dir, _compact(out_dir))
        with together(rank, world_size):
            previous = mf.latest_rows(mf.read_rows(out_dir / mf.MANIFEST))
            names = assign_output_names((item.key for item in items),
                                        {key: name for key, row in previous.items() if (name := _output_name_of(row))})
            items = [dataclasses.replace(item, assigned_name=names[item.key]) for item in items]
            mine = shard_of(items, rank, world_size)
            if options.resume:
                mf.check_resumable(out_dir, [previous[item.key] for item in items if item.key in previous], identity)
            latest = previous if options.resume else {}
            same_settings = mf.same_settings_hashes(out_dir, identity)
            todo = [item for item in mine
                    if not mf.is_done(latest.get(item.key), same_settings, item.size, item.mtime_ns, out_dir)]
            _refuse_dicom(todo)
            if rank == 0:
                mf.record_settings(out_dir, identity)
            result.skipped = len(mine) - len(todo)
            result.kept = len(previous.keys() - {item.key for item in items}) if rank == 0 else 0
        failure: Optional[BaseException] = None
        try:
            writer = mf.ManifestWriter(shard_file)
            try:
                _run(model, todo, preprocessing, annotator, writer, options, result, show_progress=rank == 0,
                     should_stop=(lambda: stop_flag.exists()) if world_size > 1 else (lambda: False),
                     hold_interrupts=hold_interrupts)
            finally:
                writer.close()
        except USER_ERRORS as error:
            failure = error
            if world_size > 1:
                _raise_stop_flag(stop_flag)
        result.elapsed = time.perf_counter() - started
        # after a failure too: manifest.csv and the gallery show the work done
        merge_failure = _merge(out_dir, settings, rank, world_size)
        result = _reduce(result, world_size)
        _agree(failure or merge_failure, rank, world_size)
    if rank == 0:
        warn_of_sights(result.sights, "annotate")
    return result


def find_inputs(source: "str | os.PathLike[str]", out_dir: "str | os.PathLike[str]",
                options: AnnotateOptions) -> list[InputItem]:
    """The inputs a run of ``options`` on ``source`` into ``out_dir`` takes, sorted by key (:func:`discover`).

    Raises
    ------
    ImageReadError
        When there are none (``source`` missing, or no image in it), saying why.
    """
    items = discover(source, recursive=options.recursive, limit=options.limit, exclude=out_dir)
    if not items:
        raise ImageReadError(source, nothing_found(source, recursive=options.recursive, exclude=out_dir))
    return items


@contextmanager
def one_interrupt(on_first: Optional[Callable[[], None]] = None) -> Iterator[Callable[[], None]]:
    """Ctrl-C raises KeyboardInterrupt once, until the function yielded is called: once the batches are done, and
    after the first, a Ctrl-C (an impatient user's second, or a rank's that had done its share and waited for the
    others) is ignored while the run keeps its work (its batch in flight, manifest.csv, the gallery, ``vitroll
    text``'s report): it broke that off, the loader's workers' shutdown with a traceback, and the ranks' merge with
    torch's. Only where Python's own handler is in place (the main thread, nobody else's).

    With ``on_first``, the first Ctrl-C only calls it (the run then finishes its input in flight) and the second
    raises KeyboardInterrupt."""
    pressed: list[int] = []
    held: list[bool] = []
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield lambda: None
        return

    def handler(signum: int, frame: Any) -> None:
        pressed.append(signum)
        if held:
            return
        if on_first is not None and len(pressed) == 1:
            on_first()
        elif len(pressed) == (1 if on_first is None else 2):
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: held.append(True)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class ReportedByRankZero(VitrollError):
    """Raised under torchrun on every rank but 0 when some rank failed: rank 0 reports it, once."""


USER_ERRORS = (VitrollError, ValueError, OSError)
"""What the CLI reports as one line: the failures a rank tells the others of, so that no rank waits for it."""
STOP_FLAG = ".vitroll.stop"
"""Made in the output folder by a rank that failed mid-run: the others stop after their batch in flight."""


def _agree(failure: Optional[BaseException], rank: int, world_size: int) -> None:
    """Raise, on every rank, when any rank failed (``failure`` is this rank's, or None): rank 0 the first failing
    rank's error as one line, the others :class:`ReportedByRankZero`. All ranks call it at the same point, so a
    failure of one rank never leaves the others waiting for it at a later collective."""
    if world_size == 1:
        if failure is not None:
            raise failure
        return
    messages: list[Optional[str]] = [None] * world_size
    torch.distributed.all_gather_object(messages, None if failure is None else one_line(failure))
    first = next((message for message in messages if message is not None), None)
    if first is None:
        return
    if rank == 0:
        raise VitrollError(first) from failure
    raise ReportedByRankZero(first) from failure


@contextmanager
def together(rank: int, world_size: int) -> Iterator[None]:
    """Run the block on every rank, then :func:`_agree` on how it went (a barrier): a user error of any rank is
    raised on rank 0 as one line, and as :class:`ReportedByRankZero` on the others."""
    failure: Optional[BaseException] = None
    try:
        yield
    except USER_ERRORS as error:
        failure = error
    _agree(failure, rank, world_size)


def _raise_stop_flag(stop_flag: Path) -> None:
    try:
        stop_flag.touch()
    except OSError:
        pass  # the others then finish their shares before they hear of the failure at the merge


def _refuse_dicom(todo: list[InputItem]) -> None:
    """Refuse the run when an input to do is a DICOM file (told by its first bytes, whatever its name), before
    anything is written: its error row would put its path, which often holds the patient's name, into the manifest
    and the gallery."""
    dicom = [item for item in todo if is_dicom(item.path)]
    if dicom:
        others = len(dicom) - 1
        which = {0: "it", 1: "it and the other DICOM file"}.get(others, f"it and the {others} other DICOM files")
        raise ImageReadError(dicom[0].path, f"{DICOM_HERE}; leave {which} out of annotate's inputs")


def _output_file(kind: str, name: str) -> str:
    """Where the output ``kind`` of the input whose output name is ``name`` goes, relative to the output folder."""
    return f"{kind}s/{name}{'.npy' if kind == 'heatmap' else '.png'}"


def _output_name_of(row: dict[str, Any]) -> Optional[str]:
    """The output name a manifest row's files were written under (None for a row without outputs)."""
    for kind in SAVE_KINDS:
        prefix, suffix = _output_file(kind, "\0").split("\0")
        file = row.get(kind)
        if file and file.startswith(prefix) and file.endswith(suffix):
            return file[len(prefix): len(file) - len(suffix)]
    return None


def _identity(item: InputItem) -> dict[str, Any]:
    """The row fields that say which input, and which content of it, a row describes."""
    return {"path": item.key, "size": item.size, "mtime_ns": item.mtime_ns}


def _remove_unlisted_outputs(out_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Remove the files in the output kinds' folders that no row names: what a run killed mid-batch wrote before
    its rows (complete files, or temporary ones of a write cut short). We hold the lock: nobody else is writing."""
    listed = {out_dir / name for row in rows for name in mf.outputs_of(row)}
    for kind in SAVE_KINDS:
        for path in (out_dir / f"{kind}s").rglob("*"):
            if path not in listed and (path.is_file() or path.is_symlink()):
                path.unlink()


def _previous_rows(out_dir: Path) -> list[dict[str, Any]]:
    rows = mf.read_rows(out_dir / mf.MANIFEST)
    for shard in mf.iter_shard_manifests(out_dir):
        rows += mf.read_rows(shard)
    return rows


def _run(model: nn.Module, todo: list[InputItem], preprocessing: Preprocessing, annotator: _Annotator,
         writer: mf.ManifestWriter, options: AnnotateOptions, result: RunSummary, show_progress: bool,
         should_stop: Callable[[], bool], hold_interrupts: Callable[[], None]) -> None:
    autocast_dtype = PRECISIONS[options.precision]
    if autocast_dtype is torch.float16 and model_device(model).type != "cuda":
        raise OptionValueError(f"{argument('precision', 'fp16')} needs a CUDA device; use bf16 or fp32 on the CPU")
    settings = annotator.settings
    reader = functools.partial(read_image, max_pixels=options.max_pixels)
    decoded = decoded_batches([item.path for item in todo], reader, preprocessing, batch_size=options.batch_size,
                              workers=options.workers, device=model_device(model))
    batches = explained_batches(
        model, decoded, settings, autocast_dtype=autocast_dtype,
        compare_with=[settings.for_method(options.compare_with)] if options.compare_with else [])
    pending: deque[list[Future]] = deque()
    progress = progress_bar(len(todo), "file", shown=options.progress and show_progress)

    def settle(futures: list[Future]) -> None:
        rows = [future.result() for future in futures]
        writer.append(rows)
        for row in rows:
            if row["status"] == "ok":
                result.ok += 1
                result.sights.append((row["path"], row["patch_pixels"], row["seen"]))
            else:
                result.failed += 1
                result.failures.append(row["error"])
        progress.update(len(rows))

    with ThreadPoolExecutor(max_workers=max(1, options.writer_threads), thread_name_prefix="vitroll-writer") as pool:
        try:
            for records in batches:
                if should_stop():  # another rank failed: it waits for this one at the merge
                    break
                pending.append([
                    _resolved(annotator.error_row(todo[record.index], record.message)) if isinstance(record, Failed)
                    else pool.submit(annotator.finish, todo[record.index], record) for record in records])
                while len(pending) > 1:  # keep one batch encoding while the next one computes
                    settle(pending[0])
                    pending.popleft()  # only now: a Ctrl-C while its rows are written leaves it to the finally
        except KeyboardInterrupt:
            result.interrupted = True
        finally:
            hold_interrupts()
            while pending:
                settle(pending[0])
                pending.popleft()
            progress.close()


def _resolved(row: dict[str, Any]) -> Future:
    future: Future = Future()
    future.set_result(row)
    return future


def _barrier(world_size: int) -> None:
    if world_size > 1:
        torch.distributed.barrier()


def _compact(out_dir: Path) -> list[dict[str, Any]]:
    """Fold manifest.jsonl and the rank shards into manifest.jsonl / .csv, the latest row per input, after removing
    what redone inputs left behind (in this order: a crash in between keeps the replaced rows that name the files);
    returns the compacted rows."""
    if not (out_dir / mf.MANIFEST).exists() and next(mf.iter_shard_manifests(out_dir), None) is None:
        return []  # a new folder: a run refused before its work (a DICOM input) leaves no empty manifest there
    rows = _previous_rows(out_dir)
    for output in mf.superseded_outputs(rows):
        (out_dir / output).unlink(missing_ok=True)
    final = mf.write_final(out_dir, rows)
    for shard in mf.iter_shard_manifests(out_dir):
        shard.unlink()
    return final


def _merge(out_dir: Path, settings: ExplainSettings, rank: int, world_size: int) -> Optional[BaseException]:
    """Rank 0 compacts the manifests once every rank has finished, removes the outputs without rows and writes the
    gallery of all rows (each row's colour legend: the colormap and normalisation it records, else ``settings``');
    returns its failure, which the other ranks must not wait for."""
    _barrier(world_size)
    failure = None
    if rank == 0:
        try:
            rows = _compact(out_dir)
            _remove_unlisted_outputs(out_dir, rows)  # a failed rank's batch whose rows could not be written
            write_gallery(out_dir, rows, settings)
            (out_dir / STOP_FLAG).unlink(missing_ok=True)
        except USER_ERRORS as error:
            failure = error
    _barrier(world_size)
    return failure


def _reduce(result: RunSummary, world_size: int) -> RunSummary:
    if world_size == 1:
        return result
    counts = torch.tensor([result.ok, result.failed, result.skipped, result.interrupted], dtype=torch.float64)
    torch.distributed.all_reduce(counts)
    result.ok, result.failed, result.skipped, interrupted = (int(c) for c in counts.tolist())
    result.interrupted = interrupted > 0  # every rank exits 130 when one was (another had done its share)
    failures: list[list[str]] = [[] for _ in range(world_size)]
    torch.distributed.all_gather_object(failures, result.failures)  # rank 0 listed only its own failures' reasons
    result.failures = sorted(reason for reasons in failures for reason in reasons)  # by path, as one process has them
    sights: list[list[tuple[str, float, float]]] = [[] for _ in range(world_size)]
    torch.distributed.all_gather_object(sights, result.sights)
    result.sights = sorted(sight for shard in sights for sight in shard)
    return result
