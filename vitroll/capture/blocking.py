"""How many query rows of logits or probabilities to hold at once when attention is computed in blocks."""

from __future__ import annotations

from typing import Optional

import torch

CPU_BLOCK_BYTES = 12 * 2**20
"""On CPU, blocks this size (128 query rows of 6 heads at N = 4097) keep both of the blocked kernel's matrix
products efficient. Measured on 2 cores, vit_small, whole rollout / fused forward, 4 MiB → 12 MiB blocks:
1.09 → 1.07 (N = 197, batch 8), 1.17 → 1.16 (1025), 1.30 → 1.22 (2305), 1.53 → 1.34 (4097); 16 MiB within noise
of 12; an earlier kernel was slower with 32 MiB blocks than with 4 MiB."""

ACCELERATOR_BLOCK_BYTES = 64 * 2**20
"""Elsewhere (GPU) larger blocks, so a block is worth a kernel launch; not measured here (no GPU was lent)."""


def rows_per_block(bytes_per_row: int, num_rows: int, device: torch.device, limit: Optional[int] = None) -> int:
    """Rows per block: within the device's block size and ``limit`` bytes, at least 1, at most ``num_rows``."""
    budget = CPU_BLOCK_BYTES if device.type == "cpu" else ACCELERATOR_BLOCK_BYTES
    if limit is not None:
        budget = min(budget, limit)
    return max(1, min(num_rows, budget // max(1, bytes_per_row)))
