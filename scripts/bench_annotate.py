"""What ``vitroll annotate``'s main thread pays to take a decoded batch from a loader worker while the writer
threads render, old vs new side by side in one run.

    python scripts/bench_annotate.py                          # 224 px, batch 64, 0 and 2 writer threads, 5 rounds
    python scripts/bench_annotate.py --size 640 480 --batch-size 16 --writer-threads 0 4

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
import statistics
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

from vitroll.pipelines import stream
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.folder import AnnotateOptions, _Annotator
from vitroll.pipelines.inputs import InputItem, assign_output_names, discover
from vitroll.preprocess import Preprocessing

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, nargs=2, default=(224, 224), metavar=("WIDTH", "HEIGHT"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=4, help="batches handed over per round, after the first")
    parser.add_argument("--writer-threads", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
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
