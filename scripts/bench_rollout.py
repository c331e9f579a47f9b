"""Cost of rollout against the model's own fused forward, as the token count N grows.

For each N it measures, each in a fresh subprocess (so peak memory is that run's own): the plain fused forward;
forward + vitroll rollout; a naive pipeline (fused attention switched off, attn_drop hooked, full N×N product
chain); and a jacobgil/vit-explain-style loop (one image at a time, unfused capture, global discard, full
product). Each implementation runs ``--repeats`` times after a warm-up, interleaved with as many runs of the plain
forward in the same process (this shared machine drifts between processes), and every ratio is taken against that
forward: fastest run over fastest run (other load only ever adds time), with the ratio of medians beside it.
Memory is the growth of the process's peak RSS over the run, beyond what the model and input take. Prints a table
of ratios and writes ``docs/bench_rollout.md`` and a log-log plot ``docs/bench_rollout.png``.

    python scripts/bench_rollout.py            # N = 197, 577, 1025, 2305, 4097 (several minutes on 2 cores)
    python scripts/bench_rollout.py --quick    # N = 197, 577
    python scripts/bench_rollout.py --source transformers  # N = 197, 1025: transformers' ViT-S beside timm's

With ``--source transformers`` it measures forward and forward + rollout on a ViT-S-sized transformers
``ViTForImageClassification`` (hidden 384, 12 layers, 6 heads, patch 16, SDPA) and on timm's ``--model`` in the same
run, and writes ``docs/bench_rollout_transformers.md`` with both rollout/forward ratios and their quotient.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = {197: (224, 8), 577: (384, 1), 1025: (512, 1), 2305: (768, 1), 4097: (1024, 1)}  # N: (pixels, batch)
IMPLEMENTATIONS = ("forward", "vitroll", "naive", "per_image")


def _naive_maps(model, images):
    """Unfused capture + full-product chain: what most rollout code does."""
    import torch

    records = []
    handles = []
    for block in model.blocks:
        block.attn.fused_attn = False
        handles.append(block.attn.attn_drop.register_forward_hook(lambda _m, _i, out: records.append(out.mean(1))))
    try:
        with torch.no_grad():
            model(images)
            eye = torch.eye(records[0].shape[-1])
            result = eye.expand_as(records[0]).clone()
            for attention in records:
                mixed = 0.5 * attention + 0.5 * eye
                result = torch.bmm(mixed / mixed.sum(-1, keepdim=True), result)
    finally:
        for block, handle in zip(model.blocks, handles):
            block.attn.fused_attn = True
            handle.remove()
    return result[:, 0, 1:]


def _per_image_maps(model, images, discard_ratio=0.9):
    """jacobgil/vit-explain style: one image at a time, discard over the flattened matrix, full product."""
    import torch

    maps = []
    for image in images:
        records = []
        handles = []
        for block in model.blocks:
            block.attn.fused_attn = False
            handles.append(block.attn.attn_drop.register_forward_hook(lambda _m, _i, out: records.append(out.cpu())))
        try:
            with torch.no_grad():
                model(image[None])
                result = torch.eye(records[0].shape[-1])
                for attention in records:
                    fused = attention.mean(axis=1)
                    flat = fused.view(fused.size(0), -1)
                    _, indices = flat.topk(int(flat.size(-1) * discard_ratio), -1, False)
                    indices = indices[indices != 0]
                    flat[0, indices] = 0
                    a = (fused + torch.eye(fused.size(-1))) / 2
                    a = a / a.sum(dim=-1, keepdim=True)
                    result = torch.matmul(a, result)
        finally:
            for block, handle in zip(model.blocks, handles):
                block.attn.fused_attn = True
                handle.remove()
        maps.append(result[0, 0, 1:])
    return torch.stack(maps)


def _transformers_vit_small(pixels: int):
    """transformers' ViT at timm's vit_small_patch16 size, attention through SDPA."""
    import transformers

    config = transformers.ViTConfig(image_size=pixels, patch_size=16, hidden_size=384, num_hidden_layers=12,
                                    num_attention_heads=6, intermediate_size=1536, num_labels=1000,
                                    attn_implementation="sdpa")
    return transformers.ViTForImageClassification(config).eval()


def measure(tokens: int, implementation: str, model_name: str, repeats: int, source: str = "timm") -> dict:
    import timm
    import torch

    from vitroll import rollout

    torch.set_num_threads(torch.get_num_threads())
    pixels, batch = SIZES[tokens]
    if source == "transformers":
        hf_model = _transformers_vit_small(pixels)

        def model(images):
            return hf_model(pixel_values=images)

        explained, layers = hf_model, hf_model.config.num_hidden_layers
    else:
        model = explained = timm.create_model(model_name, img_size=pixels).eval()
        layers = len(model.blocks)
    images = torch.randn(batch, 3, pixels, pixels)
    run = {
        "forward": lambda: model(images),
        "vitroll": lambda: rollout(explained, images),
        "naive": lambda: _naive_maps(model, images),
        "per_image": lambda: _per_image_maps(model, images),
    }[implementation]
    with torch.no_grad():
        model(images)  # makes the forward's own memory part of the memory baseline
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.no_grad():
        run()  # warm-up of the implementation itself (first-call allocations), for every implementation alike
    times, forward_times = [], []
    for _ in range(repeats):
        if implementation != "forward":  # the forward again, interleaved: the ratio is measured side by side
            start = time.perf_counter()
            with torch.no_grad():
                model(images)
            forward_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        with torch.no_grad():
            run()
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    forward_times = forward_times or times
    return {"tokens": tokens, "implementation": implementation, "seconds": min(times),
            "forward_seconds": min(forward_times), "median_seconds": statistics.median(times),
            "median_forward_seconds": statistics.median(forward_times),
            "extra_peak_mib": (peak - baseline) / 1024, "batch": batch, "layers": layers, "source": source}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_small_patch16_224")
    parser.add_argument("--quick", action="store_true", help="only N = 197 and 577")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--skip-per-image-above", type=int, default=1025,
                        help="the per-image baseline equals naive at batch 1; skip it above this N")
    parser.add_argument("--source", choices=("timm", "transformers"), default="timm",
                        help="transformers: a transformers ViT-S beside timm's --model, N = 197 and 1025")
    parser.add_argument("--out", default="docs")
    parser.add_argument("--worker", nargs=3, metavar=("N", "IMPL", "SOURCE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(int(args.worker[0]), args.worker[1], args.model, args.repeats, args.worker[2])))
        return
    if args.source == "transformers":
        rows = [_run_worker(tokens, implementation, source, args)
                for tokens in (197, 1025) for source in ("timm", "transformers")
                for implementation in ("forward", "vitroll")]
        write_sources_report(rows, Path(args.out), args.model)
        return

    rows = []
    for tokens in ([197, 577] if args.quick else list(SIZES)):
        for implementation in IMPLEMENTATIONS:
            if implementation == "per_image" and tokens > args.skip_per_image_above:
                continue
            rows.append(_run_worker(tokens, implementation, "timm", args))
    write_report(rows, Path(args.out), args.model)


def _run_worker(tokens: int, implementation: str, source: str, args: argparse.Namespace) -> dict:
    """One measurement in a fresh subprocess (its own peak memory)."""
    done = subprocess.run([sys.executable, __file__, "--worker", str(tokens), implementation, source, "--model",
                           args.model, "--repeats", str(args.repeats)], stdout=subprocess.PIPE, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"N={tokens:5d} {source:12s} {implementation:10s} {row['seconds']:.3f} s  +{row['extra_peak_mib']:.0f} MiB",
          file=sys.stderr)
    return row


def write_sources_report(rows: list[dict], out: Path, model_name: str) -> None:
    """The rollout/forward ratio of timm's model and of transformers' ViT-S at each N, and their quotient."""
    from vitroll.testbed.training import wrapped_card

    by = {(r["tokens"], r["source"], r["implementation"]): r for r in rows}
    lines = [
        f"timm {model_name} beside transformers ViTForImageClassification (hidden 384, 12 layers, 6 heads, patch 16, "
        f"SDPA), random init, one run; CPU: {platform.processor() or platform.machine()}, "
        f"{__import__('os').cpu_count()} cores, torch {__import__('torch').__version__}, "
        f"transformers {__import__('transformers').__version__}.",
        "Ratios: fastest rollout over fastest forward interleaved in the same process (medians in brackets).",
        "",
        "| N | batch | timm forward s | timm rollout / forward | transformers forward s "
        "| transformers rollout / forward "
        "| transformers ratio / timm ratio (medians) |",
        "|---|---|---|---|---|---|---|",
    ]
    for tokens in sorted({r["tokens"] for r in rows}):
        ratio, median, forward = {}, {}, {}
        for source in ("timm", "transformers"):
            ours = by[(tokens, source, "vitroll")]
            ratio[source] = ours["seconds"] / ours["forward_seconds"]
            median[source] = ours["median_seconds"] / ours["median_forward_seconds"]
            forward[source] = by[(tokens, source, "forward")]["seconds"]
        lines.append(f"| {tokens} | {SIZES[tokens][1]} | {forward['timm']:.3f} "
                     f"| {ratio['timm']:.2f} ({median['timm']:.2f}) "
                     f"| {forward['transformers']:.3f} | {ratio['transformers']:.2f} ({median['transformers']:.2f}) "
                     f"| {ratio['transformers'] / ratio['timm']:.2f} ({median['transformers'] / median['timm']:.2f}) |")
    table = "\n".join(lines)
    print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_rollout_transformers.md").write_text(wrapped_card(table + "\n"))  # the note above the table


def write_report(rows: list[dict], out: Path, model_name: str) -> None:
    by = {(r["tokens"], r["implementation"]): r for r in rows}
    tokens = sorted({r["tokens"] for r in rows})
    lines = [
        f"Model {model_name} (random init), CPU: {platform.processor() or platform.machine()}, "
        f"{__import__('os').cpu_count()} cores, torch {__import__('torch').__version__}.",
        "",
        "| N | px | batch | forward s | vitroll / forward (medians) | naive / forward | per-image / forward "
        "| naive / vitroll "
        "| vitroll extra peak MiB | bound 2·L·N²·4·B MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in tokens:
        forward = by[(n, "forward")]
        ratio = {impl: by[(n, impl)]["seconds"] / by[(n, impl)]["forward_seconds"]
                 for impl in IMPLEMENTATIONS if (n, impl) in by}
        ours = by[(n, "vitroll")]
        median_ratio = ours["median_seconds"] / ours["median_forward_seconds"]
        bound = 2 * ours["layers"] * n * n * 4 * ours["batch"] / 2**20
        per_image = f"{ratio['per_image']:.2f}" if "per_image" in ratio else "–"
        lines.append(
            f"| {n} | {SIZES[n][0]} | {forward['batch']} | {forward['seconds']:.3f} "
            f"| {ratio['vitroll']:.2f} ({median_ratio:.2f}) "
            f"| {ratio['naive']:.2f} | {per_image} | {ratio['naive'] / ratio['vitroll']:.2f} "
            f"| {ours['extra_peak_mib']:.0f} | {bound:.0f} |"
        )
    table = "\n".join(lines)
    print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_rollout.md").write_text(table + "\n")
    (out / "bench_rollout.json").write_text(json.dumps(rows, indent=1) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    for implementation in IMPLEMENTATIONS:
        points = [(n, by[(n, implementation)]["seconds"] / by[(n, implementation)]["batch"])
                  for n in tokens if (n, implementation) in by]
        if points:
            ax.loglog(*zip(*points), marker="o", label=implementation)
    ax.set_xlabel("tokens N")
    ax.set_ylabel("seconds per image")
    ax.set_title(f"rollout cost vs N ({model_name})")
    ax.legend()
    fig.savefig(out / "bench_rollout.png", dpi=110)


if __name__ == "__main__":
    main()
