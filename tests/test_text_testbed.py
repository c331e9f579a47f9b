"""The text testbed: sentences with one planted key word and one group word, and the two shipped models."""

import numpy as np
import pytest
import torch

import vitroll
from vitroll.cli import main
from vitroll.errors import ModelLoadError
from vitroll.pipelines.evaluate_text import evaluate_text, text_sentences
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


def test_rollout_finds_the_key_word_of_the_keyword_model_and_the_group_word_of_the_shortcut_model():
    sentences = text_sentences(40)
    keyword, tokenizer = load_text_testbed("keyword")
    shortcut, _ = load_text_testbed("shortcut")
    clean = evaluate_text(keyword, tokenizer, sentences, ["rollout", "random"])
    biased = evaluate_text(shortcut, tokenizer, sentences, ["rollout"])
    clean_rollout = [row for row in clean if row["method"] == "rollout"]
    assert np.mean([row["pointing_game"] for row in clean_rollout]) >= 0.95
    assert np.mean([row["group_share"] for row in clean_rollout]) < 0.1
    assert np.mean([row["group_share"] for row in biased]) > 0.4
    random_rows = [row for row in clean if row["method"] == "random"]
    assert np.mean([row["pointing_game"] for row in random_rows]) < 0.4


def test_deletion_and_insertion_areas_equal_masking_word_by_word_by_hand():
    model, tokenizer = load_text_testbed("keyword")
    sentences = text_sentences(3, seed=8)
    rows = evaluate_text(model, tokenizer, sentences, ["rollout"])
    for row, drawn in zip(rows, sentences):
        batch = tokenizer(drawn.text, return_tensors="pt")
        scores = vitroll.rollout(model, batch["input_ids"], attention_mask=batch["attention_mask"])[0, 1:-1]
        order = np.argsort(-scores.numpy(), kind="stable")  # one token per word, after [CLS]

        def probability(kept_words: set[int]) -> float:
            ids = batch["input_ids"].clone()
            for word in range(len(drawn.words)):
                if word not in kept_words:
                    ids[0, word + 1] = tokenizer.mask_token_id
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=batch["attention_mask"]).logits
                return logits.softmax(-1)[0, row["predicted"]].item()

        everything = set(range(len(drawn.words)))
        deletion = [probability(everything - set(order[:k])) for k in range(len(order) + 1)]
        insertion = [probability(set(order[:k])) for k in range(len(order) + 1)]
        fractions = np.linspace(0, 1, len(order) + 1)
        assert row["deletion_auc"] == pytest.approx(np.trapezoid(deletion, fractions), abs=1e-6)
        assert row["insertion_auc"] == pytest.approx(np.trapezoid(insertion, fractions), abs=1e-6)
        mass = np.clip(scores.numpy().astype(np.float64), 0, None)
        assert row["key_share"] == pytest.approx(mass[drawn.key_position] / mass.sum(), abs=1e-6)
        assert row["pointing_game"] == float(order[0] == drawn.key_position)


def test_evaluate_command_scores_the_text_testbed(tmp_path, capsys):
    assert main(["evaluate", "--testbed-kind", "text", "--testbed", "6", "--methods", "rollout,random",
                 "--out", str(tmp_path)]) == 0
    table = (tmp_path / "summary.md").read_text()
    assert "6 key-word sentences, seed 3, model vitroll-text-keyword" in table
    assert "| rollout | 1.000 ± 0.000 |" in table and "| random |" in table
    assert (tmp_path / "per_input.csv").read_text().count("\n") == 1 + 2 * 6


@pytest.mark.parametrize("arguments, message", [
    (["some_folder"], "--testbed-kind text draws its inputs itself; give --testbed N, not a FOLDER"),
    (["--methods", "rollout,random", "--disagreement", "rollout,random"],
     "--disagreement compares maps of the shapes testbed or a folder"),
    (["--testbed", "4", "--crop-pct", "0.5", "--pretrained", "--steps", "8"],
     "--testbed-kind text does not use --pretrained, --crop-pct, --steps (only the shapes testbed and a FOLDER do)"),
    (["--disagree-below", "0"],
     "--testbed-kind text does not use --disagree-below (only the shapes testbed and a FOLDER do)"),
])
def test_evaluate_command_refuses_what_the_text_testbed_cannot_do(arguments, message, capsys):
    assert main(["evaluate", "--testbed-kind", "text", *arguments]) != 0
    assert capsys.readouterr().err.strip() == f"vitroll: error: {message}"
