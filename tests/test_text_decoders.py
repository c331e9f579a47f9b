"""Decoder-only language models beyond GPT-2 (Llama, Qwen2/3, Mistral, Gemma, Phi, GPT-NeoX, OPT) and their
``…ForSequenceClassification`` heads, built from small configs: token scores (B, L) against float64 references
computed by hand from the eager attentions of each text alone, with padding on either side."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import vitroll  # noqa: E402
from vitroll.adapters import transformers as hf_adapter  # noqa: E402
from test_text import IDS, IDS_REAL, MASK, chain, compare, eager_alone, left_padded  # noqa: E402
from vitroll.io.text import TokenBatch  # noqa: E402
from vitroll.methods.base import model_logits  # noqa: E402

SMALL = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             initializer_range=0.3)
GROUPED = dict(SMALL, num_key_value_heads=2)  # grouped-query attention: two query heads per key/value head
CONFIGS = {
    "gpt2": lambda **extra: transformers.GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=4, n_positions=16,
                                                    initializer_range=0.3, **extra),
    "llama": lambda **extra: transformers.LlamaConfig(**GROUPED, **extra),
    "qwen2": lambda **extra: transformers.Qwen2Config(**GROUPED, **extra),
    "qwen3": lambda **extra: transformers.Qwen3Config(**GROUPED, head_dim=8, **extra),
    "mistral": lambda **extra: transformers.MistralConfig(**GROUPED, sliding_window=3, **extra),  # texts are longer
    "gemma": lambda **extra: transformers.GemmaConfig(**dict(SMALL, num_key_value_heads=1), head_dim=8, **extra),
    # Gemma 2 has no SDPA path; both scale by query_pre_attn_scalar, not head_dim; a sliding layer, then a global one
    "gemma2": lambda **extra: transformers.Gemma2Config(**{
        **GROUPED, "head_dim": 8, "query_pre_attn_scalar": 5, "attn_logit_softcapping": None, "sliding_window": 3,
        "layer_types": ["sliding_attention", "full_attention"], **extra, "attn_implementation": "eager"}),
    "gemma3_text": lambda **extra: transformers.Gemma3TextConfig(
        **GROUPED, head_dim=8, query_pre_attn_scalar=5, sliding_window=3,
        layer_types=["sliding_attention", "full_attention"], **extra),
    "phi": lambda **extra: transformers.PhiConfig(**SMALL, **extra),
    "gpt_neox": lambda **extra: transformers.GPTNeoXConfig(**SMALL, **extra),
    "opt": lambda **extra: transformers.OPTConfig(
        vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32,
        init_std=0.3, **extra),
}


def decoder(kind: str, head: str = "ForCausalLM", **extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    config = CONFIGS[kind](**{"attn_implementation": "sdpa", **extra})
    cls = (transformers.AutoModelForCausalLM if head == "ForCausalLM" else
           transformers.AutoModelForSequenceClassification)
    return cls.from_config(config).eval()


def chefer_alone(model: torch.nn.Module, text: list[int], target: int, row: int) -> np.ndarray:
    """Chefer's relevance row ``row`` of ONE text, unpadded, from float64 eager autograd."""
    attentions, gradients, _ = eager_alone(model, text, target=target)
    relevance = np.eye(len(text))
    for a, g in zip(attentions, gradients):
        relevance = relevance + np.maximum(a * g, 0).mean(axis=0) @ relevance
    return relevance[row]


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("kind", sorted(set(CONFIGS) - {"gpt2"}))  # GPT-2's: tests/test_text.py
def test_rollout_of_each_decoder_equals_the_eager_reference_of_each_text_alone(kind, padding):
    model = decoder(kind)
    ids, mask = (torch.tensor(IDS), torch.tensor(MASK)) if padding == "right" else left_padded()
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], len(text) - 1) for text in IDS_REAL]
    compare(scores, expected, mask)
    with torch.no_grad():
        log_probabilities = model_logits(model, TokenBatch(ids, mask))
    for b, text in enumerate(IDS_REAL):
        np.testing.assert_allclose(log_probabilities[b].numpy(), eager_alone(model, text)[2].numpy(), atol=1e-5)


@pytest.mark.parametrize("padding", ["right", "left"])
@pytest.mark.parametrize("kind", ["llama", "opt", "gpt_neox", "gpt2"])
def test_a_sequence_classifier_is_read_at_its_last_token_that_is_not_padding(kind, padding):
    model = decoder(kind, "ForSequenceClassification", num_labels=3, pad_token_id=3)  # 3 also ends every text
    ids, mask = (torch.tensor(IDS), torch.tensor(MASK)) if padding == "right" else left_padded()
    ids = ids.masked_fill(~mask.bool(), 3)
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    # the head reads the last token whose id is not the padding id: the one before each text's closing 3
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], len(text) - 2) for text in IDS_REAL]
    compare(scores, expected, mask)
    with torch.no_grad():
        logits = model_logits(model, TokenBatch(ids, mask))
        for b, text in enumerate(IDS_REAL):  # the model's own pooling, each text alone
            np.testing.assert_allclose(logits[b].numpy(), model(input_ids=torch.tensor([text])).logits[0].numpy(),
                                       atol=1e-5)
    chefer = vitroll.chefer(model, ids, attention_mask=mask, target_class=2)
    expected = [chefer_alone(model, text, 2, len(text) - 2) for text in IDS_REAL]
    compare(chefer, expected, mask)


def test_a_classifier_without_a_padding_token_takes_padded_batches():
    model = decoder("llama", "ForSequenceClassification", num_labels=2)
    assert model.config.pad_token_id is None  # transformers refuses batches of more than one text then
    ids, mask = left_padded()
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], len(text) - 1) for text in IDS_REAL]
    compare(scores, expected, mask)


def test_grouped_query_gradients_equal_per_text_float64_autograd():
    model = decoder("llama")
    ids, mask = left_padded()
    chefer = vitroll.chefer(model, ids, attention_mask=mask, target_class=5)
    expected = [chefer_alone(model, text, 5, -1) for text in IDS_REAL]
    compare(chefer, expected, mask)


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_eager_and_sdpa_models_give_the_same_maps(kind):
    ids, mask = left_padded()
    sdpa = vitroll.attention(decoder(kind), ids, attention_mask=mask, head_fusion=None)
    eager = vitroll.attention(decoder(kind, attn_implementation="eager"), ids, attention_mask=mask, head_fusion=None)
    assert sdpa.shape == (3, 4, 7)
    torch.testing.assert_close(eager, sdpa, atol=1e-6, rtol=0)
    assert (eager[~mask.bool()[:, None].expand_as(eager)] == 0).all()


def test_a_bfloat16_model_is_explained_within_bfloat16_precision():
    model = decoder("llama").to(torch.bfloat16)
    ids, mask = left_padded()
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    assert scores.dtype == torch.float32
    reference = vitroll.rollout(decoder("llama"), ids, attention_mask=mask)
    torch.testing.assert_close(scores, reference, atol=2e-2, rtol=0)
    assert (scores[~mask.bool()] == 0).all()


REFUSED = {
    "gemma3": (lambda: transformers.Gemma3Config(
        text_config=dict(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, intermediate_size=32),
        vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                           image_size=28, patch_size=14),
        mm_tokens_per_image=4, architectures=["Gemma3ForConditionalGeneration"]),
               "Gemma 3's image–text model is not read; its text model is: Gemma3ForCausalLM (model type gemma3_text, "
               "as Gemma 3 1B is saved), or from Python the image–text model's model.model.language_model"),
    "t5": (lambda: transformers.T5Config(vocab_size=40, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                                         architectures=["T5ForConditionalGeneration"]),
           "T5 is an encoder–decoder model (its decoder cross-attends to its encoder's tokens), and vitroll reads the "
           "attention of encoders and decoders of one stack"),
    "bart": (lambda: transformers.BartConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                                             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                             decoder_ffn_dim=32, architectures=["BartForSequenceClassification"]),
             "BART is an encoder–decoder model (its decoder cross-attends to its encoder's tokens), and vitroll reads "
             "the attention of encoders and decoders of one stack"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_text_models_vitroll_cannot_read_are_refused_with_their_reason_before_their_weights(name, tmp_path, capsys):
    """They were told that they "take images" (from Python) or that "no vitroll family reads" them (from a folder)."""
    from vitroll.cli import main

    build_config, reason = REFUSED[name]
    config = build_config()
    torch.manual_seed(0)
    model = getattr(transformers, config.architectures[0])(config).eval()
    with pytest.raises(vitroll.UnsupportedModelError, match=f"^{config.architectures[0]}: {re.escape(reason)}$"):
        vitroll.rollout(model, torch.tensor(IDS), attention_mask=torch.tensor(MASK))
    config.save_pretrained(tmp_path / name)  # no weights: refused from the config
    assert main(["text", "a cat", "--model", str(tmp_path / name), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and not (tmp_path / "out").exists()
    assert error[0].startswith(f"vitroll: error: {tmp_path / name}: transformers model type "
                               f"'{config.model_type}' is not supported: {reason}; the supported model types are ")


def albert(head: str = "ForSequenceClassification", **extra: object) -> torch.nn.Module:
    """Four layers that run two groups of two inner layers each: four attention modules, each called twice."""
    torch.manual_seed(0)
    config = transformers.AlbertConfig(**dict(SMALL, num_hidden_layers=4), num_hidden_groups=2, inner_group_num=2,
                                       embedding_size=16, attn_implementation="sdpa", **extra)
    return getattr(transformers, f"Albert{head}")(config).eval()


def test_albert_records_each_call_of_its_shared_attention_modules_as_its_own_layer():
    """ALBERT was refused: one attention module per group runs in several layers, and one map per module would have
    shown rollout half of its eight layers."""
    model = albert(num_labels=2)
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    assert len({id(module) for module in model.modules() if type(module).__name__ == "AlbertAttention"}) == 4
    with vitroll.AttentionRecorder(model, head_fusion=None) as recorder:
        model_logits(model, TokenBatch(ids, mask))
    assert len(recorder.attentions) == 8
    for b, text in enumerate(IDS_REAL):  # eager output_attentions: one map per layer, in call order
        for recorded, eager in zip(recorder.attentions, eager_alone(model, text)[0], strict=True):
            n = len(text)
            np.testing.assert_allclose(recorded[b, :, :n, :n].numpy(), eager, atol=1e-6)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], 0) for text in IDS_REAL]
    compare(vitroll.rollout(model, ids, attention_mask=mask), expected, mask)
    expected = [chefer_alone(model, text, 1, 0) for text in IDS_REAL]
    compare(vitroll.chefer(model, ids, attention_mask=mask, target_class=1), expected, mask)


def test_a_gemma2_that_soft_caps_its_attention_is_refused_by_the_capture_and_its_folder_before_its_weights(
        tmp_path, capsys):
    from vitroll.cli import main

    config = transformers.Gemma2Config(**GROUPED, head_dim=8, architectures=["Gemma2ForCausalLM"])
    assert config.attn_logit_softcapping == 50.0  # Gemma 2's default
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM(config).eval()
    with pytest.raises(vitroll.UnsupportedModelError, match=re.escape(
            "Gemma2Attention soft-caps its attention logits (softcap=50.0: tanh before the softmax), which vitroll's "
            "attention kernel does not compute")):
        vitroll.rollout(model, torch.tensor(IDS), attention_mask=torch.tensor(MASK))
    config.save_pretrained(tmp_path / "gemma2")  # no weights: refused from the config
    assert main(["text", "a cat", "--model", str(tmp_path / "gemma2"), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [f"vitroll: error: {tmp_path / 'gemma2'}: transformers model type 'gemma2' is not supported with "
                     "this config: its attention logits are soft-capped (attn_logit_softcapping=50.0: tanh before the "
                     "softmax), which vitroll's attention kernel does not compute; a Gemma 2 without soft-capping, and "
                     "Gemma 3, are explained"]
    assert not (tmp_path / "out").exists()


def test_a_user_registered_family_whose_attention_adds_sinks_is_refused_by_the_capture():
    """GPT-OSS puts a learned logit per head in each softmax (``s_aux``), which the capture kernel does not compute:
    registered by a user through the attention interface, its model is refused when it runs, not explained wrongly."""
    from vitroll.adapters.transformers import attach_attention_interface, attention_modules_of
    from vitroll.capture.families import FAMILIES, registered_family
    from vitroll.capture.readouts import AttentionReadout

    attention = "transformers.models.gpt_oss.modeling_gpt_oss.GptOssAttention"
    llama = registered_family(decoder("llama"))
    family = vitroll.register_family(
        "user-gpt-oss", "transformers.models.gpt_oss.modeling_gpt_oss.GptOssForCausalLM", inputs="tokens",
        attention_modules=attention_modules_of(attention), token_layout=llama.token_layout, logits=llama.logits,
        readout=AttentionReadout(attention, probs_module=None, fused_flag=None, attach=attach_attention_interface))
    try:
        torch.manual_seed(0)
        model = transformers.GptOssForCausalLM(transformers.GptOssConfig(
            **GROUPED, head_dim=8, num_local_experts=2, num_experts_per_tok=1, sliding_window=3)).eval()
        with pytest.raises(vitroll.UnsupportedModelError, match="^" + re.escape(
                "GptOssAttention adds attention sinks (a learned logit per head in the softmax), which vitroll's "
                "attention kernel does not compute") + "$"):
            vitroll.rollout(model, torch.tensor(IDS), attention_mask=torch.tensor(MASK))
    finally:
        FAMILIES.remove(family)


def test_a_model_of_no_family_is_refused_as_that_rather_than_told_it_takes_images():
    torch.manual_seed(0)
    model = transformers.T5EncoderModel(transformers.T5Config(vocab_size=40, d_model=16, d_kv=8, d_ff=32,
                                                              num_layers=1, num_heads=2)).eval()
    with pytest.raises(vitroll.UnsupportedModelError, match="^T5EncoderModel has no token attention that vitroll "
                                                            "can read; supported families: "):
        vitroll.rollout(model, torch.tensor(IDS), attention_mask=torch.tensor(MASK))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_modernbert_with_local_and_global_layers_is_read_where_its_classifier_pools(pooling):
    """Its local layers attend to the two tokens on either side only (texts are longer); it was refused as an image
    model."""
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        **dict(SMALL, num_hidden_layers=3), global_attn_every_n_layers=2, local_attention=4, pad_token_id=0,
        bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3, classifier_pooling=pooling, num_labels=3,
        attn_implementation="sdpa")
    assert config.layer_types == ["full_attention", "sliding_attention", "full_attention"]
    model = transformers.ModernBertForSequenceClassification(config).eval()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], 0 if pooling == "cls" else None)
                for text in IDS_REAL]
    compare(scores, expected, mask)


def test_deberta_v2s_disentangled_attention_is_read_as_the_weights_that_mix_its_tokens():
    """Its relative-position terms move its attention (the scores), not what is mixed (content values only): rollout
    and chefer follow its own probabilities, checked against each text alone in float64; it was refused as an image
    model."""
    torch.manual_seed(0)
    config = transformers.DebertaV2Config(**SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"],
                                          max_relative_positions=8, position_buckets=4, num_labels=3, pad_token_id=0)
    model = transformers.DebertaV2ForSequenceClassification(config).eval()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    expected = [chain([a.mean(axis=0) for a in eager_alone(model, text)[0]], 0) for text in IDS_REAL]
    compare(vitroll.rollout(model, ids, attention_mask=mask), expected, mask)
    expected = [chefer_alone(model, text, 1, 0) for text in IDS_REAL]
    compare(vitroll.chefer(model, ids, attention_mask=mask, target_class=1), expected, mask)


SAVED = {
    "llama": lambda: decoder("llama"),
    "gemma2": lambda: decoder("gemma2"),  # no SDPA path: loaded with eager attention
    "gemma3_text": lambda: decoder("gemma3_text"),
    "albert": lambda: albert(num_labels=2, pad_token_id=0),
    "qwen3-classifier": lambda: decoder("qwen3", "ForSequenceClassification", num_labels=2, pad_token_id=0),
    "deberta-v2": lambda: transformers.DebertaV2ForSequenceClassification(transformers.DebertaV2Config(
        **SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"], num_labels=2, pad_token_id=0)).eval(),
}


@pytest.mark.parametrize("name", SAVED)
def test_the_cli_explains_a_saved_folder_as_the_same_model_from_python(name, tmp_path, capsys):
    """DeBERTa-v2 has no SDPA path: loaded as every model is (SDPA), it failed with transformers' message."""
    import json

    from small_tokenizers import wordpiece_tokenizer
    from vitroll.cli import main

    torch.manual_seed(0)
    model = SAVED[name]()
    model.save_pretrained(tmp_path / name)
    tokenizer = wordpiece_tokenizer(tmp_path)
    tokenizer.save_pretrained(tmp_path / name)
    texts = ["the cat sat on the mat", "a dog ran"]
    assert main(["text", *texts, "--model", str(tmp_path / name), "--out", str(tmp_path / "out"), "--method",
                 "chefer", "--batch-size", "2"]) == 0
    report = json.loads((tmp_path / "out" / "scores.json").read_text())
    expected = vitroll.chefer(model, texts, tokenizer=tokenizer)
    for b, entry in enumerate(report["texts"]):
        np.testing.assert_allclose([t["score"] for t in entry["tokens"]], expected[b][:len(entry["tokens"])],
                                   atol=1e-5)
    language_model = name in ("llama", "gemma2", "gemma3_text")
    assert ("next token: " if language_model else "prediction: ") in capsys.readouterr().out


def test_a_decoder_classifier_names_its_classes_and_randomises_its_head_first():
    """Its head is ``score``, not ``classifier``: its labels were dropped (the page read "0") and the sanity check
    left the head trained."""
    from vitroll.pipelines.sanity import randomizable_modules

    model = decoder("llama", "ForSequenceClassification", num_labels=2, id2label={0: "negative", 1: "positive"})
    assert vitroll.capture.families.family_of(model).class_names(model) == ["negative", "positive"]
    assert [name for name, _ in randomizable_modules(model)] == ["score", "model.layers.1", "model.layers.0"]


def test_a_predicted_id_past_the_tokenizers_end_reads_as_not_in_the_tokenizer(tmp_path, capsys):
    """A model's vocabulary padded past its tokenizer's (Qwen's 151,936 ids for 151,665 tokens): the predicted id 37
    of a 21-token tokenizer was shown as the token "37"."""
    import json

    from small_tokenizers import wordpiece_tokenizer
    from vitroll.cli import main

    tokenizer = wordpiece_tokenizer(tmp_path)
    model = decoder("llama")
    with torch.no_grad():  # id 37 is the only logit that is not 0
        hidden = model.model(**tokenizer(["the cat sat"], return_tensors="pt")).last_hidden_state[0, -1]
        model.lm_head.weight.zero_()
        model.lm_head.weight[37] = hidden / hidden.norm()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert main(["text", "the cat sat", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "out")]) == 0
    assert "#1  next token: <id 37: not in the tokenizer> (" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "scores.json").read_text())
    assert report["texts"][0]["next_token"] == "<id 37: not in the tokenizer>"
    assert "next token: <b><bdi>&lt;id 37: not in the tokenizer&gt;</bdi></b>" in (
        tmp_path / "out" / "text.html").read_text()


def test_query_heads_that_are_no_multiple_of_the_key_value_heads_are_refused_in_their_words():
    module = torch.nn.Identity()
    hf_adapter._SINKS[module] = object()  # being recorded; the check comes before the sink is used
    query, key = torch.zeros(1, 3, 4, 8), torch.zeros(1, 2, 4, 8)
    with pytest.raises(vitroll.UnsupportedModelError) as raised:
        hf_adapter._vitroll_attention(module, query, key, key, None, scaling=1.0)
    assert str(raised.value) == ("Identity has 3 query heads for 2 key/value heads, not a multiple: no grouping of "
                                 "the key/value heads gives each query head its own")


@pytest.mark.parametrize("padding", ["right", "left"])
def test_a_bidirectional_gemma3_embedder_is_read_at_the_mean_of_its_tokens(padding):
    # EmbeddingGemma: Gemma 3's text model attending both ways, embedding a text by the mean of its tokens
    torch.manual_seed(0)
    config = CONFIGS["gemma3_text"](attn_implementation="sdpa", use_bidirectional_attention=True)
    model = transformers.AutoModel.from_config(config).eval()
    ids, mask = (torch.tensor(IDS), torch.tensor(MASK)) if padding == "right" else left_padded()
    scores = vitroll.rollout(model, ids, attention_mask=mask)
    reference = copy.deepcopy(model).double()
    reference.config._attn_implementation = "eager"
    expected = []
    for text in IDS_REAL:
        with torch.no_grad():
            attentions = reference(input_ids=torch.tensor([text]), output_attentions=True).attentions
        assert (attentions[-1][0] > 0).all()  # every token sees every other: no causal mask
        expected.append(chain([a[0].mean(dim=0).numpy() for a in attentions], None))
    compare(scores, expected, mask)
