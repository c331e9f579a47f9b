"""Real Hugging Face tokenizers built from tiny vocabularies written on the spot (no download), for the tests."""

from __future__ import annotations

import transformers


def wordpiece_tokenizer(folder) -> transformers.PreTrainedTokenizerFast:
    """A real WordPiece tokenizer from a vocabulary file written here (no download)."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "a", "dog", "ran", "on", "mat",
             "un", "##believ", "##able", "##s", "play", "##ing", ",", "!"]
    path = folder / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return transformers.BertTokenizerFast(vocab=str(path))


def bpe_tokenizer(folder) -> transformers.PreTrainedTokenizerFast:
    """A real GPT-2 byte-level BPE tokenizer from a tiny vocabulary and merges file written here (no download)."""
    import json

    pieces = ["<|endoftext|>", "c", "a", "t", "s", "Ġ", "d", "o", "g", "ca", "cat", "Ġs", "Ġsa", "Ġsat", "Ġd", "Ġdo",
              "Ġdog"]
    (folder / "vocab.json").write_text(json.dumps({piece: i for i, piece in enumerate(pieces)}), encoding="utf-8")
    merges = ["c a", "ca t", "Ġ s", "Ġs a", "Ġsa t", "Ġ d", "Ġd o", "Ġdo g"]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return transformers.GPT2TokenizerFast(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
