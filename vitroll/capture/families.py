"""Model families: which modules hold a model's token attention and how its tokens are laid out.

One :class:`ModelFamily` entry per timm model class. Supporting a new family means adding one entry to
:data:`FAMILIES` (and, if its attention module is new, one entry in :mod:`vitroll.capture.readouts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import nn

from vitroll.errors import UnsupportedModelError

Readout = Literal["class_token", "patch_mean"]


@dataclass(frozen=True)
class TokenLayout:
    """Where the patch tokens sit in a model's token sequence, for one input size.

    Attributes
    ----------
    num_prefix_tokens : int
        Tokens before the patch tokens: class, distillation and register tokens.
    readout : {"class_token", "patch_mean"}
        Which row of the attention is the model's "decision" row: the class token's (index 0), or, for
        models that pool the patch tokens instead, the mean of the patch tokens' rows.
    grid : (int, int)
        Patch grid (h, w); ``h * w`` patch tokens follow the prefix tokens.
    """

    num_prefix_tokens: int
    readout: Readout
    grid: tuple[int, int]

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def num_tokens(self) -> int:
        return self.num_prefix_tokens + self.num_patches

    def readout_vector(self, *, device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The row vector that selects the decision row of an (N, N) matrix, shape (N,)."""
        v = torch.zeros(self.num_tokens, device=device, dtype=dtype)
        if self.readout == "class_token":
            v[0] = 1.0
        else:
            v[self.num_prefix_tokens:] = 1.0 / self.num_patches
        return v

    def patch_values(self, token_values: torch.Tensor) -> torch.Tensor:
        """Reshape values over tokens (..., N) to the patch grid (..., h, w), dropping prefix tokens."""
        return token_values[..., self.num_prefix_tokens:].reshape(*token_values.shape[:-1], *self.grid)


@dataclass(frozen=True)
class ModelFamily:
    """How to find and read the attention of one kind of timm model."""

    name: str
    model_types: tuple[type, ...]
    name_patterns: tuple[str, ...]
    attention_modules: Callable[[nn.Module], list[nn.Module]]
    token_layout: Callable[[nn.Module, tuple[int, int]], TokenLayout]


def _vit_attention_modules(model: nn.Module) -> list[nn.Module]:
    return [block.attn for block in model.blocks]


def _vit_token_layout(model: nn.Module, image_hw: tuple[int, int]) -> TokenLayout:
    grid = tuple(model.patch_embed.dynamic_feat_size(image_hw))
    readout: Readout = "class_token" if model.global_pool == "token" else "patch_mean"
    return TokenLayout(num_prefix_tokens=model.num_prefix_tokens, readout=readout, grid=grid)


def _vit_family() -> ModelFamily:
    from timm.models.vision_transformer import VisionTransformer

    return ModelFamily(
        name="vit",
        model_types=(VisionTransformer,),
        name_patterns=("vit_*", "deit_*", "flexivit_*"),
        attention_modules=_vit_attention_modules,
        token_layout=_vit_token_layout,
    )


FAMILIES: list[ModelFamily] = [_vit_family()]


def family_of(model: nn.Module) -> ModelFamily:
    """The registered family of ``model``; raises :class:`UnsupportedModelError` naming the supported ones."""
    for family in FAMILIES:
        if isinstance(model, family.model_types):
            return family
    supported = ", ".join(f"{f.name} ({', '.join(f.name_patterns)})" for f in FAMILIES)
    raise UnsupportedModelError(
        f"{type(model).__name__} has no token attention that vitroll can read; supported families: {supported}. "
        "For CNNs and windowed-attention models (Swin, ConvNeXt, ResNet) use Grad-CAM (pip install grad-cam)."
    )

