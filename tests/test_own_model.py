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

    chefer = threading.Thread(target=run, name="chefer",
                              args=("chefer", lambda: vitroll.chefer(model, IMAGES, target_class=2)))
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


class SdpaAttention(HandAttention):
    """The same attention through ``F.scaled_dot_product_attention``: no submodule sees the probabilities."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        mixed = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(mixed.transpose(1, 2).reshape(batch, tokens, dim))


class SdpaViT(OwnViT):
    def __init__(self) -> None:
        super().__init__()
        for index, attention in enumerate(self.attns):
            replacement = SdpaAttention(32, 4)
            replacement.load_state_dict(attention.state_dict())
            self.attns[index] = replacement


def register_mistaken(name: str, **changes) -> type[OwnViT]:
    """A subclass of OwnViT registered with ``changes`` to the right registration; returns the subclass."""
    model_type = type("MistakenViT", (OwnViT,), {})
    arguments = dict(attention_modules=lambda model: list(model.attns), token_layout=own_layout,
                     preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3))
    vitroll.register_family(name, model_type, **{**arguments, **changes})
    return model_type


def test_a_module_calling_scaled_dot_product_attention_reads_out_through_attach_sdpa_call():
    vitroll.register_family(
        "own-sdpa-vit", SdpaViT, attention_modules=lambda model: list(model.attns), token_layout=own_layout,
        preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3, std=(0.5,) * 3),
        readout=vitroll.AttentionReadout(SdpaAttention, attach=vitroll.capture.attach_sdpa_call),  # fused_flag left
    )
    torch.manual_seed(0)
    model = SdpaViT().eval()
    expected_rollout, expected_chefer = reference(model, target=2)
    assert np.abs(vitroll.rollout(model, IMAGES).numpy() - expected_rollout).max() < 1e-5
    assert np.abs(vitroll.chefer(model, IMAGES, target_class=2).numpy() - expected_chefer).max() < 1e-5


@pytest.mark.parametrize("readout, message", [
    (vitroll.AttentionReadout(HandAttention, probs_module="attn_drop"),
     "AttentionReadout(HandAttention, fused_flag='fused_attn'): HandAttention has no attribute 'fused_attn'; give "
     "fused_flag=None for a module without a fused path"),
    (vitroll.AttentionReadout(HandAttention, probs_module="probs", fused_flag=None),
     "AttentionReadout(HandAttention, probs_module='probs'): HandAttention has no submodule 'probs'; its submodules: "
     "qkv, proj, attn_drop"),
    (vitroll.AttentionReadout(HandAttention, probs_module="proj", fused_flag=None),
     "HandAttention.proj gave a tensor of shape (2, 17, 32), not softmax probabilities (B, H, Q, N): "
     "AttentionReadout's probs_module must name the submodule whose output is the attention after its softmax"),
])
@pytest.mark.parametrize("verb", [vitroll.rollout, vitroll.chefer])
def test_a_readout_that_does_not_fit_the_module_is_refused_naming_the_field(readout, message, verb):
    try:
        vitroll.register_family("own-test-vit", OwnViT, attention_modules=lambda model: list(model.attns),
                                token_layout=own_layout, readout=readout,
                                preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3,
                                                                    std=(0.5,) * 3))
        with pytest.raises(UnsupportedModelError) as raised:
            verb(own_model(), IMAGES)
        assert str(raised.value) == message
    finally:
        vitroll.register_family("own-test-vit", OwnViT, attention_modules=lambda model: list(model.attns),
                                token_layout=own_layout, readout=OWN_READOUT,
                                preprocessing=vitroll.Preprocessing(input_size=(32, 32), mean=(0.5,) * 3,
                                                                    std=(0.5,) * 3))


def test_attention_modules_that_are_not_attention_say_how_to_give_a_readout():
    model_type = register_mistaken("own-blocks-vit", attention_modules=lambda model: list(model.norms))
    with pytest.raises(UnsupportedModelError) as raised:
        vitroll.rollout(model_type(), IMAGES)
    assert str(raised.value).startswith(
        "attention module LayerNorm has no registered readout: if it is the attention of a layer, say how to read it "
        "with register_family(..., readout=vitroll.AttentionReadout(LayerNorm, probs_module=NAME, fused_flag=None)), "
        "NAME its submodule whose output is the softmax probabilities (B, H, N, N), or for a module that calls "
        "F.scaled_dot_product_attention, AttentionReadout(LayerNorm, attach=vitroll.capture.attach_sdpa_call); else "
        "attention_modules lists other modules than the attention ones (types read: ")
    assert "transformers.models" not in str(raised.value)


def test_attention_modules_that_list_nothing_are_refused_naming_the_family():
    model_type = register_mistaken("own-empty-vit", attention_modules=lambda model: [], readout=OWN_READOUT)
    with pytest.raises(UnsupportedModelError) as raised:
        vitroll.rollout(model_type(), IMAGES)
    assert str(raised.value) == ("family 'own-empty-vit': attention_modules gave no modules for this MistakenViT; "
                                 "it must list the attention module of each layer, in forward order")


@pytest.mark.parametrize("layout, numbers", [
    (vitroll.TokenLayout(2, "class_token", (4, 4)), "expects 18 tokens (2 prefix + 4×4 patches)"),
    (vitroll.TokenLayout(1, "class_token", (3, 5)), "expects 16 tokens (1 prefix + 3×5 patches)"),
])
@pytest.mark.parametrize("verb", [vitroll.rollout, vitroll.chefer])
def test_a_token_layout_that_does_not_add_up_names_the_numbers(layout, numbers, verb):
    """A VitrollError (one `vitroll: error:` line in the CLI), not a bare RuntimeError."""
    model_type = register_mistaken("own-layout-vit", token_layout=lambda model, hw: layout, readout=OWN_READOUT)
    with pytest.raises(UnsupportedModelError) as raised:
        verb(model_type(), IMAGES)
    assert str(raised.value) == (f"token layout {layout} {numbers} but 17 were recorded: the token_layout of family "
                                 "'own-layout-vit' must give num_prefix_tokens + h·w = 17")


@pytest.mark.parametrize("grid, sides", [((2, 8), "16 pixels high and its columns 4 wide"),
                                         ((8, 2), "4 pixels high and its columns 16 wide"),
                                         ((1, 16), "32 pixels high and its columns 2 wide")])
@pytest.mark.parametrize("verb", [vitroll.rollout, vitroll.chefer])
def test_a_grid_of_the_right_count_in_the_wrong_shape_is_refused(grid, sides, verb):
    """A grid whose h·w is the patch count but whose shape does not follow the image (2×8 for the 4×4 patches of
    a 32×32 input) scattered the map without a word."""
    model_type = register_mistaken("own-grid-vit", readout=OWN_READOUT,
                                   token_layout=lambda model, hw: vitroll.TokenLayout(1, "class_token", grid))
    with pytest.raises(UnsupportedModelError) as raised:
        verb(model_type(), IMAGES)
    assert str(raised.value) == (
        f"family 'own-grid-vit': token_layout's grid {grid[0]}×{grid[1]} (h×w) does not fit a 32×32 input: its rows "
        f"would be {sides}; the grid must be (H // patch, W // patch) of the input the model ran on")


@pytest.mark.parametrize("returned, message", [
    ((1, "class_token", (4, 4)), "token_layout returned a tuple, not a vitroll.TokenLayout(num_prefix_tokens, "
                                 "readout, grid)"),
    (vitroll.TokenLayout(1, "cls", (4, 4)), "token_layout's readout 'cls' is none of class_token, patch_mean, "
                                            "attention_pool, token_mean, prefix_mean, class_and_patch_mean, position"),
])
def test_a_token_layout_of_the_wrong_kind_is_refused_naming_the_family(returned, message):
    model_type = register_mistaken("own-kind-vit", token_layout=lambda model, hw: returned, readout=OWN_READOUT)
    with pytest.raises(UnsupportedModelError) as raised:
        vitroll.rollout(model_type(), IMAGES)  # 'cls' was read as a class token before, silently
    assert str(raised.value) == f"family 'own-kind-vit': {message}"


@pytest.mark.parametrize("attention_modules, message", [
    (lambda model: [model.attns[0], model.attns[1], model.attns[0]],
     "attention_modules lists the same HandAttention at positions 0 and 2; it must list each layer's own attention "
     "module once"),
    (lambda model: list(reversed(model.attns)),
     "attention_modules lists the layers in another order than the forward runs them (it ran positions [2, 1, 0]); "
     "list them in forward order"),
])
@pytest.mark.parametrize("verb", [vitroll.rollout, vitroll.chefer])
def test_attention_modules_repeated_or_out_of_forward_order_are_refused(attention_modules, message, verb):
    # both gave maps before: the repeated layer's attention twice, or the product of the layers in reverse
    model_type = register_mistaken("own-order-vit", attention_modules=attention_modules, readout=OWN_READOUT)
    with pytest.raises(UnsupportedModelError) as raised:
        verb(model_type(), IMAGES)
    assert str(raised.value) == f"family 'own-order-vit': {message}"
