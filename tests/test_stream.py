"""The one batch stream: per input, in input order, an Explained frame (its map equal to the method run on that
image alone, and to a float64 reference) or a Failed record with the reader's message; any number of frames per
input; the same records for 0 and 2 decoding workers."""

from __future__ import annotations

import copy
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from reference import reference_attention, reference_rollout
from vitroll.errors import ImageReadError, VitrollError
from vitroll.io import load_image
from vitroll.methods import METHODS
from vitroll.pipelines import stream
from vitroll.pipelines.explain import ExplainSettings
from vitroll.pipelines.stream import (
    Explained, Failed, Frame, decoded_batches, explain_stream, explained_batches, read_image,
)
from vitroll.preprocess import Preprocessing
from vitroll.testbed import load_testbed_model

ROLLOUT = ExplainSettings("rollout")


@pytest.fixture(scope="module")
def model():
    return load_testbed_model()


@pytest.fixture(scope="module")
def preprocessing(model):
    return Preprocessing.from_model(model)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> list[Path]:
    """Good images of three shapes between three unreadable files: empty, not an image, missing."""
    root = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(0)
    for name, (height, width) in {"wide.png": (48, 80), "tall.png": (90, 40), "square.png": (64, 64)}.items():
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(root / name)
    (root / "empty.png").write_bytes(b"")
    (root / "text.png").write_text("not a picture")
    names = ["wide.png", "empty.png", "tall.png", "text.png", "missing.png", "square.png"]
    return [root / name for name in names]


def float64_reference(model, tensor: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Rollout map (8, 8) and class probabilities of ONE preprocessed image (3, H, W), in float64."""
    grid_map = reference_rollout(reference_attention(model, tensor[None]), num_prefix=1, grid=(8, 8), class_token=True)
    with torch.no_grad():
        logits = copy.deepcopy(model).double()(tensor[None].double())[0]
    return grid_map, logits.softmax(-1).numpy()


def test_good_and_unreadable_files_come_back_in_input_order_with_maps_of_each_image_alone(model, preprocessing, files):
    attention = ROLLOUT.for_method("attention")
    records = list(explain_stream(model, files, read_image, preprocessing, ROLLOUT, compare_with=[attention],
                                  batch_size=2))
    assert [(type(r), r.index, r.item) for r in records] == [
        (Explained if path.name in ("wide.png", "tall.png", "square.png") else Failed, index, path)
        for index, path in enumerate(files)]
    for record in records:
        if isinstance(record, Failed):
            with pytest.raises(ImageReadError) as error:
                load_image(record.item)
            assert record.message == str(error.value)
            continue
        image = load_image(record.item)
        tensor, geometry = preprocessing(image)
        np.testing.assert_array_equal(record.image, np.asarray(image))
        assert record.geometry == geometry and record.grid_map.shape == (8, 8)
        alone = METHODS["rollout"](model, tensor[None])
        np.testing.assert_allclose(record.grid_map, alone.maps[0].numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(record.probabilities, alone.logits[0].softmax(-1).numpy(), atol=1e-6, rtol=0)
        expected_map, expected_probabilities = float64_reference(model, tensor)
        np.testing.assert_allclose(record.grid_map, expected_map, atol=1e-5, rtol=0)
        np.testing.assert_allclose(record.probabilities, expected_probabilities, atol=1e-5, rtol=0)
        (compared,) = record.compared_maps
        np.testing.assert_allclose(compared, METHODS["attention"](model, tensor[None]).maps[0].numpy(), atol=1e-6,
                                   rtol=0)
    maps = [r.grid_map for r in records if isinstance(r, Explained)]
    assert not np.allclose(maps[0], maps[1]), "different images must give different maps"


def striped_frames(item: tuple[str, int]) -> list[Frame]:
    """A multi-frame reader: ``(name, n)`` → n frames of different sizes, each numbered in its ``info``; ``n`` < 0
    is an unreadable input, and a name ``crash`` a reader bug."""
    name, count = item
    if name == "crash":
        raise RuntimeError("decoder bug")
    if count < 0:
        raise VitrollError(f"{name}: unreadable on purpose")
    rng = np.random.default_rng(len(name) * 10 + count)
    return [Frame(rng.integers(0, 255, (40 + 8 * k, 70 - 6 * k, 3), dtype=np.uint8), info=(name, k))
            for k in range(count)]


MULTI = [("one", 1), ("bad", -1), ("three", 3), ("none", 0), ("two", 2), ("crash", 1), ("four", 4)]


def test_a_multi_frame_reader_gives_every_frame_in_order_in_batches_of_at_most_batch_size(model, preprocessing):
    decoded = decoded_batches(MULTI, striped_frames, preprocessing, batch_size=3)
    batches = list(explained_batches(model, decoded, ROLLOUT))
    records = [record for batch in batches for record in batch]
    described = [(r.index, r.info) if isinstance(r, Explained) else (r.index, r.message) for r in records]
    assert described == [
        (0, ("one", 0)), (1, "bad: unreadable on purpose"), (2, ("three", 0)), (2, ("three", 1)), (2, ("three", 2)),
        (3, "('none', 0): no image in it"), (4, ("two", 0)), (4, ("two", 1)),
        (5, "('crash', 1): cannot be processed (decoder bug)"),
        (6, ("four", 0)), (6, ("four", 1)), (6, ("four", 2)), (6, ("four", 3)),
    ]
    assert all(sum(isinstance(r, Explained) for r in batch) <= 3 for batch in batches)
    assert sum(isinstance(r, Explained) for r in records) == 1 + 3 + 2 + 4
    for record in records:
        if isinstance(record, Explained):
            name, k = record.info
            image = striped_frames(MULTI[record.index])[k].image
            np.testing.assert_array_equal(record.image, image)
            tensor, geometry = preprocessing(Image.fromarray(image))
            assert record.geometry == geometry
            np.testing.assert_allclose(record.grid_map, METHODS["rollout"](model, tensor[None]).maps[0].numpy(),
                                       atol=1e-6, rtol=0)


def _fields(record: "Explained | Failed") -> tuple:
    if isinstance(record, Failed):
        return ("failed", record.index, record.item, record.message)
    return ("explained", record.index, record.item, record.info, record.geometry, record.image.tobytes(),
            record.grid_map.tobytes(), record.probabilities.tobytes())


@pytest.mark.parametrize("source", ["files", "frames"])
def test_zero_and_two_workers_give_identical_records(model, preprocessing, files, source):
    inputs, reader = (files, read_image) if source == "files" else (MULTI, striped_frames)
    runs = [[_fields(r) for r in explain_stream(model, inputs, reader, preprocessing, ROLLOUT, batch_size=2,
                                                workers=workers)]
            for workers in (0, 2)]
    assert runs[0] == runs[1]
    assert len(runs[0]) == (len(files) if source == "files" else 13)


def tensors_pickled(batch: object) -> int:
    """How many tensors pickling ``batch`` sends: each is a file descriptor of its own on its way from a worker."""
    sent = 0

    class Counting(pickle.Pickler):
        def persistent_id(self, obj: object) -> "int | None":
            nonlocal sent
            if not isinstance(obj, torch.Tensor):
                return None
            sent += 1
            return sent

    Counting(io.BytesIO()).dump(batch)
    return sent


def collated_tensors_pickled(inputs: list) -> int:
    return tensors_pickled(stream._collate(inputs))


def test_a_worker_sends_a_batch_as_two_tensors_not_two_per_image(preprocessing, files):
    """Each tensor costs the main thread system calls that release the GIL, which it must win back from busy writer
    threads: one per image made annotate's main thread wait longer than a GPU's model did. The batch had sent every
    image as shown, every preprocessed frame and the stacked frames: 7 tensors for 3 images."""
    from torch.utils.data import DataLoader

    good = [files[0], files[2], files[5]]  # wide, tall, square
    dataset = stream.DecodedInputs(good, read_image, preprocessing)
    loader = DataLoader(dataset, batch_size=3, collate_fn=collated_tensors_pickled, num_workers=1)
    assert list(loader) == [2]
    (batch,) = decoded_batches(good, read_image, preprocessing, batch_size=3, workers=1)
    for record, path in zip(batch.records, good):
        np.testing.assert_array_equal(record.image, np.asarray(load_image(path)))


def test_a_file_that_cannot_be_opened_is_an_error_that_says_so_not_corrupt_data(tmp_path, monkeypatch):
    from vitroll.io import images

    path = tmp_path / "locked.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)

    def refused(file, *args, **kwargs):  # what a file without read permission gives a user who is not root
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(images.Image, "open", refused)
    with pytest.raises(ImageReadError) as raised:
        read_image(path)
    assert str(raised.value) == f"{path}: cannot be opened (Permission denied)"  # was 'corrupt or truncated image data'
