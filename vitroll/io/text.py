"""Text inputs: a batch of token ids with its attention mask, and reading texts from a file.

A :class:`TokenBatch` is to text models what a preprocessed image tensor (B, 3, H, W) is to vision models: the
batch a model's family runs, explains and splits in halves when it runs out of memory. It also says which row of
the attention is explained (:data:`TextReadout`), since for text that depends on how the model is used (a bare
encoder read at its class token or mean-pooled, a language model at one position), not only on the model.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Optional, Sequence

import torch

from vitroll.errors import InputTypeError, InputValueError, OptionValueError, VitrollError
from vitroll.io.textfile import is_standard_input, read_text_file_or_input
from vitroll.wording import argument

TextReadout = Literal["class_token", "token_mean", "position"]
"""Which row of the attention a text model's scores are read from: the class token's (position 0: BERT-style
classifiers), the mean of the real tokens' rows (mean-pooled sentence embeddings), or the row of one position (a
language model's next-token prediction)."""


class UnexplainableText(InputValueError):
    """A text of a batch that cannot be explained; :attr:`alone` says why without the batch's numbering of texts (the
    reason a run over many texts gives that text)."""

    def __init__(self, message: str, alone: str) -> None:
        super().__init__(message)
        self.alone = alone


class PositionOutsideText(UnexplainableText):
    """The explained position lies outside the real tokens of text ``text`` (its index in the batch), which has
    ``count`` of them."""

    def __init__(self, position: int, text: int, count: int) -> None:
        super().__init__(f"position {position} is outside text {text}'s {count} real tokens",
                         f"position {position} is outside its {count} real tokens")
        self.position, self.text, self.count = position, text, count


class NoMaskToken(UnexplainableText):
    """Texts ``texts`` (indices in the batch) hold no ``mask`` token for a masked language model to predict."""

    def __init__(self, mask: str, texts: list[int]) -> None:
        at = argument("position", placeholder="N")
        why = f"a masked language model predicts the token at its first {mask} (or at {at})"
        super().__init__(f"no {mask} in texts {texts} of the batch: {why}", f"no {mask} in the text: {why}")


@dataclass(frozen=True)
class TokenBatch:
    """Token ids with their attention mask, and the row to explain.

    Attributes
    ----------
    input_ids : Tensor, shape (B, L), int64
    attention_mask : Tensor, shape (B, L)
        1 (or True) for real tokens, 0 for padding, on either side.
    readout : {"class_token", "token_mean", "position"} or None
        None: the model family's default (for encoders the class token, or the position when one is given; for
        language models the position).
    position : Tensor, shape (B,), int64, or None
        For ``readout="position"``: which real token, counted among the real tokens only (0 the first, −1 the
        last), so that padding on either side does not change it. None: the last real token.
    token_type_ids : Tensor, shape (B, L), int64, or None
        The segment of each token (0 the first text, 1 the second of a sentence pair, as BERT's tokenizer gives them),
        passed to the model as it is; None: the model's default (every token in segment 0).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    readout: Optional[TextReadout] = None
    position: Optional[torch.Tensor] = None
    token_type_ids: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if self.input_ids.ndim != 2 or self.input_ids.dtype.is_floating_point or self.input_ids.is_complex():
            raise InputValueError(f"input_ids must be integer token ids of shape (B, L); got {self.input_ids.dtype} "
                                  f"of shape {tuple(self.input_ids.shape)}")
        if tuple(self.attention_mask.shape) != tuple(self.input_ids.shape):
            raise InputValueError(f"attention_mask has shape {tuple(self.attention_mask.shape)}; it must match "
                                  f"input_ids {tuple(self.input_ids.shape)}")
        if not bool(((self.attention_mask == 0) | (self.attention_mask == 1)).all()):
            raise InputValueError("attention_mask must hold only 0 (padding) and 1 (real token)")
        if self.token_type_ids is not None and (
                tuple(self.token_type_ids.shape) != tuple(self.input_ids.shape)
                or self.token_type_ids.dtype.is_floating_point or self.token_type_ids.is_complex()):
            raise InputValueError(f"token_type_ids must be integers of the shape of input_ids "
                                  f"{tuple(self.input_ids.shape)}; "
                                  f"got {self.token_type_ids.dtype} of shape {tuple(self.token_type_ids.shape)}")
        empty = (self.attention_mask.sum(dim=-1) == 0).nonzero().flatten().tolist()
        if empty:
            raise InputValueError(f"texts {empty} have no real token (their attention_mask is all 0)")
        if self.readout not in (None, "class_token", "token_mean", "position"):
            raise OptionValueError(f"readout must be 'class_token', 'token_mean' or 'position'; got {self.readout!r}")
        if self.position is not None and self.readout not in (None, "position"):
            raise OptionValueError(f"position is for readout 'position'; readout {self.readout!r} reads no position")
        if self.position is not None and tuple(self.position.shape) != (len(self),):
            raise OptionValueError(f"position has shape {tuple(self.position.shape)}; give one int or one per text "
                                   f"({len(self)})")

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def shape(self) -> torch.Size:
        """(B, L), as for a tensor batch."""
        return self.input_ids.shape

    def __getitem__(self, rows: slice) -> "TokenBatch":
        """The texts ``rows`` (a slice), for splitting a batch."""
        return self._each_tensor(lambda tensor: tensor[rows])

    def to(self, device: torch.device) -> "TokenBatch":
        return self._each_tensor(lambda tensor: tensor.to(device))

    def _each_tensor(self, change: Callable[[torch.Tensor], torch.Tensor]) -> "TokenBatch":
        """This batch with ``change`` applied to each of its tensors (the optional ones where given)."""
        def optional(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            return None if tensor is None else change(tensor)

        return replace(self, input_ids=change(self.input_ids), attention_mask=change(self.attention_mask),
                       position=optional(self.position), token_type_ids=optional(self.token_type_ids))

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """The keywords a transformers text model is called with: ``input_ids``, ``attention_mask`` and, when given,
        ``token_type_ids`` (left out otherwise: DistilBERT and RoBERTa-style models take none or ignore them)."""
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.token_type_ids is not None:
            inputs["token_type_ids"] = self.token_type_ids
        return inputs

    @property
    def real(self) -> torch.Tensor:
        """(B, L) bool, True for real tokens."""
        return self.attention_mask.bool()

    def explained_positions(self) -> torch.Tensor:
        """(B,) the index in the padded sequence of each text's explained position (:attr:`position`, default
        the last real token).

        Raises
        ------
        PositionOutsideText
            When a position lies outside a text's real tokens.
        """
        counts = self.real.sum(dim=-1)
        wanted = torch.full_like(counts, -1) if self.position is None else self.position.to(counts.device).long()
        among_real = torch.where(wanted < 0, wanted + counts, wanted)
        outside = ((among_real < 0) | (among_real >= counts)).nonzero().flatten().tolist()
        if outside:
            text = outside[0]
            raise PositionOutsideText(int(wanted[text]), text, int(counts[text]))
        ordinal = self.real.long().cumsum(dim=-1) - 1  # each real token's index among the real tokens
        return (self.real & (ordinal == among_real[:, None])).long().argmax(dim=-1)


def refuse_unknown_ids(ids: torch.Tensor, vocabulary: Optional[int], name: str, hint: str = "") -> None:
    """Refuse token ids (B, L) that no embedding row answers: below 0, or from ``vocabulary`` on (when known), in the
    model's words rather than an embedding's ``index out of range in self``; ``hint`` ends the message.

    Raises
    ------
    ValueError
        Naming the first such id as ``name[row, column]``.
    """
    outside = (ids < 0) | (ids >= vocabulary) if vocabulary else ids < 0
    if bool(outside.any()):
        row, column = (int(index) for index in outside.nonzero()[0])
        allowed = f"0…{vocabulary - 1}" if vocabulary else "≥ 0"
        raise InputValueError(f"{name}[{row}, {column}] = {int(ids[row, column])} is not a token id of the model's "
                              f"vocabulary ({allowed}){hint}")


def read_texts(path: "str | os.PathLike[str]") -> list[str]:
    """The lines of a UTF-8 text file (standard input for the string ``-``; a path object is always a file), one
    text each (surrounding white space removed), empty ones kept as ``""`` so that a text's place is its line number
    (a batch run reports an empty line rather than skipping it) — except the blank lines that end the file, which
    number no text after them and are an editor's, not a text.

    Raises
    ------
    VitrollError
        For a file that cannot be read or decoded, or that holds no text.
    """
    lines = read_text_file_or_input(path, "texts").splitlines()
    texts = [line.strip() for line in lines]
    if not any(texts):
        where = "standard input: no text in it" if is_standard_input(path) else f"{path}: no text in the file"
        raise VitrollError(f"{where} (one text per line)")
    while not texts[-1]:
        texts.pop()
    return texts


@dataclass(frozen=True)
class EncodedText:
    """One text as its tokenizer split it: what merging sub-word pieces into words needs.

    Attributes
    ----------
    text : str
    tokens : list of str
        The pieces, special tokens included, in order (the real tokens of its row in the batch).
    word_ids : list of (int or None)
        The word each piece belongs to (the tokenizer's ``word_ids``); None for special tokens.
    offsets : list of (int, int)
        Each piece's character span in ``text``.
    """

    text: str
    tokens: list[str]
    word_ids: list[Optional[int]]
    offsets: list[tuple[int, int]]
    decoded: Optional[list[str]] = None
    """Each piece as text (:func:`decoded_pieces`: ``" café"`` for ``"ĠcafÃ©"``, ``"ing"`` for ``"##ing"``); None
    when not known (a manifest row written before vitroll kept it)."""

    def past_marks(self, end: int) -> int:
        """``end`` moved past the combining marks right after it that no token covers (the accents of a decomposed
        ``"cafe\u0301"`` that an uncased BERT normaliser strips): they belong to the letter before them."""
        while end < len(self.text) and unicodedata.category(self.text[end]).startswith("M") \
                and not any(start <= end < stop for start, stop in self.offsets):
            end += 1
        return end


def encode_texts(tokenizer: Any, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, list[EncodedText]]:
    """Tokenise ``texts`` with a transformers *fast* tokenizer (special tokens added) and pad them on the right.

    Returns
    -------
    input_ids : Tensor, shape (B, L), int64
        Padded with the tokenizer's pad id (0 when it has none: padding is masked, so any id serves).
    attention_mask : Tensor, shape (B, L), int64
    encoded : list of EncodedText
        Each text's pieces, word ids and character offsets, for :func:`vitroll.words.word_scores`.

    Raises
    ------
    ValueError
        For an empty list, a text that gives no token, or a slow tokenizer (no offsets).
    TypeError
        For a text that is not a string.
    """
    texts = list(texts)
    if not texts:
        raise InputValueError("no texts to explain (an empty list)")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputTypeError(f"texts[{index}] has type {type(text).__name__}; give strings")
    if not getattr(tokenizer, "is_fast", False):
        raise OptionValueError(f"{type(tokenizer).__name__} is not a fast tokenizer: word offsets need a "
                               "PreTrainedTokenizerFast (AutoTokenizer gives one)")
    encoding = tokenizer(texts, return_offsets_mapping=True, verbose=False)  # a text too long is refused later
    encoded = [EncodedText(text, encoding.tokens(index), encoding.word_ids(index),
                           [tuple(span) for span in encoding["offset_mapping"][index]],
                           decoded_pieces(tokenizer, encoding["input_ids"][index]))
               for index, text in enumerate(texts)]
    lengths = [len(each.tokens) for each in encoded]
    for index, length in enumerate(lengths):
        if length == 0:
            raise InputValueError(f"texts[{index}] gives no token")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(texts), max(lengths)), pad, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(encoding["input_ids"]):
        input_ids[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, :len(ids)] = 1
    return input_ids, attention_mask, encoded


def decoded_pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token id as text, decoded on its own: what a person reads for a piece the tokenizer stores in its own
    alphabet.

    A byte-level BPE piece reads as its characters (``" the"``, ``"é"``) rather than the bytes-as-letters it is
    stored under (``"Ġthe"``, ``"Ã©"``); a WordPiece continuation without its prefix (``"ing"``, not ``"##ing"``);
    a byte-level piece that holds part of a multi-byte character shows those bytes escaped (``"Ã"`` reads
    ``"\\xc3"``, not a letter the text never had), another piece that decodes to no whole character its stored form,
    and an id the tokenizer does not have (a model's vocabulary padded past its tokenizer's, as Qwen's is) reads
    :func:`id_not_in_tokenizer`. Special tokens read as they are stored (``"[CLS]"``).
    """
    ids = [int(index) for index in ids]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    texts = tokenizer.batch_decode([[index] for index in ids])
    prefix = _continuation_prefix(tokenizer)
    decoded = []
    for index, token, text in zip(ids, tokens, texts):
        if not text or "\ufffd" in text:
            text = _partial_piece_text(token, index)
        elif prefix and token is not None and token.startswith(prefix) and len(token) > len(prefix) \
                and text.startswith(prefix):
            text = text[len(prefix):]
        decoded.append(text)
    return decoded


def _continuation_prefix(tokenizer: Any) -> Optional[str]:
    """The prefix that marks a WordPiece piece continuing a word (BERT's ``"##"``), or None for other tokenizers."""
    from tokenizers import decoders

    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    return decoder.prefix if isinstance(decoder, decoders.WordPiece) else None


def id_not_in_tokenizer(index: int) -> str:
    """How token id ``index`` reads when the tokenizer has no such id: ``"<id 37: not in the tokenizer>"``, not a bare
    number that reads as the text "37"."""
    return f"<id {index}: not in the tokenizer>"


def is_id_not_in_tokenizer(name: str) -> bool:
    """Whether ``name`` is :func:`id_not_in_tokenizer`'s reading of an id rather than a token's text."""
    return _NOT_IN_TOKENIZER.fullmatch(name) is not None


_NOT_IN_TOKENIZER = re.compile(r"<id \d+: not in the tokenizer>")


def _partial_piece_text(token: Optional[str], index: int) -> str:
    """A piece that decodes to no whole character: its bytes escaped when it is a byte-level piece, else its stored
    form (:func:`id_not_in_tokenizer` when the tokenizer has no such id)."""
    if token is None:
        return id_not_in_tokenizer(index)
    byte_of = _byte_of_character()
    if all(character in byte_of for character in token):
        return bytes(byte_of[character] for character in token).decode("utf-8", errors="backslashreplace")
    return token


@functools.cache
def _byte_of_character() -> dict[str, int]:
    """GPT-2's byte-level alphabet (transformers' ``bytes_to_unicode``), inverted: the printable character each
    byte is stored as → that byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {character: byte for byte, character in bytes_to_unicode().items()}
