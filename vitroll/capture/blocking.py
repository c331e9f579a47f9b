"""How many query rows of logits or probabilities to hold at once when attention is computed in blocks."""

from __future__ import annotations

from typing import Optional

import torch

CPU_BLOCK_BYTES = 12 * 2**20
"""On CPU, blocks this size (128 query rows of 6 heads at N = 4097) keep both matrix products of the blocked kernel
efficient: smaller blocks lose time to per-block overhead, the more the longer the sequence, and larger ones are no
faster. ``scripts/bench_rollout.py`` times the rollout that runs on them."""

ACCELERATOR_BLOCK_BYTES = 64 * 2**20
"""On an accelerator larger blocks, so that each block's work outweighs launching its kernels. The size is not yet
tuned by measurement; ``scripts/gpu_check.py`` times the factored path that uses it."""


def rows_per_block(bytes_per_row: int, num_rows: int, device: torch.device, limit: Optional[int] = None) -> int:
    """Rows per block: within the device's block size and ``limit`` bytes, at least 1, at most ``num_rows``."""
    budget = CPU_BLOCK_BYTES if device.type == "cpu" else ACCELERATOR_BLOCK_BYTES
    if limit is not None:
        budget = min(budget, limit)
    return max(1, min(num_rows, budget // max(1, bytes_per_row)))
