"""Autocast control for the steps documented as float32 (log-normalisers, rollout chains, read-outs)."""

from __future__ import annotations

import contextlib

import torch


def without_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """A context with autocast off on ``device`` (CPU or CUDA): float32 inputs stay float32 in matrix products
    inside a caller's ``torch.autocast`` region, which would otherwise run them in bfloat16 or float16."""
    if device.type in ("cpu", "cuda"):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()
