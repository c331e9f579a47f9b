"""How attention flow's cost grows with the token count, next to rollout on the same attention.

    python scripts/bench_flow.py            # grids 4×4 … 12×12 on a 12-layer vit_tiny, one image each

Prints seconds per image for the scipy solver (and networkx on the smallest grid) and the ratio to rollout.
"""

from __future__ import annotations

import argparse
import time

import timm
import torch

from vitroll.methods import record_attention, rollout_vector
from vitroll.methods.flow import flow_values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[4, 6, 8, 10, 12])
    parser.add_argument("--depth", type=int, default=12)
    args = parser.parse_args()
    print("| tokens N | layers | flow scipy s/image | flow networkx s/image | rollout s/image | flow/rollout |")
    print("|---|---|---|---|---|---|")
    for side in args.sides:
        model = timm.create_model("vit_tiny_patch16_224", img_size=16 * side, depth=args.depth).eval()
        attentions, layout, _ = record_attention(model, torch.randn(1, 3, 16 * side, 16 * side))
        rollout_vector(attentions, layout)  # warm-up
        started = time.perf_counter()
        flow_values(attentions, layout, solver="scipy")
        scipy_seconds = time.perf_counter() - started
        networkx = "–"
        if side == args.sides[0]:
            started = time.perf_counter()
            flow_values(attentions, layout, solver="networkx")
            networkx = f"{time.perf_counter() - started:.2f}"
        started = time.perf_counter()
        rollout_vector(attentions, layout)
        rollout_seconds = time.perf_counter() - started
        print(f"| {layout.num_tokens} | {args.depth} | {scipy_seconds:.2f} | {networkx} | {rollout_seconds:.5f} | "
              f"{scipy_seconds / rollout_seconds:,.0f}× |", flush=True)


if __name__ == "__main__":
    main()
