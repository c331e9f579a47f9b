"""How many query rows of logits or probabilities to hold at once when attention is computed in blocks."""

from __future__ import annotations

from typing import Optional

import torch

CPU_BLOCK_BYTES = 4 * 2**20
"""On CPU, blocks that stay in cache make the softmax and the head fusion cheap (N = 4097, vit_small, 2 cores:
capture / forward 2.33 with 32 MiB blocks, 1.87 with 4 MiB)."""

ACCELERATOR_BLOCK_BYTES = 64 * 2**20
"""Elsewhere (GPU) larger blocks, so a block is worth a kernel launch; not measured here (no GPU was lent)."""


def rows_per_block(bytes_per_row: int, num_rows: int, device: torch.device, limit: Optional[int] = None) -> int:
    """Rows per block: within the device's block size and ``limit`` bytes, at least 1, at most ``num_rows``."""
    budget = CPU_BLOCK_BYTES if device.type == "cpu" else ACCELERATOR_BLOCK_BYTES
    if limit is not None:
        budget = min(budget, limit)
    return max(1, min(num_rows, budget // max(1, bytes_per_row)))
