"""The one batch loop of every pipeline: decode → preprocess → batch → device → method → one record per image.

    inputs ──► DecodedInputs: reader + preprocessing, one input per index (in DataLoader workers, Ctrl-C ignored)
           ──► collate: the frames of ``batch_size`` inputs stacked, failures kept beside them (pinned for CUDA)
           ──► decoded_batches: on the device, cut into model batches of at most ``batch_size`` frames
           ──► explained_batches: ``explain_batch`` (under autocast) → a list of Explained | Failed per batch
               (a frame whose map holds NaN or inf fails: drawn, it would be the bare image)
    explain_stream = all of it, one record per frame

A *reader* turns one input into its decoded frames — an image file is one frame (:func:`read_image`), a DICOM file
one per frame with what the audit knows about each (:mod:`vitroll.audit.pipeline`) — and raises
:class:`~vitroll.errors.VitrollError` for an unreadable input. Any failure, the reader's or the preprocessing's,
becomes a :class:`Failed` record in its place in the batch: it never stops the batch or the run.

The dataset is map-style, one index per input: the DataLoader hands out indices in order and returns their
results in order whichever worker decoded them, so the records come in input order and every batch holds the same
inputs for 0 or K workers (the same maps, bit for bit). An iterable dataset would have to split the inputs among
workers itself and its batches would depend on the worker count. The price: a DataLoader batch holds ``batch_size``
*inputs* with all their frames, so a batch of multi-frame files is cut into model batches in the main process
(views of the stacked tensor, no copy).
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Iterable, Iterator, Optional, Protocol, Sequence, Union

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate, get_worker_info

from vitroll.errors import VitrollError
from vitroll.io.images import DEFAULT_MAX_PIXELS, load_image_with_display
from vitroll.methods.base import model_device
from vitroll.methods.map_checks import non_finite_problems
from vitroll.pipelines.explain import BatchResult, ExplainSettings, explain_batch
from vitroll.preprocess import CropGeometry, Preprocessing
from vitroll.wording import on_the_command_line, set_command_line_wording


@dataclass(frozen=True)
class Frame:
    """One decoded image of an input, with what its reader knows about it."""

    image: np.ndarray
    """(H, W, 3) uint8 RGB as stored: preprocessed for the model, and what its map is drawn on unless ``display``."""
    info: Any = None
    """Per-frame metadata carried to the record unchanged (the audit's row and burned-in text mask); picklable."""
    display: Optional[np.ndarray] = None
    """(H, W, 3) uint8 sRGB picture to draw the map on when it differs from ``image`` (a file that embeds a wider
    colour profile, :func:`~vitroll.io.images.load_image_with_display`); None: ``image``."""

    @property
    def shown(self) -> np.ndarray:
        """(H, W, 3) uint8: what the map is drawn on, ``display`` when given, else ``image``."""
        return self.image if self.display is None else self.display


class Reader(Protocol):
    """Decodes one input into its frames (at least one), or raises :class:`~vitroll.errors.VitrollError` with a
    one-line reason. Runs in DataLoader workers when there are any, so it must be picklable (a module-level
    function, or a ``functools.partial`` of one)."""

    def __call__(self, item: Any) -> Sequence[Frame]: ...


def read_image(path: "str | os.PathLike[str]", max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> list[Frame]:
    """An image file as one frame: :func:`~vitroll.io.images.load_image_with_display` (EXIF orientation, any mode to
    RGB; drawn in sRGB when the file embeds another colour profile; refused over ``max_pixels``). A pipeline with
    another limit reads through ``functools.partial(read_image, max_pixels=…)``, which workers can unpickle."""
    image, display = load_image_with_display(path, max_pixels=max_pixels)
    return [Frame(np.asarray(image), display=None if display is None else np.asarray(display))]


@dataclass(frozen=True)
class Failed:
    """An input that gave no image, or a frame whose map holds NaN or inf (which would be drawn as no map at all)."""

    index: int
    """Position of the input in the stream's inputs."""
    item: Any
    """The input as given (a path, or whatever the reader takes)."""
    message: str
    """One line: the reader's error, ``ITEM: cannot be processed (…)`` for an unexpected one, or
    ``ITEM: rollout's map holds no finite value: …`` naming the cause as far as the input tells."""


@dataclass(frozen=True)
class Decoded:
    """A preprocessed frame in a batch, before the model."""

    index: int
    item: Any
    image: np.ndarray
    """(H0, W0, 3) uint8 RGB, the original frame as shown (:attr:`Frame.shown`)."""
    geometry: CropGeometry
    info: Any


@dataclass(frozen=True)
class Explained:
    """A frame with its map and prediction."""

    index: int
    """Position of the input in the stream's inputs (the frames of a multi-frame input share it)."""
    item: Any
    """The input as given."""
    image: np.ndarray
    """(H0, W0, 3) uint8 RGB, the original frame as shown (:attr:`Frame.shown`): what its map is drawn on."""
    grid_map: np.ndarray
    """(h, w) float32 on the model's patch grid; (T, h, w), one per text, for an image–text model."""
    geometry: CropGeometry
    """How the frame was resized and cropped: puts ``grid_map`` back on ``image``."""
    probabilities: Optional[np.ndarray]
    """(num_classes,) float32 softmax of the logits, or None for a model without a classification head (and for an
    image–text model)."""
    info: Any
    compared_maps: tuple[np.ndarray, ...] = ()
    """(h, w) maps of the ``compare_with`` methods, in their order."""
    text_logits: Optional[np.ndarray] = None
    """(T,) float32 image–text logits ``S[i, t]`` of an image–text model with its texts bound, else None."""


@dataclass(frozen=True)
class _Prepared:
    """One input as it leaves a worker: its frames preprocessed, or why it has none."""

    index: int
    tensors: tuple[torch.Tensor, ...] = ()
    geometries: tuple[CropGeometry, ...] = ()
    images: tuple[torch.Tensor, ...] = ()
    """Original frames as shown, as tensors: sent to the main process through shared memory, not pickled."""
    infos: tuple[Any, ...] = ()
    error: Optional[str] = None
    packed_shapes: tuple[tuple[int, ...], ...] = ()
    """The shapes of ``images`` while they travel packed in :attr:`_LoadedBatch.shown` (``images`` and ``tensors``
    then empty: the frames travel stacked)."""


class DecodedInputs(Dataset):
    """Read and preprocess one input per index (see the module docstring for why map-style)."""

    def __init__(self, items: Sequence[Any], reader: Reader, preprocessing: Preprocessing) -> None:
        self.items, self.reader, self.preprocessing = list(items), reader, preprocessing

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> _Prepared:
        item = self.items[index]
        try:
            frames = list(self.reader(item))
            if not frames:
                raise VitrollError(f"{item}: no image in it")
            prepared = [self.preprocessing(Image.fromarray(frame.image)) for frame in frames]
        except VitrollError as error:
            return _Prepared(index, error=str(error))
        except Exception as error:  # noqa: BLE001 — a worker must report, not die, on any one input
            return _Prepared(index, error=f"{item}: cannot be processed ({error})")
        return _Prepared(index, tensors=tuple(tensor for tensor, _ in prepared),
                         geometries=tuple(geometry for _, geometry in prepared),
                         images=tuple(torch.from_numpy(np.require(frame.shown, requirements="CW")) for frame in frames),
                         infos=tuple(frame.info for frame in frames))


@dataclass
class _LoadedBatch:
    """What the DataLoader delivers: ``batch_size`` inputs, all their frames stacked in one tensor."""

    inputs: list[_Prepared]
    tensor: Optional[torch.Tensor]
    """(F, 3, H, W) for the F frames of the batch, or None when every input failed."""
    shown: Optional[torch.Tensor] = None
    """uint8, the inputs' images as shown end to end, when a worker packed them (:meth:`packed`)."""

    def pin_memory(self) -> "_LoadedBatch":
        if self.tensor is not None:
            self.tensor = self.tensor.pin_memory()
        return self

    def packed(self) -> "_LoadedBatch":
        """This batch as a worker sends it: every tensor crosses to the main process as a file descriptor of its
        own, taken there in a few system calls that each release the GIL, which the main thread must then win back
        from the busy writer threads (up to the 5 ms switch interval each time). So the frames go only stacked (not
        also one by one), and the images as shown are copied end to end into one tensor: two descriptors a batch,
        not two per image."""
        images = [image.reshape(-1) for prepared in self.inputs for image in prepared.images]
        inputs = [replace(prepared, tensors=(), images=(),
                          packed_shapes=tuple(tuple(image.shape) for image in prepared.images))
                  for prepared in self.inputs]
        return _LoadedBatch(inputs, self.tensor, _concatenated_in_shared_memory(images) if images else None)

    def unpacked(self) -> list[_Prepared]:
        """The inputs with their images as shown again, views of :attr:`shown` (no copy)."""
        if self.shown is None:
            return self.inputs
        sizes = [math.prod(shape) for prepared in self.inputs for shape in prepared.packed_shapes]
        views = iter(self.shown.split(sizes))
        return [replace(prepared, images=tuple(next(views).view(shape) for shape in prepared.packed_shapes),
                        packed_shapes=()) for prepared in self.inputs]


def _concatenated_in_shared_memory(parts: list[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts)`` (1-D tensors) written straight into shared memory, as the DataLoader's own collate
    stacks in a worker: a tensor sent to another process is otherwise copied there first."""
    storage = parts[0]._typed_storage()._new_shared(sum(part.numel() for part in parts), device=parts[0].device)
    return torch.cat(parts, out=parts[0].new(storage))


def _collate(inputs: list[_Prepared]) -> _LoadedBatch:
    tensors = [tensor for prepared in inputs for tensor in prepared.tensors]
    if get_worker_info() is None:  # in this process: nothing to send, and packing would be a copy for nothing
        return _LoadedBatch(inputs, torch.stack(tensors) if tensors else None)
    return _LoadedBatch(inputs, default_collate(tensors) if tensors else None).packed()  # stacked in shared memory


def start_worker(command_line_wording: bool, _worker_id: int) -> None:
    """DataLoader ``worker_init_fn`` (bound to :func:`~vitroll.wording.on_the_command_line` of the process that
    starts it): Ctrl-C is the main process's to handle (it finishes the batch in flight); a worker killed by it would
    turn a clean stop into a crash. A worker started by forkserver or spawn words its errors as Python's until told
    (an image over the limit named max_pixels=… in ``vitroll audit --workers 2``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if command_line_wording:
        set_command_line_wording()


@dataclass
class DecodedBatch:
    """One model batch: its frames and the failures among them, in input order."""

    records: list[Union[Decoded, Failed]]
    tensor: Optional[torch.Tensor]
    """(B, C, H, W) on the device for the B :class:`Decoded` records, in order; None when there are none."""

    @property
    def decoded(self) -> list[Decoded]:
        return [record for record in self.records if isinstance(record, Decoded)]


def decoded_batches(
    inputs: Sequence[Any],
    reader: Reader,
    preprocessing: Preprocessing,
    *,
    batch_size: int,
    workers: int = 0,
    device: "torch.device | str" = "cpu",
    multiprocessing_context: Optional[str] = None,
) -> Iterator[DecodedBatch]:
    """Read, preprocess and batch ``inputs`` by ``workers`` processes (0: in this one), onto ``device``.

    Each batch holds at most ``batch_size`` frames; an input's failure is a :class:`Failed` record in its place.
    On CUDA the batches are pinned and copied without blocking. ``multiprocessing_context`` (e.g.
    ``"forkserver"``) starts the workers some other way than the platform's default.
    """
    items = list(inputs)
    device = torch.device(device)
    loader = DataLoader(
        DecodedInputs(items, reader, preprocessing), batch_size=batch_size, shuffle=False, collate_fn=_collate,
        num_workers=workers, pin_memory=device.type == "cuda",
        worker_init_fn=partial(start_worker, on_the_command_line()),
        prefetch_factor=4 if workers else None, multiprocessing_context=multiprocessing_context if workers else None,
    )
    for loaded in loader:
        tensor = None if loaded.tensor is None else loaded.tensor.to(device, non_blocking=True)
        yield from _model_batches(items, loaded.unpacked(), tensor, batch_size)


def _model_batches(items: list[Any], inputs: list[_Prepared], tensor: Optional[torch.Tensor],
                   batch_size: int) -> Iterator[DecodedBatch]:
    """Cut a DataLoader batch into batches of at most ``batch_size`` frames; a failure goes with the frames before
    it."""
    records: list[Union[Decoded, Failed]] = []
    start = end = 0  # the current batch's frames in ``tensor``
    for prepared in inputs:
        item = items[prepared.index]
        if prepared.error is not None:
            records.append(Failed(prepared.index, item, prepared.error))
        for image, geometry, info in zip(prepared.images, prepared.geometries, prepared.infos):
            if end - start == batch_size:
                yield DecodedBatch(records, tensor[start:end])
                records, start = [], end
            records.append(Decoded(prepared.index, item, image.numpy(), geometry, info))
            end += 1
    if records:
        yield DecodedBatch(records, tensor[start:end] if end > start else None)


def explained_batches(
    model: nn.Module,
    batches: Iterable[DecodedBatch],
    settings: ExplainSettings,
    *,
    compare_with: Sequence[ExplainSettings] = (),
    autocast_dtype: Optional[torch.dtype] = None,
) -> Iterator[list[Union[Explained, Failed]]]:
    """Run ``settings.method`` (and the ``compare_with`` methods) on each batch of :func:`decoded_batches`: one list
    of records per batch, for a consumer that settles its work batch by batch; :func:`explain_stream` flattens."""
    for batch in batches:
        if batch.tensor is None:
            yield list(batch.records)
            continue
        methods = (settings, *compare_with)
        main, *others = (_explain(model, batch.tensor, method, autocast_dtype) for method in methods)
        problems = non_finite_problems(batch.tensor, [(method.method, torch.from_numpy(result.grid_maps))
                                                      for method, result in zip(methods, (main, *others))])
        slots = itertools.count()
        yield [record if isinstance(record, Failed) else _explained(record, next(slots), main, others, problems)
               for record in batch.records]


def explain_stream(
    model: nn.Module,
    inputs: Sequence[Any],
    reader: Reader,
    preprocessing: Preprocessing,
    settings: ExplainSettings,
    *,
    compare_with: Sequence[ExplainSettings] = (),
    batch_size: int,
    workers: int = 0,
    device: "torch.device | str | None" = None,
    autocast_dtype: Optional[torch.dtype] = None,
    multiprocessing_context: Optional[str] = None,
) -> Iterator[Union[Explained, Failed]]:
    """Explain every frame of ``inputs`` with ``settings.method``, in batches, in input order.

    Parameters
    ----------
    inputs, reader
        What to explain and how to decode one of them (:func:`read_image` for image files).
    preprocessing
        The model's input transform; its geometry comes back with every frame.
    compare_with
        Further methods run on the same batches; their maps are :attr:`Explained.compared_maps`.
    batch_size, workers, multiprocessing_context
        Frames per model batch (halved by the method registry while a batch runs out of memory); decoding
        processes (0: in this one) and how they start (:func:`decoded_batches`).
    device, autocast_dtype
        Where the batches go (default: the model's device) and the ``torch.autocast`` dtype there (None: none;
        maps stay float32).

    Yields
    ------
    Explained
        Per decoded frame: the input, original image, grid map (h, w), geometry and probabilities.
    Failed
        Per input that gave no image, and per frame whose map (or a ``compare_with`` map) holds NaN or inf: the
        input and a one-line message.
    """
    batches = decoded_batches(inputs, reader, preprocessing, batch_size=batch_size, workers=workers,
                              device=model_device(model) if device is None else device,
                              multiprocessing_context=multiprocessing_context)
    for records in explained_batches(model, batches, settings, compare_with=compare_with,
                                     autocast_dtype=autocast_dtype):
        yield from records


def _explain(model: nn.Module, tensor: torch.Tensor, settings: ExplainSettings,
             autocast_dtype: Optional[torch.dtype]) -> BatchResult:
    if autocast_dtype is None:
        return explain_batch(model, tensor, settings)
    with torch.autocast(device_type=tensor.device.type, dtype=autocast_dtype):
        return explain_batch(model, tensor, settings)


def _explained(record: Decoded, slot: int, main: BatchResult, others: list[BatchResult],
               problems: dict[int, str]) -> Union[Explained, Failed]:
    if slot in problems:
        return Failed(record.index, record.item, f"{record.item}: {problems[slot]}")
    probabilities = None if main.probabilities is None else main.probabilities[slot]
    text_logits = None if main.text_logits is None else main.text_logits[slot]
    return Explained(record.index, record.item, record.image, main.grid_maps[slot], record.geometry, probabilities,
                     record.info, tuple(other.grid_maps[slot] for other in others), text_logits)
