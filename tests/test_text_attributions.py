"""Integrated Gradients and GradientSHAP on text models' word embeddings, built from small configs: against a float64
Riemann sum computed by hand over each text alone (through ``inputs_embeds``, not vitroll's hook), completeness,
padding, and the CLI."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

import vitroll
from test_text import IDS, IDS_REAL, MASK, bert, gpt2, left_padded, saved_classifier  # noqa: F401 (a fixture)

TARGET = 1


def score64(model: torch.nn.Module, embeddings: torch.Tensor) -> torch.Tensor:
    """The explained score of ONE unpadded text given its word embeddings (n, D): class logit, or the last
    position's next-token log-probability."""
    logits = model(inputs_embeds=embeddings[None]).logits[0]
    return logits[TARGET] if logits.ndim == 1 else logits[-1].log_softmax(-1)[TARGET]


def reference_integrated_gradients(model: torch.nn.Module, text: list[int], steps: int) -> tuple[np.ndarray, float]:
    """Per-token IG in float64 (captum's Gauss–Legendre nodes and weights on [0, 1]) from the padding token's
    embedding (zeros without one), and score(input) − score(baseline)."""
    reference = copy.deepcopy(model).double()
    table = reference.get_input_embeddings().weight.detach()
    words = table[torch.tensor(text)]
    pad = reference.config.pad_token_id
    baseline = (table[pad] if pad is not None else torch.zeros(words.shape[-1], dtype=torch.float64)).expand_as(words)
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    gradient = torch.zeros_like(words)
    for alpha, weight in zip(0.5 * (nodes + 1), 0.5 * weights):
        point = (baseline + float(alpha) * (words - baseline)).requires_grad_(True)
        gradient += float(weight) * torch.autograd.grad(score64(reference, point), point)[0]
    with torch.no_grad():
        difference = float(score64(reference, words) - score64(reference, baseline))
    return ((words - baseline) * gradient).sum(dim=-1).numpy(), difference


def bert_with_a_trained_pad() -> torch.nn.Module:
    """BERT whose ``[PAD]`` embedding, the text baseline, is not zero (as a fine-tuned model's may be): a baseline of
    zeros gave the same scores as the padding token's on :func:`bert`, whose ``[PAD]`` row is zero."""
    model = bert()
    with torch.no_grad():
        table = model.get_input_embeddings().weight
        table[model.config.pad_token_id] = torch.randn(table.shape[1], generator=torch.Generator().manual_seed(0))
    return model


@pytest.mark.parametrize("build", [bert, gpt2, bert_with_a_trained_pad])
def test_integrated_gradients_equals_a_float64_riemann_sum_per_text(build):
    model = build()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    scores = vitroll.integrated_gradients(model, ids, attention_mask=mask, target_class=TARGET, steps=8,
                                          sign="signed")
    assert scores.shape == ids.shape and scores.dtype == torch.float32
    for b, text in enumerate(IDS_REAL):
        np.testing.assert_allclose(scores[b][mask[b].bool()].numpy(),
                                   reference_integrated_gradients(model, text, 8)[0], atol=1e-5)
    assert (scores[~mask.bool()] == 0).all()
    absolute = vitroll.integrated_gradients(model, ids, attention_mask=mask, target_class=TARGET, steps=8)
    torch.testing.assert_close(absolute, scores.abs())


@pytest.mark.parametrize("build", [bert, gpt2])
def test_integrated_gradients_is_complete_within_an_error_that_shrinks_with_steps(build):
    model = build()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    differences = np.array([reference_integrated_gradients(model, text, 2)[1] for text in IDS_REAL])
    errors = {steps: np.abs(vitroll.integrated_gradients(model, ids, attention_mask=mask, target_class=TARGET,
                                                         steps=steps, sign="signed").sum(dim=1).numpy() - differences)
              for steps in (8, 64)}
    assert errors[64].max() < 1e-4 < errors[8].min()  # Gauss–Legendre: far below at 64 steps, not at 8


def test_gradient_shap_on_text_is_reproducible_class_specific_and_zero_on_padding():
    model = bert()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    first = vitroll.gradient_shap(model, ids, attention_mask=mask, target_class=1, seed=3, samples=8)
    torch.testing.assert_close(first, vitroll.gradient_shap(model, ids, attention_mask=mask, target_class=1, seed=3,
                                                            samples=8))
    assert not torch.allclose(first, vitroll.gradient_shap(model, ids, attention_mask=mask, target_class=2, seed=3,
                                                           samples=8))
    assert first.shape == ids.shape and (first[~mask.bool()] == 0).all() and (first[mask.bool()] > 0).all()
    without_noise = vitroll.gradient_shap(model, ids, attention_mask=mask, target_class=1, noise=0.0, samples=256,
                                          sign="signed")
    differences = np.array([reference_integrated_gradients(bert(), text, 2)[1] for text in IDS_REAL])
    np.testing.assert_allclose(without_noise.sum(dim=1).numpy(), differences, rtol=0.2)  # expected gradients ≈ IG


@pytest.mark.parametrize("build", [bert, gpt2])
def test_gradient_shap_scores_of_a_text_do_not_depend_on_the_other_texts_of_its_batch(build):
    model = build()
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    if build is gpt2:  # left padding, as batched generation pads a language model
        ids, mask = left_padded()
    batch = vitroll.gradient_shap(model, ids, attention_mask=mask, target_class=TARGET, seed=3, samples=4)
    for row, text in enumerate(IDS_REAL):  # each text alone and unpadded: its noise is drawn for its own length
        alone = vitroll.gradient_shap(model, torch.tensor([text]), target_class=TARGET, seed=3, samples=4)
        torch.testing.assert_close(batch[row][mask[row].bool()], alone[0], rtol=0, atol=1e-7)
        assert (batch[row][~mask[row].bool()] == 0).all()


def test_the_cli_explains_texts_with_integrated_gradients(saved_classifier, tmp_path, capsys):  # noqa: F811
    from vitroll.cli import main

    out = tmp_path / "out"
    assert main(["text", "the cat sat", "a dog ran on the mat", "--model", str(saved_classifier), "--out", str(out),
                 "--method", "integrated_gradients", "--option", "steps=8"]) == 0
    assert capsys.readouterr().out.count("prediction: ") == 2
    report = json.loads((out / "scores.json").read_text())
    model = vitroll.load_model(str(saved_classifier))
    expected = vitroll.integrated_gradients(model, [entry["text"] for entry in report["texts"]], steps=8)
    for b, entry in enumerate(report["texts"]):
        np.testing.assert_allclose([t["score"] for t in entry["tokens"]], expected[b][:len(entry["tokens"])],
                                   atol=1e-6)


def test_no_steps_or_samples_is_named():
    ids, mask = torch.tensor(IDS), torch.tensor(MASK)
    with pytest.raises(ValueError, match="steps must be at least 1; got 0"):
        vitroll.integrated_gradients(bert(), ids, attention_mask=mask, steps=0)
    with pytest.raises(ValueError, match="samples must be at least 1; got -2"):
        vitroll.gradient_shap(bert(), ids, attention_mask=mask, samples=-2)
