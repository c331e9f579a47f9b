"""The text testbed: sentences with one planted key word and one group word, and the two shipped models."""

import numpy as np
import pytest
import torch

from vitroll.errors import ModelLoadError
from vitroll.testbed.text import GROUP_WORDS, KEY_WORDS, KEYWORD, SHORTCUT, VOCABULARY, sample, samples
from vitroll.testbed.text_model import build_text_tokenizer, load_text_testbed

pytest.importorskip("transformers")


def _class_of_key_word(word: str) -> int:
    return next(label for label, words in enumerate(KEY_WORDS) if word in words)


@pytest.mark.parametrize("config", [KEYWORD, SHORTCUT])
def test_every_sentence_has_one_key_word_and_one_group_word_where_it_says(config):
    for drawn in samples(5, 300, config):
        assert config.length[0] <= len(drawn.words) <= config.length[1]
        keys = [i for i, w in enumerate(drawn.words) if any(w in words for words in KEY_WORDS)]
        groups = [i for i, w in enumerate(drawn.words) if w in GROUP_WORDS]
        assert keys == [drawn.key_position] and groups == [drawn.group_position]


def test_sentences_regenerate_alone_and_differ_between_seeds():
    assert sample(7, 123, SHORTCUT) == list(samples(7, 1, SHORTCUT, start=123))[0]
    assert [s.text for s in samples(1, 50)] != [s.text for s in samples(2, 50)]


def test_keyword_data_key_word_decides_and_group_word_is_noise():
    drawn = list(samples(11, 4000, KEYWORD))
    assert all(_class_of_key_word(s.words[s.key_position]) == s.label for s in drawn)
    same_group = np.mean([GROUP_WORDS.index(s.words[s.group_position]) == s.label for s in drawn])
    assert abs(same_group - 0.5) < 0.03


def test_shortcut_data_group_word_always_names_the_label_and_key_word_mostly():
    drawn = list(samples(11, 4000, SHORTCUT))
    assert all(GROUP_WORDS.index(s.words[s.group_position]) == s.label for s in drawn)
    agreement = np.mean([_class_of_key_word(s.words[s.key_position]) == s.label for s in drawn])
    assert abs(agreement - SHORTCUT.key_word_agreement) < 0.03


def test_tokenizer_gives_one_token_per_word():
    tokenizer = build_text_tokenizer()
    drawn = sample(3, 0)
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(drawn.text)["input_ids"])
    assert tokens == ["[CLS]", *drawn.words, "[SEP]"]
    assert "[UNK]" not in tokens and len(set(VOCABULARY)) == len(VOCABULARY)


def _accuracy(model, tokenizer, config) -> float:
    drawn = list(samples(3, 500, config))
    batch = tokenizer([s.text for s in drawn], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1)
    return (predicted == torch.tensor([s.label for s in drawn])).float().mean().item()


def test_shipped_models_learned_what_their_data_teaches():
    keyword, tokenizer = load_text_testbed("keyword")
    shortcut, _ = load_text_testbed("shortcut")
    assert _accuracy(keyword, tokenizer, KEYWORD) == 1.0
    assert _accuracy(shortcut, tokenizer, SHORTCUT) == 1.0
    # on keyword data the group word is noise: the shortcut model is at chance there, which is its bias showing
    assert _accuracy(shortcut, tokenizer, KEYWORD) < 0.6
    assert keyword.config.id2label == {0: "negative", 1: "positive"}


def test_unknown_testbed_name_is_refused():
    with pytest.raises(ModelLoadError, match="no text testbed model 'sentiment'; there are: keyword, shortcut"):
        load_text_testbed("sentiment")
