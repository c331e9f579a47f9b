"""CaiT gradient methods against a per-image float64 autograd reference written out by hand.

CaiT has two stages: talking-heads self-attention over the patches (the recorded probabilities are the softmax
output, before ``proj_w`` mixes heads) and class attention, where only the class token queries. The reference
takes each layer's gradient on the model's own tensors, puts both stages in the token space [class, patches…] by
explicit loops (identity for attention, zero for gradient where a layer has no entries), then applies the
Chefer and grad-rollout rules of :mod:`reference`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from timm.models.cait import Cait, ClassAttn, TalkingHeadAttn
from torch import nn

from vitroll import AttentionRecorder, chefer, grad_rollout
from vitroll.cli import main
from reference import reference_chefer, reference_grad_rollout

GRID = (3, 2)


@pytest.fixture(scope="module")
def tiny_cait():
    """Two talking-heads layers and two class-attention layers; layer scale 1 and sharpened query/key weights,
    so every layer moves the logits and the attention is far from uniform."""
    torch.manual_seed(5)
    model = Cait(img_size=(48, 32), patch_size=16, embed_dim=48, depth=2, num_heads=3, depth_token_only=2,
                 num_classes=4, init_values=1.0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(("qkv.weight", "attn.q.weight", "attn.k.weight")):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model.eval(), torch.randn(3, 3, 48, 32)


def cait_attention_gradients(model: nn.Module, image: torch.Tensor, target: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """ONE image (1, 3, H, W) in float64: per layer the per-head attention (H, N, N) and the gradient of logit
    ``target`` with respect to it, both in the token space [class, patches…]."""
    reference = copy.deepcopy(model).double().eval()
    kept: list[torch.Tensor] = []

    def keep_input(_module, inputs):  # talking heads: proj_w receives the softmax output (B, N, N, H)
        inputs[0].retain_grad()
        kept.append(inputs[0])

    def keep_output(_module, _inputs, output):  # class attention: the softmax output (B, H, 1, N)
        output.retain_grad()
        kept.append(output)

    for module in reference.modules():
        if isinstance(module, TalkingHeadAttn):
            module.proj_w.register_forward_pre_hook(keep_input)
        elif isinstance(module, ClassAttn):
            module.fused_attn = False
            module.attn_drop.register_forward_hook(keep_output)
    reference(image.double())[0, target].backward()

    num_self = len(reference.blocks)
    num_heads = reference.blocks[0].attn.num_heads
    num_tokens = 1 + GRID[0] * GRID[1]
    attentions, gradients = [], []
    for layer, tensor in enumerate(kept):
        value, grad = tensor[0].detach().numpy(), tensor.grad[0].numpy()
        attention, gradient = np.zeros((num_heads, num_tokens, num_tokens)), np.zeros((num_heads, num_tokens, num_tokens))
        for h in range(num_heads):
            for i in range(num_tokens):
                for j in range(num_tokens):
                    if layer < num_self and i > 0 and j > 0:  # patch i attends to patch j; heads last
                        attention[h, i, j], gradient[h, i, j] = value[i - 1, j - 1, h], grad[i - 1, j - 1, h]
                    elif layer >= num_self and i == 0:  # the class token attends to token j
                        attention[h, i, j], gradient[h, i, j] = value[h, 0, j], grad[h, 0, j]
                    else:  # a token this layer does not touch passes through; no attention, no gradient
                        attention[h, i, j] = float(i == j)
        attentions.append(attention)
        gradients.append(gradient)
    return attentions, gradients


@pytest.mark.parametrize("target", [None, 1, [3, 0, 2]])
def test_cait_chefer_matches_per_image_autograd(tiny_cait, target):
    model, images = tiny_cait
    maps = chefer(model, images, target_class=target)
    predicted = model(images).argmax(-1).tolist()
    targets = predicted if target is None else (target if isinstance(target, list) else [target] * 3)
    for i, t in enumerate(targets):
        attentions, gradients = cait_attention_gradients(model, images[i:i + 1], t)
        expected = reference_chefer(attentions, gradients, 1, GRID)
        assert np.abs(expected).max() > 1e-3  # the class-attention relevance reaches the patches
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("discard_ratio", [0.0, 0.5])
def test_cait_grad_rollout_matches_per_image_autograd(tiny_cait, discard_ratio):
    model, images = tiny_cait
    maps = grad_rollout(model, images, target_class=2, discard_ratio=discard_ratio)
    for i in range(len(images)):
        attentions, gradients = cait_attention_gradients(model, images[i:i + 1], 2)
        expected = reference_grad_rollout(attentions, gradients, 1, GRID, discard_ratio)
        assert np.abs(expected).max() > 1e-3
        np.testing.assert_allclose(maps[i].numpy(), expected, rtol=1e-5, atol=1e-7)


def test_cait_gradients_are_zero_outside_each_stage(tiny_cait):
    model, images = tiny_cait
    with torch.enable_grad(), AttentionRecorder(model, keep_graph=True) as recorder:
        logits = model(images)
        gradients = recorder.gradients(logits[:, 0].sum())
    assert [tuple(g.shape) for g in gradients] == [(3, 3, 7, 7)] * 4
    for gradient in gradients[:2]:  # talking heads: the class token does not exist yet
        assert gradient[..., 0, :].abs().sum() == 0 and gradient[..., :, 0].abs().sum() == 0
        assert gradient[..., 1:, 1:].abs().sum() > 0
    for gradient in gradients[2:]:  # class attention: only the class token's row
        assert gradient[..., 1:, :].abs().sum() == 0 and gradient[..., 0, :].abs().sum() > 0


def test_gradients_need_keep_graph(tiny_cait):
    model, images = tiny_cait
    with AttentionRecorder(model) as recorder, pytest.raises(RuntimeError, match="need AttentionRecorder"):
        logits = model(images)
        recorder.gradients(logits.sum())


@pytest.mark.parametrize("method", ["chefer", "grad_rollout"])
def test_cait_gradient_methods_through_the_cli(tmp_path, capsys, method):
    photo = Path(__file__).resolve().parents[1] / "sample_images" / "cat.jpg"
    code = main(["overlay", str(photo), "--model", "cait_xxs24_224", "--img-size", "64", "--method", method,
                 "--out", str(tmp_path)])
    assert code == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "vitroll: note: cait_xxs24_224 has random weights (no --pretrained or --checkpoint); its maps mean nothing"]
    assert np.asarray(Image.open(tmp_path / f"cat_{method}.png")).shape == np.asarray(Image.open(photo)).shape
