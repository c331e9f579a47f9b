"""What ``vitroll annotate``'s main thread pays to take a decoded batch from a loader worker while the writer
threads render, and what the manifest statistics and the manifest's append cost, old vs new side by side in one run.

    python scripts/bench_annotate.py                          # 224 px, batch 64, 0 and 2 writer threads, 5 rounds
    python scripts/bench_annotate.py --size 640 480 --batch-size 16 --writer-threads 0 4
    python scripts/bench_annotate.py --part manifest --rounds 20   # only the statistics and the manifest

Statistics (``--part manifest``): :func:`vitroll.maps.summary` of rollout-like maps of photos (a 14 × 14 grid onto
the image, NaN outside the centre crop), old (tests/reference_rendering.py's copy of it before its fast paths) then
new in each round, median CPU ms of the thread over the rounds; their numbers are checked to be equal. Manifest:
the ms an append of one batch's rows holds its caller, annotate's main thread (wall: it waits in fsync, which takes
no CPU), old (written, flushed and fsync'ed inline) then new (the fsync in the writer's thread, waited for by the
next append), ``--gap-ms`` apart as the model's time for a batch would space them. Run it with this checkout first
on the path (``PYTHONPATH=.``) when another copy of vitroll is installed.

On a GPU the model takes a few ms a batch, so the main thread's hand-over of each batch from the DataLoader matters:
every tensor in the batch crosses as a file descriptor of its own, in system calls that release the GIL, and while
the writer threads hold it the main thread waits up to the 5 ms switch interval to get it back, for each one. Old:
each image as shown, each preprocessed frame and the stacked frames (2 tensors an image, plus 1). New: the frames
stacked and the images packed end to end (:meth:`vitroll.pipelines.stream._LoadedBatch.packed`): 2 a batch.

The batches are decoded once beforehand, so the worker only collates and sends; the writer threads run annotate's
own per-image work (render, PNG, heatmap, statistics, files) on real maps of a one-layer vit_tiny, in a loop. Each
round times the hand-over of the same batches old then new; the median over all rounds' batches counts (wall clock:
the cost is waiting for the GIL, not CPU time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import timm
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from vitroll.maps import summary, to_original
from vitroll.pipelines import stream
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import AnnotateOptions, _Annotator
from vitroll.pipelines.inputs import InputItem, assign_output_names, discover
from vitroll.pipelines.manifest import ManifestWriter
from vitroll.preprocess import Preprocessing

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference_rendering import summary_before_fast_top_mass  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[1] / "sample_images"
Collate = Callable[[list], "stream._LoadedBatch"]


def make_photos(folder: Path, count: int, width: int, height: int) -> None:
    """``count`` JPEGs of ``width`` × ``height``: the sample photos resized, each shifted sideways a little."""
    photos = [Image.open(path).convert("RGB").resize((width, height), Image.BICUBIC)
              for path in sorted(SAMPLES.glob("*.jpg"))]
    for index in range(count):
        shifted = np.roll(np.asarray(photos[index % len(photos)]), 7 * index, axis=1)
        Image.fromarray(shifted).save(folder / f"img{index:04d}.jpg", quality=90)


def old_collate(inputs: list) -> "stream._LoadedBatch":
    """The collate before the batch was packed: every image and frame a tensor of its own, and the stack."""
    tensors = [tensor for prepared in inputs for tensor in prepared.tensors]
    return stream._LoadedBatch(inputs, torch.stack(tensors) if tensors else None)


class Ready(Dataset):
    """Inputs decoded and preprocessed beforehand: the worker only collates and sends."""

    def __init__(self, prepared: list) -> None:
        self.prepared = prepared

    def __len__(self) -> int:
        return len(self.prepared)

    def __getitem__(self, index: int) -> object:
        return self.prepared[index]


def hand_over_ms(prepared: list, collate: Collate, batch_size: int) -> list[float]:
    """Wall ms the main thread takes to receive each batch after the first, the worker's queue full beforehand."""
    loader = DataLoader(Ready(prepared), batch_size=batch_size, collate_fn=collate, num_workers=1,
                        prefetch_factor=len(prepared) // batch_size)
    batches = iter(loader)
    next(batches)
    time.sleep(1.0)  # the worker sends the rest into its queue
    times = []
    while True:
        started = time.perf_counter()
        loaded = next(batches, None)
        if loaded is None:
            return times
        loaded.unpacked()  # the views of a packed batch, as decoded_batches takes them (old: nothing to do)
        times.append(1e3 * (time.perf_counter() - started))


def writers(annotator: _Annotator, items: list[InputItem], records: list, count: int) -> Callable[[], None]:
    """Start ``count`` threads doing annotate's per-image work on ``records`` in a loop; returns their stop."""
    stop = threading.Event()

    def work() -> None:
        for index in range(10**9):
            if stop.is_set():
                return
            record = records[index % len(records)]
            annotator.finish(items[record.index], record)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()

    def stop_all() -> None:
        stop.set()
        for thread in threads:
            thread.join()
    return stop_all


class InlineFsyncWriter(ManifestWriter):
    """The manifest writer before its fsync moved to a thread of its own: written, flushed and fsync'ed inline."""

    def append(self, rows: list) -> None:
        text = "".join(json.dumps(row, default=str) + "\n" for row in rows)
        self._handle.write(text)
        self._handle.flush()
        os.fsync(self._handle.fileno())


def statistics_and_manifest(rounds: int, batch_size: int, gap_ms: float) -> None:
    """Print old vs new of the manifest statistics per map and of the manifest's append per batch."""
    print(f"manifest statistics per map, median CPU ms of the thread, {rounds} interleaved rounds")
    print("| map | old ms | new ms | old / new |")
    print("|---|---|---|---|")
    for width, height in ((640, 480), (1920, 1080), (6000, 4000)):
        geometry = Preprocessing(input_size=(224, 224), mean=(0.5,) * 3, std=(0.5,) * 3).geometry((height, width))
        saliency = to_original(np.random.default_rng(0).random((14, 14)).astype(np.float32) ** 4, geometry)
        if summary(saliency) != summary_before_fast_top_mass(saliency):
            raise SystemExit(f"the statistics of the {width}×{height} map changed")
        times: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(rounds):
            for name, function in (("old", summary_before_fast_top_mass), ("new", summary)):
                started = time.thread_time()  # this thread's: torch's idle workers would add theirs
                function(saliency)
                times[name].append(1e3 * (time.thread_time() - started))
        old, new = (statistics.median(times[name]) for name in ("old", "new"))
        print(f"| {width}×{height} | {old:.1f} | {new:.1f} | {old / new:.2f} |")
    row = {"path": "photos/img0001.jpg", "size": 123456, "mtime_ns": 1700000000000000000, "status": "ok", "error": "",
           "entropy": 0.912345, "top10_mass": 0.254321, "key_patches": [{"row": 3, "col": 4, "score": 0.0123,
                                                                         "box": [10, 20, 30, 40]}] * 5,
           "overlay": "overlays/photos/img0001.jpg.png", "settings_hash": "0123456789abcdef"}
    times = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(rounds):
            for name, kind in (("old", InlineFsyncWriter), ("new", ManifestWriter)):
                writer = kind(Path(scratch) / f"{name}.jsonl")
                for _ in range(3):
                    started = time.perf_counter()
                    writer.append([row] * batch_size)
                    times[name].append(1e3 * (time.perf_counter() - started))
                    time.sleep(gap_ms / 1e3)
                writer.close()
    old, new = (statistics.median(times[name]) for name in ("old", "new"))
    print(f"\nmanifest append of {batch_size} rows, {gap_ms:g} ms apart: median wall ms the caller waits, "
          f"{3 * rounds} appends each")
    print(f"| old ms | new ms | old / new |\n|---|---|---|\n| {old:.2f} | {new:.2f} | {old / new:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, nargs=2, default=(224, 224), metavar=("WIDTH", "HEIGHT"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=4, help="batches handed over per round, after the first")
    parser.add_argument("--writer-threads", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--part", choices=("handover", "manifest", "all"), default="all")
    parser.add_argument("--gap-ms", type=float, default=50.0, help="time between manifest appends (the model's)")
    args = parser.parse_args()
    if args.part != "handover":
        statistics_and_manifest(args.rounds, args.batch_size, args.gap_ms)
        if args.part == "manifest":
            return
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", depth=1).eval()
    preprocessing = Preprocessing.from_model(model)
    settings = ExplainSettings()
    count = args.batch_size * (args.batches + 1)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "in"
        folder.mkdir()
        make_photos(folder, count, *args.size)
        items = discover(folder)
        names = assign_output_names((item.key for item in items), {})
        items = [dataclasses.replace(item, assigned_name=names[item.key]) for item in items]
        paths = [item.path for item in items]
        decoded = stream.DecodedInputs(paths, stream.read_image, preprocessing)
        prepared = [decoded[index] for index in range(count)]
        records = [record for batch in stream.explained_batches(
            model, stream.decoded_batches(paths[:args.batch_size], stream.read_image, preprocessing,
                                          batch_size=args.batch_size), settings) for record in batch]
        annotator = _Annotator(Path(scratch) / "out", settings, AnnotateOptions(), {"model": "bench"}, None)
        print(f"{args.batches} batches of {args.batch_size} JPEGs of {args.size[0]}×{args.size[1]} handed over by a "
              f"worker, median over {args.rounds} interleaved rounds (ms per batch, wall)")
        print("| writer threads | old ms | new ms | old / new |")
        print("|---|---|---|---|")
        for threads in args.writer_threads:
            stop = writers(annotator, items, records, threads)
            try:
                times: dict[str, list[float]] = {"old": [], "new": []}
                for _ in range(args.rounds):
                    for name, collate in (("old", old_collate), ("new", stream._collate)):
                        times[name] += hand_over_ms(prepared, collate, args.batch_size)
            finally:
                stop()
            old, new = (statistics.median(times[name]) for name in ("old", "new"))
            print(f"| {threads} | {old:.1f} | {new:.1f} | {old / new:.2f} |")


if __name__ == "__main__":
    main()
