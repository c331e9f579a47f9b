"""The captioning testbed: captions naming both shapes of a two-shape image in reading order, and the shipped
VisionEncoderDecoderModel trained to write them."""

import numpy as np
import pytest
import torch

from vitroll.models import SHIPPED_TRANSFORMERS
from vitroll.testbed.captioner_model import FOLDER, VOCABULARY, build_caption_tokenizer, load_caption_model
from vitroll.testbed.captions import (
    CAPTION_WORDS, caption_for, shape_word_positions, shape_word_targets, target_order,
)
from vitroll.testbed.shape_pairs import sample, samples
from vitroll.testbed.shapes import CLASSES
from vitroll.testbed.training import to_tensor

MIN_EXACT = 0.90
"""Share of exact greedy captions the shipped model must get on 64 held-out images: its measured held-out
accuracy (98.0 % on 1000 images, MODEL_CARD.md) less a margin for the small sample."""


def test_captions_are_deterministic_per_seed_and_index():
    first = [caption_for(drawn) for drawn in samples(3, 50)]
    assert first == [caption_for(drawn) for drawn in samples(3, 50)]
    assert caption_for(sample(3, 7)) == first[7]
    assert len(set(first)) > 10  # 4 × 3 ordered shape pairs × 2 layouts


def test_captions_use_only_caption_words_and_one_token_each():
    tokenizer = build_caption_tokenizer()
    for drawn in samples(4, 100):
        words = caption_for(drawn).split()
        assert set(words) <= set(CAPTION_WORDS)
        ids = tokenizer(caption_for(drawn)).input_ids
        assert ids == [VOCABULARY.index(token) for token in ("[CLS]", *words, "[SEP]")]


def test_the_first_shape_word_names_the_left_or_top_mask():
    seen = set()
    for drawn in samples(5, 200):
        text = caption_for(drawn)
        words = text.split()
        positions = shape_word_positions(text)
        assert sorted(positions.values()) == [0, 1] and all(words[index] in CLASSES for index in positions)
        targets = shape_word_targets(drawn)
        assert sorted(targets.values()) == [0, 1]
        first, second = (np.argwhere(drawn.masks[target]).mean(axis=0) for target in target_order(drawn))
        axis = 1 if "left" in words else 0  # columns for left/right, rows for top/bottom
        assert first[axis] < second[axis]
        for index, target in targets.items():
            assert words[index] == CLASSES[drawn.labels[target]]
        # the masks' halves: the first-named shape lies wholly before the middle, the other wholly after it
        size = drawn.image.shape[0]
        first_mask, second_mask = (np.nonzero(drawn.masks[target])[axis] for target in target_order(drawn))
        assert first_mask.max() < size / 2 <= second_mask.min()
        seen.add("left" if "left" in words else "above")
    assert seen == {"left", "above"}


def test_the_shipped_captioner_is_registered_small_and_loads():
    from transformers import VisionEncoderDecoderModel

    assert SHIPPED_TRANSFORMERS["vitroll-caption-shapes"] == FOLDER
    assert (FOLDER / "model.safetensors").stat().st_size <= 5 * 2**20
    for name in ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
                 "MODEL_CARD.md", "training_curve.json"):
        assert (FOLDER / name).is_file(), name
    model = VisionEncoderDecoderModel.from_pretrained(FOLDER)
    assert model.config.decoder_start_token_id == VOCABULARY.index("[CLS]")
    assert model.generation_config.eos_token_id == VOCABULARY.index("[SEP]")


@pytest.fixture(scope="module")
def held_out():
    drawn = list(samples(3, 64))  # seed 3: the training script's held-out test split
    return to_tensor(np.stack([each.image for each in drawn])), [caption_for(each) for each in drawn]


def test_the_shipped_captioner_names_the_shapes_of_held_out_images(held_out):
    images, truths = held_out
    model, tokenizer = load_caption_model()
    with torch.no_grad():
        generated = tokenizer.batch_decode(model.generate(pixel_values=images, max_new_tokens=8),
                                           skip_special_tokens=True)
    exact = np.mean([" ".join(g.split()) == t for g, t in zip(generated, truths)])
    assert exact >= MIN_EXACT, (exact, list(zip(generated, truths))[:5])
