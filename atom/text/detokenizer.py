"""Incremental detokenization that never splits a multi-byte character.

Decoding token by token breaks on byte-level BPE (a character may span tokens)
and on tokenizers that add a leading space when a piece is decoded alone. So
each step decodes a short window of recent tokens twice — with and without
the new ones — and emits the difference, holding back text that still ends in
an incomplete character (U+FFFD).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

# How many already-emitted tokens to re-decode as left context of the new ones.
_CONTEXT_TOKENS = 6


class Decoder(Protocol):
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


def direct_decode(decoder: Decoder) -> Callable[[Sequence[int], bool], str]:
    """`decoder.decode(ids, skip_special_tokens=skip)`, straight from the Rust tokenizer
    where that gives the same text (a transformers fast tokenizer that cleans up no
    spaces afterwards): its wrapper's conversions cost three times the decode."""
    backend = getattr(decoder, "backend_tokenizer", None)
    if backend is None or getattr(decoder, "clean_up_tokenization_spaces", True):
        return lambda ids, skip: decoder.decode(ids, skip_special_tokens=skip)
    return lambda ids, skip: backend.decode(ids, skip_special_tokens=skip)  # type: ignore[no-any-return]


class IncrementalDetokenizer:
    """Feed token ids as they are sampled; get back the new text. Mutates itself only."""

    def __init__(self, decoder: Decoder, *, skip_special_tokens: bool = True) -> None:
        self._decode_ids = direct_decode(decoder)
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix_offset = 0  # start of the context window
        self._read_offset = 0  # tokens before this are emitted

    def push(self, token_ids: Sequence[int]) -> str:
        """Append tokens; return the text they complete (empty while a character is split)."""
        text = self.push_whole(token_ids)
        if text is None:  # held back until the character is whole
            self._ids.extend(token_ids)
            return ""
        return text

    def push_whole(self, token_ids: Sequence[int]) -> str | None:
        """Append tokens and return their text if it ends in whole characters; else
        change nothing and return None (`push` then holds them back; a feed of several
        tokens goes one at a time, so the text before a split character goes out)."""
        num_ids = len(self._ids)
        self._ids.extend(token_ids)
        before = self._decode(self._prefix_offset, self._read_offset)
        after = self._decode(self._prefix_offset, len(self._ids))
        if after.endswith("\ufffd") or len(after) <= len(before):
            del self._ids[num_ids:]
            return None
        self._prefix_offset = max(self._read_offset, len(self._ids) - _CONTEXT_TOKENS)
        self._read_offset = len(self._ids)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is still held back, replacement characters included (end of the choice)."""
        before = self._decode(self._prefix_offset, self._read_offset)
        after = self._decode(self._prefix_offset, len(self._ids))
        self._prefix_offset = self._read_offset = len(self._ids)
        return after[len(before) :]

    def _decode(self, start: int, end: int) -> str:
        return self._decode_ids(self._ids[start:end], self._skip)
