"""A user's own ViT handed over the ways users hand models over: from two threads at once, with a forward that
returns a dict or a tuple, and registered with the mistakes a first registration makes."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch import nn

import vitroll
from vitroll.errors import UnsupportedModelError


class HandAttention(nn.Module):
    """softmax(q kᵀ / √d) through ``attn_drop`` (dropout active in train mode), then @ v."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.attn_drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        attention = self.attn_drop((q @ k.transpose(-2, -1) * (dim // self.heads) ** -0.5).softmax(dim=-1))
        return self.proj((attention @ v).transpose(1, 2).reshape(batch, tokens, dim))


class OwnViT(nn.Module):
    """32×32 images, 8-pixel patches (4×4 grid), a class token, 3 pre-norm attention layers; ``returns`` picks what
    the forward gives back: the logits, ``{"logits": …}`` or ``(logits, tokens)``."""

    def __init__(self, returns: str = "logits") -> None:
        super().__init__()
        self.returns, self.patch = returns, 8
        self.embed = nn.Conv2d(3, 32, 8, 8)
        self.cls = nn.Parameter(torch.randn(1, 1, 32))
        self.pos = nn.Parameter(torch.randn(1, 17, 32) * 0.5)
        self.norms = nn.ModuleList(nn.LayerNorm(32) for _ in range(3))
        self.attns = nn.ModuleList(HandAttention(32, 4) for _ in range(3))
        self.head = nn.Linear(32, 5)
        with torch.no_grad():
            for attention in self.attns:
                attention.qkv.weight.normal_(0.0, 0.4)

    def forward(self, images: torch.Tensor) -> torch.Tensor | dict | tuple:
        x = self.embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], dim=1) + self.pos
        for norm, attention in zip(self.norms, self.attns):
            x = x + attention(norm(x))
        logits = self.head(x[:, 0])
        return {"logits": logits, "dict": {"logits": logits}, "tuple": (logits, x)}[self.returns]


def own_layout(model: OwnViT, hw: tuple[int, int]) -> vitroll.TokenLayout:
    return vitroll.TokenLayout(1, "class_token", (hw[0] // model.patch, hw[1] // model.patch))


OWN_READOUT = vitroll.AttentionReadout(HandAttention, probs_module="attn_drop", fused_flag=None)
vitroll.register_family(
    "own-test-vit", OwnViT, attention_modules=lambda model: list(model.attns), token_layout=own_layout,
    preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3), readout=OWN_READOUT,
)


def own_model(returns: str = "logits") -> OwnViT:
    torch.manual_seed(0)
    return OwnViT(returns)


IMAGES = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def reference(model: OwnViT, target: int) -> tuple[np.ndarray, np.ndarray]:
    """Rollout and Chefer relevance (2, 4, 4) in float64 from attention written out here, dropout off."""
    state = {name: value.double().requires_grad_() for name, value in model.state_dict().items()}
    x = torch.nn.functional.conv2d(IMAGES.double(), state["embed.weight"], state["embed.bias"], stride=8)
    x = torch.cat([state["cls"].expand(2, -1, -1), x.flatten(2).transpose(1, 2)], dim=1) + state["pos"]
    attentions = []
    for layer in range(3):
        y = torch.nn.functional.layer_norm(x, (32,), state[f"norms.{layer}.weight"], state[f"norms.{layer}.bias"])
        qkv = y @ state[f"attns.{layer}.qkv.weight"].T + state[f"attns.{layer}.qkv.bias"]
        q, k, v = qkv.reshape(2, 17, 3, 4, 8).permute(2, 0, 3, 1, 4)
        attention = (q @ k.transpose(-2, -1) / 8 ** 0.5).softmax(dim=-1)
        attention.retain_grad()
        attentions.append(attention)
        mixed = (attention @ v).transpose(1, 2).reshape(2, 17, 32)
        x = x + mixed @ state[f"attns.{layer}.proj.weight"].T + state[f"attns.{layer}.proj.bias"]
    (x[:, 0] @ state["head.weight"].T + state["head.bias"])[:, target].sum().backward()
    rollout, relevance = torch.eye(17, dtype=torch.float64), torch.eye(17, dtype=torch.float64).expand(2, 17, 17)
    for attention in attentions:
        mixed = 0.5 * attention.detach().mean(dim=1) + 0.5 * torch.eye(17, dtype=torch.float64)
        rollout = mixed / mixed.sum(dim=-1, keepdim=True) @ rollout
        relevance = relevance + (attention.grad * attention.detach()).clamp(min=0).mean(dim=1) @ relevance
    return rollout[:, 0, 1:].reshape(2, 4, 4).numpy(), relevance[:, 0, 1:].reshape(2, 4, 4).numpy()


def test_two_verbs_from_two_threads_on_one_model_take_turns_and_both_match_the_reference():
    model = own_model().train()
    expected_rollout, expected_chefer = reference(model, target=2)
    inside, release, results = threading.Event(), threading.Event(), {}

    def pause_the_first_forward(_module: nn.Module, _args: tuple) -> None:
        if threading.current_thread().name == "chefer" and not inside.is_set():
            inside.set()
            release.wait(timeout=30)

    hook = model.attns[1].register_forward_pre_hook(pause_the_first_forward)  # the user's own hook, kept throughout

    def run(name: str, verb) -> None:
        results[name] = verb()

    chefer = threading.Thread(target=run, name="chefer", args=("chefer", lambda: vitroll.chefer(model, IMAGES, target_class=2)))
    rollout = threading.Thread(target=run, name="rollout", args=("rollout", lambda: vitroll.rollout(model, IMAGES)))
    chefer.start()
    assert inside.wait(timeout=30)
    rollout.start()  # while chefer's recording is half-way through its forward
    rollout.join(timeout=2)
    release.set()
    chefer.join()
    rollout.join()
    hook.remove()
    assert np.abs(results["rollout"].numpy() - expected_rollout).max() < 1e-5
    assert np.abs(results["chefer"].numpy() - expected_chefer).max() < 1e-5
    assert model.training and all(module.training for module in model.modules())
    assert all(not module._forward_hooks and not module._forward_pre_hooks for module in model.modules())


@pytest.mark.parametrize("returns, type_name", [("dict", "dict"), ("tuple", "tuple")])
@pytest.mark.parametrize("verb", [vitroll.chefer, vitroll.grad_rollout, vitroll.integrated_gradients])
def test_a_forward_returning_a_dict_or_tuple_names_the_logits_argument_to_register(returns, type_name, verb):
    with pytest.raises(UnsupportedModelError) as raised:
        verb(own_model(returns), IMAGES)
    assert str(raised.value) == (
        f"OwnViT returned a {type_name}, not logits (B, num_classes): say where they are with "
        "vitroll.register_family('own-test-vit', ..., logits=lambda model, images: model(images)[...])")


def test_rollout_of_a_forward_returning_a_dict_needs_no_logits_and_matches_the_reference():
    model = own_model("dict")
    assert np.abs(vitroll.rollout(model, IMAGES).numpy() - reference(model, target=0)[0]).max() < 1e-5
