"""Text transformers (BERT-style encoders, GPT-2) built from small configs: token scores (B, L) through the same verbs,
against float64 references computed by hand from the eager attentions of each text alone (no padding at all)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import vitroll  # noqa: E402
from reference import discard_rows, reference_flow, rownorm  # noqa: E402
from small_tokenizers import bpe_tokenizer, wordpiece_tokenizer  # noqa: E402
from vitroll.capture import AttentionRecorder  # noqa: E402
from vitroll.errors import InputTypeError, InputValueError, OptionValueError  # noqa: E402
from vitroll.io.text import TokenBatch  # noqa: E402
from vitroll.methods.base import model_logits  # noqa: E402
from vitroll.methods.text_batch import text_batch  # noqa: E402

SMALL = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             initializer_range=0.3)
IDS = [[2, 11, 12, 13, 14, 15, 3], [2, 21, 22, 3, 0, 0, 0], [2, 31, 32, 33, 34, 3, 0]]
MASK = [[1] * 7, [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0]]
PHOTO = str(Path(__file__).resolve().parents[1] / "sample_images" / "cat.jpg")
"""A readable image: the image commands tell missing ones before they load the model."""


def bert(num_labels: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(**SMALL, num_labels=num_labels, attn_implementation="sdpa")
    return transformers.BertForSequenceClassification(config).eval()


def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=2, n_positions=16,
                                     initializer_range=0.3, bos_token_id=1, eos_token_id=1,
                                     attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(config).eval()


def left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """IDS with their padding moved to the left (how batched generation pads a language model)."""
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    order = torch.argsort(mask, dim=-1, stable=True)
    return ids.gather(1, order), mask.gather(1, order)


def eager_alone(model: torch.nn.Module, ids: list[int], *, target: int | None = None, row: int = -1
                ) -> tuple[list[np.ndarray], list[np.ndarray] | None, torch.Tensor]:
    """ONE text, unpadded, through a float64 eager copy with ``output_attentions=True``: per layer (H, n, n), and with
    ``target`` the gradient of the explained score (class logit, or a language model's log-probability of the token
    at ``row``: the next one for GPT-2, the masked one for a masked language model)."""
    reference = copy.deepcopy(model).double()
    reference.config._attn_implementation = "eager"
    for module in reference.modules():
        if hasattr(module, "config"):
            module.config = reference.config
    with torch.set_grad_enabled(target is not None):
        output = reference(input_ids=torch.tensor([ids]), output_attentions=True)
        attentions = output.attentions
        scores = output.logits[0] if output.logits.ndim == 2 else output.logits[0, row].log_softmax(-1)
        gradients = None
        if target is not None:
            gradients = [g[0].numpy() for g in torch.autograd.grad(scores[target], attentions)]
    return [a[0].detach().numpy() for a in attentions], gradients, scores.detach()


def chain(layers: list[np.ndarray], row: int | None, attention_weight: float = 0.5) -> np.ndarray:
    """Full-matrix rollout of the head-fused ``layers`` (n, n) with α = ``attention_weight``; its row ``row`` (None:
    the mean row)."""
    n = layers[0].shape[-1]
    result = np.eye(n)
    for fused in layers:
        result = rownorm(attention_weight * fused + (1 - attention_weight) * np.eye(n)) @ result
    return result.mean(axis=0) if row is None else result[row]


def compare(scores: torch.Tensor, expected: list[np.ndarray], mask: torch.Tensor) -> None:
    """Real positions equal the references (in order), padded positions are exactly 0."""
    assert scores.shape == mask.shape and scores.dtype == torch.float32
    for b, reference in enumerate(expected):
        np.testing.assert_allclose(scores[b][mask[b].bool()].numpy(), reference, atol=1e-5)
    assert (scores[~mask.bool()] == 0).all()


def real_ids(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [row[keep.bool()].tolist() for row, keep in zip(ids, mask)]


@pytest.mark.parametrize("readout", ["class_token", "token_mean"])
def test_bert_rollout_equals_the_eager_reference_with_padding(readout):
    model = bert()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    scores = vitroll.rollout(model, ids, attention_mask=mask, readout=readout)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], 0 if readout == "class_token" else None)
                for text in IDS_REAL]
    compare(scores, expected, mask)


IDS_REAL = real_ids(torch.tensor(IDS), torch.tensor(MASK))


@pytest.mark.parametrize("padding", ["right", "left"])
def test_gpt2_rollout_reads_the_last_real_token_with_padding_on_either_side(padding):
    model = gpt2()
    ids, mask = (torch.tensor(IDS), torch.tensor(MASK)) if padding == "right" else left_padded()
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], len(text) - 1) for text in IDS_REAL]
    compare(scores, expected, mask)
    first_token_row = vitroll.rollout(model, ids, attention_mask=mask, position=0)
    assert torch.allclose(first_token_row[mask.bool()].reshape(-1)[:1], torch.ones(1))  # it sees only itself


def test_a_position_is_counted_among_the_real_tokens():
    model = gpt2()
    ids, mask = left_padded()
    scores = vitroll.rollout(model, ids, attention_mask=mask, position=[2, 1, -2])
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], row)
                for text, row in zip(IDS_REAL, [2, 1, len(IDS_REAL[2]) - 2])]
    compare(scores, expected, mask)


@pytest.mark.parametrize("build", [bert, gpt2])
def test_capture_leaves_the_logits_unchanged(build):
    model = build()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    batch = TokenBatch(ids, mask)
    with torch.no_grad():
        plain = model_logits(model, batch)
        with AttentionRecorder(model):
            recorded = model_logits(model, batch)
    assert torch.allclose(plain, recorded, atol=1e-5)
    assert model.config._attn_implementation == "sdpa"
    assert all(getattr(m, "config", model.config)._attn_implementation == "sdpa" for m in model.modules())


def test_the_language_model_score_is_the_next_token_log_probability_of_each_text_alone():
    model = gpt2()
    ids, mask = left_padded()
    with torch.no_grad():
        scores = model_logits(model, TokenBatch(ids, mask))
    for b, text in enumerate(IDS_REAL):
        np.testing.assert_allclose(scores[b].numpy(), eager_alone(model, text)[2].numpy(), atol=1e-5)


@pytest.mark.parametrize("build", [bert, gpt2])
def test_chefer_and_grad_rollout_equal_per_text_float64_autograd(build):
    model = build()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    chefer = vitroll.chefer(model, ids, attention_mask=mask, target_class=1)
    grad_rollout = vitroll.grad_rollout(model, ids, attention_mask=mask, target_class=1)
    expected_chefer, expected_grad_rollout = [], []
    for text in IDS_REAL:
        attentions, gradients, _ = eager_alone(model, text, target=1)
        n, row = len(text), (0 if build is bert else len(text) - 1)
        relevance = np.eye(n)
        for a, g in zip(attentions, gradients):
            relevance = relevance + np.maximum(a * g, 0).mean(axis=0) @ relevance
        expected_chefer.append(relevance[row])
        protected = 0 if build is bert else None
        fused = [discard_rows(np.maximum((a * g).mean(axis=0), 0), 0.9, protected)
                 for a, g in zip(attentions, gradients)]
        expected_grad_rollout.append(chain(fused, row))
    compare(chefer, expected_chefer, mask)
    compare(grad_rollout, expected_grad_rollout, mask)


def masked_language_model(tmp_path) -> tuple[torch.nn.Module, transformers.PreTrainedTokenizerFast]:
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**SMALL, attn_implementation="sdpa")).eval()
    tokenizer = wordpiece_tokenizer(tmp_path)
    vitroll.use_tokenizer(model, tokenizer)
    return model, tokenizer


def test_a_masked_language_model_is_explained_at_its_mask_by_the_masked_tokens_log_probability(tmp_path):
    model, tokenizer = masked_language_model(tmp_path)
    texts = ["the cat [MASK] on the mat", "a [MASK] ran", "[MASK] dog sat"]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    rows = [3, 2, 1]  # each text's mask, [CLS] counted
    assert [int(ids[b, row]) for b, row in enumerate(rows)] == [tokenizer.mask_token_id] * 3
    rollout = vitroll.rollout(model, ids, attention_mask=mask)
    chefer = vitroll.chefer(model, ids, attention_mask=mask, target_class=6)
    with torch.no_grad():
        log_probabilities = model_logits(model, TokenBatch(ids, mask))
    expected_rollout, expected_chefer = [], []
    for b, (text, row) in enumerate(zip(real_ids(ids, mask), rows)):
        attentions, gradients, scores = eager_alone(model, text, target=6, row=row)
        np.testing.assert_allclose(log_probabilities[b].numpy(), scores.numpy(), atol=1e-5)
        expected_rollout.append(chain([a.mean(axis=0) for a in attentions], row))
        relevance = np.eye(len(text))
        for a, g in zip(attentions, gradients):
            relevance = relevance + np.maximum(a * g, 0).mean(axis=0) @ relevance
        expected_chefer.append(relevance[row])
    compare(rollout, expected_rollout, mask)
    compare(chefer, expected_chefer, mask)
    assert vitroll.class_names(model)[:6] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"]
    # another token is explained when asked; a text without a mask says so
    compare(vitroll.rollout(model, ids, attention_mask=mask, position=0), [chain(
        [a.mean(axis=0) for a in eager_alone(model, text)[0]], 0) for text in real_ids(ids, mask)], mask)
    with pytest.raises(InputValueError, match=r"^no \[MASK\] in texts \[1\] of the batch: a masked language "
                                              r"model predicts the token at its first \[MASK\] \(or at position=N\)$"):
        vitroll.rollout(model, ["the [MASK] sat", "the cat sat"])


def test_the_cli_explains_a_saved_masked_language_model_at_its_mask(tmp_path, capsys):
    import json

    from vitroll.cli import main

    model, tokenizer = masked_language_model(tmp_path)
    folder = tmp_path / "bert-mlm"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    capsys.readouterr()  # transformers' bar of writing the weights
    out = tmp_path / "out"
    assert main(["text", "the cat [MASK] on the mat", "the cat sat", "--model", str(folder), "--out", str(out),
                 "--method", "chefer"]) == 3  # the text without a mask failed, the other was explained
    captured = capsys.readouterr()
    expected = vitroll.chefer(model, ["the cat [MASK] on the mat"])[0]
    with torch.no_grad():
        predicted = vitroll.class_names(model)[int(model_logits(model, text_batch(model, "the cat [MASK]"
                                                                                  " on the mat")).argmax())]
    shown = predicted if predicted.startswith("<id ") else f'"{predicted}"'  # an id the tokenizer has no token for
    assert f'#1  masked token: {shown} (' in captured.out and f'explained: {shown}' in captured.out
    assert captured.err == ("vitroll: failed: #2: cannot explain it: no [MASK] in the text: a masked language model "
                            "predicts the token at its first [MASK] (or at --position N)\n")
    [entry] = json.loads((out / "scores.json").read_text())["texts"]
    assert entry["masked_token"] == entry["explained"] == predicted and "prediction" not in entry
    np.testing.assert_allclose([t["score"] for t in entry["tokens"]], expected.numpy(), atol=1e-6)
    assert main(["text", "the [MASK] sat", "--model", str(folder), "--out", str(out), "--overwrite"]) == 0
    assert "masked token: " in capsys.readouterr().out  # read back from the manifest as a masked token too
    assert main(["text", "the [MASK] sat", "--model", str(folder), "--out", str(tmp_path / "o2"),
                 "--readout", "class_token"]) == 2
    assert capsys.readouterr().err == (
        "vitroll: error: a masked language model is explained at the token it predicts (readout='position'); a "
        "'class_token' readout reads rows its prediction does not\n")


@pytest.mark.parametrize("build", [bert, gpt2])
def test_grad_rollout_with_attention_weight_1_equals_per_text_float64_autograd(build):
    """With α = 1 the rows of (mean_h ∇A ⊙ A)⁺ that no gradient reaches (those the decision row never reads, in the
    last layer) were normalised as 0/0, and every score of every text was NaN; such a row passes on nothing."""
    model = build()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    scores = vitroll.grad_rollout(model, ids, attention_mask=mask, target_class=1, discard_ratio=0.5,
                                  attention_weight=1.0)
    expected = []
    for text in IDS_REAL:
        attentions, gradients, _ = eager_alone(model, text, target=1)
        fused = [discard_rows(np.maximum((a * g).mean(axis=0), 0), 0.5, 0 if build is bert else None)
                 for a, g in zip(attentions, gradients)]
        expected.append(chain(fused, 0 if build is bert else len(text) - 1, attention_weight=1.0))
        assert np.isfinite(expected[-1]).all() and expected[-1].max() > 0.1
    compare(scores, expected, mask)


def test_attention_and_flow_follow_the_class_row_of_each_text_alone():
    model = bert()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    last = vitroll.attention(model, ids, attention_mask=mask)
    per_head = vitroll.attention(model, ids, attention_mask=mask, head_fusion=None)
    flow = vitroll.flow(model, ids, attention_mask=mask, solver="networkx")
    expected_last, expected_flow = [], []
    for text in IDS_REAL:
        attentions = eager_alone(model, text)[0]
        expected_last.append(attentions[-1].mean(axis=0)[0])
        expected_flow.append(reference_flow([a.mean(axis=0) for a in attentions], 0, (len(text),)))
    compare(last, expected_last, mask)
    assert per_head.shape == (3, 2, 7) and (per_head.permute(1, 0, 2)[:, ~mask.bool()] == 0).all()
    compare(flow, expected_flow, mask)


def test_strings_go_through_the_tokenizer_given_or_attached(tmp_path):
    model, tokenizer = bert(), wordpiece_tokenizer(tmp_path)
    texts = ["the cat sat", "a dog ran on the mat"]
    direct = vitroll.rollout(model, texts, tokenizer=tokenizer)
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    assert torch.equal(direct, vitroll.rollout(model, encoded))
    vitroll.use_tokenizer(model, tokenizer)
    assert torch.equal(direct, vitroll.rollout(model, texts))
    assert vitroll.rollout(model, "the cat sat").shape == (1, 5)


def test_mistakes_are_named():
    model = bert()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    with pytest.raises(InputValueError, match=r"attention_mask has shape \(3, 6\); it must match input_ids \(3, 7\)"):
        vitroll.rollout(model, ids, attention_mask=mask[:, :6])
    with pytest.raises(OptionValueError, match="strings need a tokenizer"):
        vitroll.rollout(model, ["no tokenizer here"])
    with pytest.raises(InputValueError, match="input_ids must be integer token ids"):
        vitroll.rollout(model, ids.float(), attention_mask=mask)
    with pytest.raises(InputValueError, match=r"texts \[1\] have no real token"):
        vitroll.rollout(model, ids, attention_mask=mask * torch.tensor([[1], [0], [1]]))
    left_ids, left_mask = left_padded()
    with pytest.raises(InputValueError, match="class token .* is padding"):
        vitroll.rollout(model, left_ids, attention_mask=left_mask)
    with pytest.raises(InputValueError, match=r"input_ids\[1, 2\] = 40 is not a token id of the model's "
                                              r"vocabulary \(0…39\); is the tokenizer this model's\?"):
        vitroll.rollout(model, ids.where(ids != 22, 40), attention_mask=mask)
    with pytest.raises(InputValueError, match=r"input_ids\[0, 0\] = -1 is not a token id"):
        vitroll.rollout(gpt2(), torch.tensor([[-1, 5]]))
    with pytest.raises(InputValueError, match=r"^the text has 513 tokens; the model takes at most 512 \(its "
                                              r"position embeddings\): shorten it$"):
        vitroll.rollout(model, torch.ones(1, 513, dtype=torch.long))
    with pytest.raises(InputValueError, match=r"^text 1 has 520 tokens \(padded to 600\); the model takes at most "
                                              r"512 "):
        vitroll.rollout(model, torch.ones(2, 600, dtype=torch.long),
                        attention_mask=(torch.arange(600) < torch.tensor([[5], [520]])).long())
    with pytest.raises(InputValueError, match="position 4 is outside text 1's 4 real tokens"):
        vitroll.rollout(gpt2(), ids, attention_mask=mask, position=4)
    with pytest.raises(InputTypeError, match="^texts has type set; a text model takes token ids"):
        vitroll.rollout(model, {1, 2})
    with pytest.raises(InputTypeError, match="^a mapping of texts needs input_ids"):
        vitroll.rollout(model, {"attention_mask": mask})
    with pytest.raises(OptionValueError,
                       match="^readout must be 'class_token', 'token_mean' or 'position'; got 'cls'$"):
        vitroll.rollout(model, ids, attention_mask=mask, readout="cls")
    with pytest.raises(OptionValueError, match=r"^position has shape \(2,\); give one int or one per text \(3\)$"):
        vitroll.rollout(model, ids, attention_mask=mask, position=[1, 2])
    with pytest.raises(InputValueError, match=r"^attention flow on 7 tokens is impractical \(one max-flow per patch "
                                              r"over 2·7² edges\); use a smaller input or pass max_tokens=7 "
                                              r"knowingly$"):
        vitroll.flow(model, ids, attention_mask=mask, max_tokens=6)
    with pytest.raises(OptionValueError, match="a causal language model is explained at one position"):
        vitroll.rollout(gpt2(), ids, attention_mask=mask, readout="token_mean")
    with pytest.raises(OptionValueError, match="attention_mask is for text models; VisionTransformer takes images"):
        import timm
        vitroll.rollout(timm.create_model("vit_tiny_patch16_224", img_size=32, depth=1), torch.randn(1, 3, 32, 32),
                        attention_mask=mask)


@pytest.mark.parametrize("method", ["rollout", "chefer", "integrated_gradients"])
@pytest.mark.parametrize("build", [bert, gpt2])
def test_an_empty_batch_of_token_ids_is_refused_like_an_empty_batch_of_images(method, build):
    """A (0, L) batch of ids ran into the model and failed inside its attention with a reshape traceback."""
    empty = torch.zeros(0, 5, dtype=torch.long)
    expected = r"^input_ids is an empty batch of shape \(0, 5\): there is nothing to explain$"
    with pytest.raises(InputValueError, match=expected):
        getattr(vitroll, method)(build(), empty)
    with pytest.raises(InputValueError, match=expected):
        getattr(vitroll, method)(build(), {"input_ids": empty, "attention_mask": empty})
    with pytest.raises(InputValueError, match=expected):
        getattr(vitroll, method)(build(), TokenBatch(empty, torch.ones_like(empty)))


@pytest.mark.parametrize("kind", ["Roberta", "XLMRoberta"])
def test_roberta_takes_as_many_tokens_as_its_positions_counted_after_its_padding_id(kind):
    torch.manual_seed(0)
    config = getattr(transformers, f"{kind}Config")(**SMALL, max_position_embeddings=10, pad_token_id=1)
    model = getattr(transformers, f"{kind}ForSequenceClassification")(config).eval()  # positions 2…9: 8 tokens
    assert vitroll.rollout(model, torch.full((1, 8), 5)).shape == (1, 8)
    ids, mask = torch.tensor(IDS).masked_fill(~torch.tensor(MASK).bool(), 1), torch.tensor(MASK)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], 0) for text in IDS_REAL]
    compare(vitroll.rollout(model, ids, attention_mask=mask), expected, mask)
    with pytest.raises(ValueError, match=r"^the text has 9 tokens; the model takes at most 8 \(its position "
                                         r"embeddings\): shorten it$"):  # not an index error from inside the model
        vitroll.rollout(model, torch.full((1, 9), 5))


def test_the_verbs_signature_names_the_text_keywords():
    import inspect
    import typing

    parameters = inspect.signature(vitroll.rollout).parameters
    assert list(parameters)[:6] == ["model", "inputs", "attention_mask", "tokenizer", "readout", "position"]
    assert typing.get_type_hints(vitroll.chefer)["readout"] == typing.Optional[
        typing.Literal["class_token", "token_mean", "position"]]


def test_wordpiece_pieces_merge_into_words_by_summing(tmp_path):
    from vitroll.io.text import encode_texts
    from vitroll.words import word_scores

    tokenizer = wordpiece_tokenizer(tmp_path)
    _, _, [encoded] = encode_texts(tokenizer, ["Unbelievable cats, playing!"])
    assert encoded.tokens == ["[CLS]", "un", "##believ", "##able", "cat", "##s", ",", "play", "##ing", "!", "[SEP]"]
    scores = [0.5, 0.1, 0.2, 0.3, 0.05, 0.15, 0.01, 0.02, 0.03, 0.04, 0.6]
    words = word_scores(scores, encoded)
    assert [(w.word, w.start, w.end, w.pieces) for w in words] == [
        ("Unbelievable", 0, 12, 3), ("cats", 13, 17, 2), (",", 17, 18, 1), ("playing", 19, 26, 2), ("!", 26, 27, 1)]
    np.testing.assert_allclose([w.score for w in words], [0.6, 0.2, 0.01, 0.05, 0.04])
    # each piece also reads as text: a continuation without its "##"
    assert encoded.decoded == ["[CLS]", "un", "believ", "able", "cat", "s", ",", "play", "ing", "!", "[SEP]"]
    with pytest.raises(InputValueError, match="3 scores for 11 tokens"):
        word_scores(scores[:3], encoded)


def test_byte_level_bpe_pieces_merge_into_words_without_their_leading_space(tmp_path):
    from vitroll.io.text import encode_texts
    from vitroll.words import word_scores

    _, _, [encoded] = encode_texts(bpe_tokenizer(tmp_path), ["cats sat dog"])
    assert encoded.tokens == ["cat", "s", "Ġsat", "Ġdog"]
    words = word_scores([0.25, 0.5, 0.125, 0.125], encoded)
    assert [(w.word, w.start, w.end, w.score, w.pieces) for w in words] == [
        ("cats", 0, 4, 0.75, 2), ("sat", 5, 8, 0.125, 1), ("dog", 9, 12, 0.125, 1)]


def test_words_follow_unicode_word_boundaries_and_blank_pieces_are_no_words():
    from vitroll.io.text import EncodedText
    from vitroll.words import word_scores

    # as byte-level BPE splits a decomposed "été" (e + U+0301 …): four words by its rules, one by Unicode's; then a
    # right-to-left mark before a word, and a tab that GPT-2's rules make a word of its own
    text = "e\u0301te\u0301 \u200fcats\t!"
    encoded = EncodedText(text, ["e", "Ì\u0123", "te", "Ì\u0123", "Ġâ\u0122ıcats", "ĉ", "!"], [0, 1, 2, 3, 4, 5, 6],
                          [(0, 1), (1, 2), (2, 4), (4, 5), (5, 11), (11, 12), (12, 13)])
    words = word_scores([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], encoded)
    assert [(w.word, w.start, w.end, w.score, w.pieces) for w in words] == [
        ("e\u0301te\u0301", 0, 5, 10.0, 4), ("cats", 7, 11, 5.0, 1), ("!", 12, 13, 7.0, 1)]


def test_characters_an_uncased_tokenizer_drops_stay_in_the_words_and_the_view(tmp_path):
    from vitroll.io.text import encode_texts
    from vitroll.text_view import segments, terminal_text
    from vitroll.words import word_scores

    # BERT's uncased normaliser strips the accent of a decomposed "cat\u0301" and drops a zero-width space
    _, _, [encoded] = encode_texts(wordpiece_tokenizer(tmp_path), ["the cat\u0301\u200b"])
    assert encoded.tokens == ["[CLS]", "the", "cat", "[SEP]"] and encoded.offsets[2] == (4, 7)
    assert [(w.word, w.start, w.end) for w in word_scores([0.1, 0.2, 0.3, 0.4], encoded)] == [
        ("the", 0, 3), ("cat\u0301", 4, 8)]
    shown = segments(encoded, [0.1, 0.2, 0.3, 0.4])
    assert [(s.text, s.score) for s in shown] == [
        ("[CLS]", 0.1), ("the", 0.2), (" ", None), ("cat\u0301", 0.3), ("\u200b", None), ("[SEP]", 0.4)]
    assert terminal_text(shown).plain == "[CLS]the cat\u0301\u200b[SEP]"  # every character of the text, once


def test_the_text_view_shades_each_token_of_the_original_text(tmp_path):
    from vitroll.io.text import encode_texts
    from vitroll.text_view import segments, terminal_text

    _, _, [encoded] = encode_texts(wordpiece_tokenizer(tmp_path), ["the  cat <b>"])
    shown = segments(encoded, [0.0, 1.0, 0.5, 0.25, 0.25, 0.25, 0.5])
    assert [(s.text, s.special) for s in shown] == [
        ("[CLS]", True), ("the", False), ("  ", False), ("cat", False), (" ", False), ("<", False), ("b", False),
        (">", False), ("[SEP]", True)]
    assert shown[1].colour == "#e64628" and shown[0].colour == "#ffffff" and shown[2].score is None
    assert terminal_text(shown).plain == "[CLS]the  cat <b>[SEP]"


def test_the_text_view_shows_each_character_once_with_the_scores_of_all_its_byte_pieces(tmp_path):
    import json

    from vitroll.io.text import EncodedText, encode_texts
    from vitroll.text_view import segments, terminal_text

    # "🙂" is the bytes F0 9F 99 82, stored by byte-level BPE as "ð", "Ł", "Ļ", "Ĥ": three pieces share one character
    pieces = ["<|endoftext|>", "c", "a", "t", "ca", "cat", "Ġ", "ð", "Ł", "Ļ", "Ĥ", "ðŁ"]
    (tmp_path / "vocab.json").write_text(json.dumps({piece: i for i, piece in enumerate(pieces)}), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\nc a\nca t\nð Ł\n", encoding="utf-8")
    tokenizer = transformers.GPT2TokenizerFast(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"))
    _, _, [encoded] = encode_texts(tokenizer, ["cat 🙂"])
    assert encoded.tokens == ["cat", "Ġ", "ðŁ", "Ļ", "Ĥ"]
    assert encoded.decoded == ["cat", " ", "\\xf0\\x9f", "\\x99", "\\x82"]  # parts of a character: their bytes
    shown = segments(encoded, [0.1, 0.2, 0.3, 0.4, 0.5])
    assert [(s.text, s.score, s.pieces) for s in shown] == [("cat", 0.1, 1), (" ", 0.2, 1),
                                                            ("🙂", pytest.approx(1.2), 3)]
    assert shown[2].relative == 1.0 and shown[0].relative == pytest.approx(0.1 / 1.2)
    assert terminal_text(shown).plain == "cat 🙂"
    # a piece whose leading space was trimmed off (an empty span) is shown with the next piece of its word
    trimmed = EncodedText("the cat", ["the", "Ġ", "cat"], [0, 1, 1], [(0, 3), (4, 4), (4, 7)])
    assert [(s.text, s.score, s.pieces) for s in segments(trimmed, [0.5, 0.25, 0.25])] == [
        ("the", 0.5, 1), (" ", None, 1), ("cat", 0.5, 2)]


@pytest.fixture(scope="module")
def saved_classifier(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert-classifier")
    model = bert(num_labels=2)
    model.config.id2label, model.config.label2id = {0: "negative", 1: "positive"}, {"negative": 0, "positive": 1}
    model.save_pretrained(folder)
    wordpiece_tokenizer(folder).save_pretrained(folder)
    return folder


def test_the_cli_explains_texts_into_a_page_json_and_csv(saved_classifier, tmp_path, capsys):
    import csv
    import json

    from vitroll.cli import main

    texts = tmp_path / "texts.txt"
    texts.write_text("a dog ran on the mat\n\nunbelievable <script>alert(1)</script>\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["text", "the cat sat", "--file", str(texts), "--model", str(saved_classifier), "--out", str(out),
                 "--method", "chefer", "--batch-size", "2"]) == 3  # the empty line failed, the others went on
    captured = capsys.readouterr()
    assert captured.out.count("prediction: ") == 3 and "[CLS]the cat sat[SEP]" in captured.out
    assert captured.err == "vitroll: failed: #3: empty text\n"
    report = json.loads((out / "scores.json").read_text())
    assert [entry["text"] for entry in report["texts"]] == [
        "the cat sat", "a dog ran on the mat", "unbelievable <script>alert(1)</script>"]
    assert [entry["index"] for entry in report["texts"]] == [0, 1, 3]
    assert report["failed"] == [{"index": 2, "text": "", "error": "empty text"}]
    model = transformers.BertForSequenceClassification.from_pretrained(saved_classifier).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved_classifier)
    expected = vitroll.chefer(model, [entry["text"] for entry in report["texts"]], tokenizer=tokenizer)
    for b, entry in enumerate(report["texts"]):
        np.testing.assert_allclose([t["score"] for t in entry["tokens"]], expected[b][:len(entry["tokens"])], atol=1e-6)
        assert entry["prediction"] in ("negative", "positive") and entry["explained"] == entry["prediction"]
    # each token as the tokenizer stores it and as text
    assert [(t["token"], t["decoded"]) for t in report["texts"][2]["tokens"][:4]] == [
        ("[CLS]", "[CLS]"), ("un", "un"), ("##believ", "believ"), ("##able", "able")]
    rows = list(csv.DictReader((out / "scores.csv").open()))
    assert {row["level"] for row in rows} == {"token", "word"} and rows[0]["piece"] == "[CLS]"
    assert [(row["piece"], row["decoded"]) for row in rows if row["text_index"] == "3"][2:4] == [
        ("##believ", "believ"), ("##able", "able")]
    page = (out / "text.html").read_text()
    assert "<script" not in page and ">&lt;</span>" in page


@pytest.mark.parametrize("method", ["occlusion", "chefer"])
def test_every_method_that_takes_a_target_names_the_class_it_explained(saved_classifier, tmp_path, method):
    # occlusion explains a class without gradients: its report named none ("explained:" missing, target None)
    from vitroll.pipelines.text import explain_texts

    model = vitroll.load_model(str(saved_classifier))
    results = list(explain_texts(model, ["the cat sat", "a dog ran"], wordpiece_tokenizer(tmp_path), method=method,
                                 options={"target_class": [1, 0]}))
    assert [result.target for result in results] == ["positive", "negative"]
    assert results[0].prediction in {"negative", "positive"}


def test_a_text_too_long_fails_alone_in_one_line(saved_classifier, tmp_path):
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    folder = tmp_path / "model"
    shutil.copytree(saved_classifier, folder)
    transformers.AutoTokenizer.from_pretrained(folder, model_max_length=512).save_pretrained(folder)
    # a process of its own: transformers' logger writes to the stderr it found when imported
    done = subprocess.run([sys.executable, "-m", "vitroll", "text", "the cat " * 300, "--model", str(folder), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(vitroll.__file__).parents[1])})
    assert done.returncode == 3
    assert done.stderr == (  # not transformers' "Token indices sequence length is longer than …" besides
        "vitroll: failed: #1: cannot explain it: the text has 602 tokens; the model takes at most 512 (its position "
        "embeddings): shorten it\n")


def test_cli_mistakes_are_one_line(saved_classifier, tmp_path, capsys):
    from vitroll.cli import main

    def error(argv: list[str]) -> str:
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vitroll: error: ")
        return lines[0]

    assert error(["text", "--model", str(saved_classifier)]) == (
        "vitroll: error: no text to explain: give TEXT arguments, or --file FILE with one text per line (--file - "
        "reads them from standard input)")
    assert "missing.txt: cannot read texts" in error(["text", "--file", str(tmp_path / "missing.txt"),
                                                      "--model", str(saved_classifier)])
    assert "is a text model" in error(["overlay", PHOTO, "--model", str(saved_classifier)])
    assert "no config.json" in error(["text", "hi", "--model", str(tmp_path)])
    assert "takes no option 'nope'" in error(["text", "the cat", "--model", str(saved_classifier), "--option",
                                              "nope=1"])
    # a position outside every text is the option's mistake (tests/test_text_run.py: one that fits some texts fails
    # only the others)
    assert "--position 9 is outside every text: the longest has 4 tokens" in error(
        ["text", "the cat", "--model", str(saved_classifier), "--position", "9", "--out", str(tmp_path / "out")])


def test_a_text_model_saved_without_tokenizer_is_told_to_be_one_before_it_is_built(tmp_path, capsys):
    """`vitroll overlay --model DIR` of a BERT folder saved without its tokenizer said the tokenizer was missing,
    not that a text model is explained with `vitroll text`: its config.json is now read first."""
    from vitroll.cli import main

    bert().save_pretrained(tmp_path / "bert")
    capsys.readouterr()  # save_pretrained's progress bar
    for command in (["overlay", PHOTO], ["caption", PHOTO, "--out", str(tmp_path / "out")]):
        assert main([*command, "--model", str(tmp_path / "bert")]) == 2
        assert capsys.readouterr().err == (f"vitroll: error: {tmp_path / 'bert'} is a text model "
                                           "(BertForSequenceClassification); explain it with `vitroll text`\n")
    assert main(["text", "hi", "--model", str(tmp_path / "bert")]) == 2  # the command for it names what is missing
    assert "no tokenizer saved with the text model" in capsys.readouterr().err


def test_a_position_alone_reads_that_row_of_an_encoder(tmp_path):
    model = bert(num_labels=2)
    tokenizer = wordpiece_tokenizer(tmp_path)
    texts = ["the cat sat on the mat", "a dog ran"]
    for method in (vitroll.attention, vitroll.rollout, vitroll.chefer):
        alone = method(model, texts, tokenizer=tokenizer, position=2)
        torch.testing.assert_close(alone, method(model, texts, tokenizer=tokenizer, readout="position", position=2))
        assert not torch.allclose(alone, method(model, texts, tokenizer=tokenizer))
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    batch = TokenBatch(encoded["input_ids"], encoded["attention_mask"], position=torch.tensor([2, 2]))
    torch.testing.assert_close(vitroll.attention(model, batch), vitroll.attention(model, texts, tokenizer=tokenizer,
                                                                                  position=2))
    with pytest.raises(ValueError, match="^position is for readout 'position'; readout 'token_mean' reads no "
                                         "position$"):
        vitroll.attention(model, texts, tokenizer=tokenizer, readout="token_mean", position=2)


def test_a_language_models_classes_are_its_tokens_as_text(tmp_path):
    import json

    # byte-level BPE stores " cat" as "Ġcat" and "é" (bytes C3 A9) as "Ã©"; "Ã" alone is half of a character
    pieces = ["<|endoftext|>", "c", "a", "t", "Ġ", "Ã", "©", "ca", "cat", "Ġcat", "Ã©"]
    (tmp_path / "vocab.json").write_text(json.dumps({piece: i for i, piece in enumerate(pieces)}), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\nc a\nca t\nĠ cat\nÃ ©\n", encoding="utf-8")
    tokenizer = transformers.GPT2TokenizerFast(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"))
    model = gpt2()  # 40 ids, 11 of them in the tokenizer
    vitroll.use_tokenizer(model, tokenizer)
    names = vitroll.class_names(model)
    # half a character reads as its byte, not as the letter that stores it (a byte the text never had)
    assert names[:11] == ["<|endoftext|>", "c", "a", "t", " ", "\\xc3", "\\xa9", "ca", "cat", " cat", "é"]
    assert names[11:] == [f"<id {index}: not in the tokenizer>" for index in range(11, 40)]
    assert vitroll.class_names(model) == names  # decoded once per model and tokenizer: a run asks once per batch
    vitroll.use_tokenizer(model, bpe_tokenizer(tmp_path))
    assert vitroll.class_names(model)[:6] == ["<|endoftext|>", "c", "a", "t", "s", " "]


def test_a_predicted_token_is_shown_quoted_on_one_line(tmp_path, capsys):
    from rich.console import Console

    from vitroll.commands.text import _print_texts
    from vitroll.io.text import EncodedText
    from vitroll.pipelines.text import TextResult, write_text_report
    from vitroll.pipelines.text_run import TextReport
    from vitroll.text_view import quoted_token
    from vitroll.words import WordScore

    assert [quoted_token(token) for token in [" the", "\n", "\r\x0b", "é", "\\xc3", '"']] == [
        '" the"', '"\\n"', '"\\r\\x0b"', '"é"', '"\\xc3"', '"\\""']
    encoded = EncodedText("hi", ["hi"], [0], [(0, 2)], ["hi"])
    line_break = TextResult(encoded, [1.0], [WordScore("hi", 0, 2, 1.0, 1)], "\n", 0.5, "\n", "next token")
    labelled = TextResult(encoded, [1.0], [WordScore("hi", 0, 2, 1.0, 1)], "positive", 0.5, "positive")
    _print_texts(Console(highlight=False, soft_wrap=True), TextReport([0, 1], [line_break, labelled], []))
    assert capsys.readouterr().out.splitlines()[::3] == [
        '#1  next token: "\\n" (0.500)  explained: "\\n"', "#2  prediction: positive (0.500)  explained: positive"]
    page = write_text_report(tmp_path, [line_break, labelled], model="m", method="chefer")[0].read_text()
    assert "next token: <b><bdi>&#34;\\n&#34;</bdi></b>" in page and "prediction: <b><bdi>positive</bdi></b>" in page


def test_the_page_shows_small_scores_with_their_digits_as_the_terminal_does(tmp_path):
    # an untrained model's chefer or occlusion scores (2e-05) all read 0.000 among the page's top words
    from vitroll.io.text import EncodedText
    from vitroll.pipelines.text import TextResult, write_text_report
    from vitroll.words import WordScore

    encoded = EncodedText("hi yo", ["hi", "yo"], [0, 1], [(0, 2), (3, 5)], ["hi", "yo"])
    small = TextResult(encoded, [2.284e-05, 0.5], [WordScore("yo", 3, 5, 0.5, 1), WordScore("hi", 0, 2, 2.284e-05, 1)],
                       "positive", 0.5, "positive")
    page = write_text_report(tmp_path, [small], model="m", method="occlusion")[0].read_text()
    assert "<b><bdi>yo</bdi></b> 0.5" in page and "<b><bdi>hi</bdi></b> 2.28e-05" in page
    assert 'title="hi: 2.284e-05"' in page and 'title="yo: 0.5"' in page


def test_sentence_pairs_keep_their_token_type_ids(tmp_path):
    from vitroll.methods.text_batch import text_batch

    model, tokenizer = bert(), wordpiece_tokenizer(tmp_path)
    encoded = tokenizer(["the cat sat", "a dog"], ["a dog ran on the mat", "the mat"], padding=True,
                        return_tensors="pt")
    assert encoded["token_type_ids"].any()
    batch = text_batch(model, encoded)
    assert torch.equal(batch.token_type_ids, encoded["token_type_ids"])
    with torch.no_grad():
        expected = model(**encoded).logits
        assert not torch.allclose(expected, model(input_ids=encoded["input_ids"],
                                                  attention_mask=encoded["attention_mask"]).logits, atol=1e-2)
        torch.testing.assert_close(model_logits(model, batch), expected)
        torch.testing.assert_close(model_logits(model, batch[1:]), expected[1:])
    # Integrated Gradients keeps them on its path: its signed scores sum to the pair's score minus the baseline's
    scores = vitroll.integrated_gradients(model, encoded, target_class=1, steps=32, sign="signed")
    table = model.get_input_embeddings().weight.detach()
    words = table[encoded["input_ids"]]
    baseline = table[model.config.pad_token_id].expand_as(words)
    with torch.no_grad():
        ends = [model(inputs_embeds=embeddings, attention_mask=encoded["attention_mask"],
                      token_type_ids=encoded["token_type_ids"]).logits[:, 1] for embeddings in (words, baseline)]
    torch.testing.assert_close(scores.sum(dim=1), ends[0] - ends[1], atol=1e-4, rtol=0)
    with pytest.raises(InputValueError, match=r"token_type_ids must be integers of the shape of input_ids \(2, 12\); "
                                              r"got torch.int64 of shape \(2, 3\)"):
        vitroll.rollout(model, {**encoded, "token_type_ids": encoded["token_type_ids"][:, :3]})


def test_a_readout_a_language_model_cannot_take_is_one_error_line(tmp_path, capsys):
    from vitroll.cli import main

    folder = tmp_path / "gpt2"
    gpt2().save_pretrained(folder)
    bpe_tokenizer(tmp_path).save_pretrained(folder)
    capsys.readouterr()
    assert main(["text", "cats sat", "dog", "--model", str(folder), "--readout", "token_mean",
                 "--out", str(tmp_path / "out")]) == 2  # not a failed row per text, exit 3
    assert capsys.readouterr().err == (
        "vitroll: error: a causal language model is explained at one position (readout='position'); a 'token_mean' "
        "readout mixes rows that see different prefixes\n")


def test_the_page_wraps_long_words_and_keeps_right_to_left_names_apart_from_their_numbers(tmp_path, capsys):
    from browser import browser_page
    from vitroll.cli import main

    folder = tmp_path / "model"
    model = bert(num_labels=2)
    model.config.id2label, model.config.label2id = {0: "إيجابي", 1: "שלילי"}, {"إيجابي": 0, "שלילי": 1}
    model.save_pretrained(folder)
    wordpiece_tokenizer(folder).save_pretrained(folder)
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat " + "x" * 300 + "\nمرحبا بالعالم يا صديقي\nשלום עולם the cat\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["text", "--file", str(texts), "--model", str(folder), "--out", str(out)]) == 0
    capsys.readouterr()
    with browser_page((out / "text.html").as_uri(), {"width": 900, "height": 900}) as (page, errors):
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        assert page.eval_on_selector_all(  # the 300-letter word ran 1,900 pixels past its card
            ".text, .tokens, .words", "boxes => boxes.every(box => box.scrollWidth <= box.clientWidth)")
        # each name, then its number, left to right: unisolated, "שלילי (0.553)" showed as "(0.553) שלילי" and an
        # Arabic list of top words as one right-to-left run with the scores between the wrong words
        follows = """elements => elements.map(element => {
            const range = document.createRange();
            range.selectNodeContents(element.nextSibling);
            const name = [...element.getClientRects()].at(-1), number = range.getClientRects()[0];  // last line
            return name.right <= number.left + 1 || number.top >= name.bottom - 1; })"""  # or on a later line
        named = page.eval_on_selector_all(".prediction b, .words b", follows)
        assert len(named) == 3 + 4 + 4 + 4 and all(named), named
        assert page.eval_on_selector_all(".prediction b, .words b",
                                         "names => names.every(name => name.querySelector('bdi'))")
        assert not errors


def test_grad_rollouts_default_discard_ratio_on_a_short_text_warns_that_it_leaves_no_token(capsys):
    """discard_ratio 0.9 drops ⌊0.9·n⌋ ≥ n − 1 of a row's n weights for any text under 10 tokens: every score but the
    class token's was 0, with no word; one line a call, one for all texts of a run (told_at_the_end, as a command
    runs), none for a ratio that keeps a token."""
    from vitroll.wording import told_at_the_end

    model = bert()
    ids = torch.tensor([[2, 5, 7, 9, 3]])
    texts = (ids, torch.tensor([[2, 5, 7, 9, 11, 12, 3]]))
    for text in texts:
        scores = vitroll.grad_rollout(model, text)
        assert scores[0, 0] > 0 and torch.all(scores[0, 1:] == 0)
    five = ("drops 4 of the 5 attention weights in each row, all but the class token's, which leaves no other token "
            "any: too high for a text of 5 tokens, discard_ratio below 0.8 keeps some")
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: grad_rollout's map is constant (all 0) for input 0 of the batch: discard_ratio=0.9 {five}",
        "vitroll: warning: grad_rollout's map is constant (all 0) for input 0 of the batch: discard_ratio=0.9 drops 6 "
        "of the 7 attention weights in each row, all but the class token's, which leaves no other token any: too high "
        "for a text of 7 tokens, discard_ratio=0.8571 or lower keeps some"]
    with told_at_the_end():
        for text in texts:
            vitroll.grad_rollout(model, text)
    assert capsys.readouterr().err.splitlines() == [
        f"vitroll: warning: grad_rollout's map is constant (all 0 for the first) for 2 inputs of the run, in 2 of its "
        f"batches: discard_ratio=0.9 {five}"]
    assert torch.count_nonzero(vitroll.grad_rollout(model, ids, discard_ratio=0.5)[0, 1:]) > 0
    assert capsys.readouterr().err == ""


def test_file_dash_reads_the_texts_from_standard_input(saved_classifier, tmp_path, monkeypatch, capsys):
    """``--file -`` was taken for a file named ``-`` ("-: cannot read texts (No such file or directory)"); it reads
    standard input, as cat and sort do, after any TEXT given, with a file's rules (UTF-8, its byte-order mark dropped,
    the blank lines that end it no texts)."""
    import io
    import json

    from vitroll.cli import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\ufeffthe cat sat\ncafé au lait\n\n".encode())))
    assert main(["text", "first", "--file", "-", "--model", str(saved_classifier), "--out", str(tmp_path / "out"),
                 "--no-progress"]) == 0
    assert "3 texts ok, 0 failed" in capsys.readouterr().out
    scores = json.loads((tmp_path / "out" / "scores.json").read_text(encoding="utf-8"))
    assert [entry["text"] for entry in scores["texts"]] == ["first", "the cat sat", "café au lait"]
    for given, said in [(b"\n \n", "standard input: no text in it (one text per line)"),
                        (b"caf\xe9\n", "standard input: cannot read texts (not UTF-8 text: byte 0xe9 at offset 3)")]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(given)))
        assert main(["text", "--file", "-", "--model", str(saved_classifier), "--out", str(tmp_path / "o2")]) == 2
        assert capsys.readouterr().err == f"vitroll: error: {said}\n"
    monkeypatch.setattr(sys, "stdin", None)  # started without one (`<&-`)
    assert main(["text", "--file", "-", "--model", str(saved_classifier), "--out", str(tmp_path / "o2")]) == 2
    assert capsys.readouterr().err == "vitroll: error: standard input: cannot read texts (there is none)\n"


def test_only_the_string_dash_is_standard_input(tmp_path, monkeypatch):
    """``read_texts(Path("./-"))`` read standard input (``os.fspath`` spells that path ``-``): a path object is a
    file, whatever its name; the command line's ``-`` alone (a string) is standard input."""
    import io

    from vitroll.io.text import read_texts

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"from standard input\n")))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text("from the file\n", encoding="utf-8")
    assert read_texts(Path("./-")) == read_texts(Path("-")) == read_texts("./-") == ["from the file"]
    assert read_texts("-") == ["from standard input"]
