"""The planted-bias study on the text testbed: how much of each method's saliency falls on the group word, for the
model trained without the shortcut (keyword) and the one trained with it (shortcut), on the same held-out sentences.

    python scripts/text_bias.py                 # 500 sentences of seed 3 → docs/evaluation/text_bias.md
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vitroll.pipelines.evaluate import INTERVAL, mean_and_ci
from vitroll.pipelines.evaluate_text import evaluate_text, text_sentences
from vitroll.testbed.text_model import load_text_testbed

METHODS = ("rollout", "attention", "flow", "chefer", "grad_rollout", "random")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("docs/evaluation/text_bias.md"))
    args = parser.parse_args(argv)
    changed = [name for name in ("sentences", "seed") if getattr(args, name) != parser.get_default(name)]
    command = "python scripts/text_bias.py" + "".join(f" --{name} {getattr(args, name)}" for name in changed)
    sentences = text_sentences(args.sentences, args.seed)
    rows = {}
    for name in ("keyword", "shortcut"):
        model, tokenizer = load_text_testbed(name)
        rows[name] = evaluate_text(model, tokenizer, sentences, METHODS)
    accuracy = {name: sum(r["predicted"] == r["label"] for r in found if r["method"] == METHODS[0]) / len(sentences)
                for name, found in rows.items()}

    def cell(name: str, method: str, metric: str) -> str:
        mean, ci = mean_and_ci([r[metric] for r in rows[name] if r["method"] == method])
        return f"{mean:.3f} ± {ci:.3f}"

    lines = [
        f"`{command}`: the first {args.sentences} held-out key-word sentences (seed {args.seed}), where the group "
        f"word is noise; accuracy on these {args.sentences}: keyword model {accuracy['keyword']:.1%}, shortcut "
        f"model {accuracy['shortcut']:.1%}. Share of each method's word scores (negative scores as 0) on the group "
        f"word and on the key word, {INTERVAL}.",
        "",
        "| method | group word, keyword model | group word, shortcut model | key word, keyword model | "
        "key word, shortcut model |",
        "|---|---|---|---|---|",
    ]
    for method in METHODS:
        lines.append(f"| {method} | {cell('keyword', method, 'group_share')} "
                     f"| {cell('shortcut', method, 'group_share')}"
                     f" | {cell('keyword', method, 'key_share')} | {cell('shortcut', method, 'key_share')} |")
    table = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table, encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
