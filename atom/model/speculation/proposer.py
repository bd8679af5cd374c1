"""Proposers: where draft tokens come from. The Scheduler owns one and calls it for each
decoding sequence that may speculate, and tells it when a sequence ends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from atom.model.speculation.config import SpeculativeConfig
from atom.model.speculation.ngram import NgramIndex
from atom.model.speculation.suffix import SuffixIndex


class Proposer(Protocol):
    def propose(self, seq_id: str, token_ids: Sequence[int], num_tokens: int) -> tuple[int, ...]:
        """Up to `num_tokens` drafts to follow `token_ids`, the sequence so far (prompt
        and output; it only ever grows between calls for one `seq_id`)."""
        ...

    def finish(self, seq_id: str, output_ids: Sequence[int]) -> None:
        """The sequence ended (or was aborted) with this output; forget it."""
        ...


class NgramProposer:
    """Prompt lookup: each sequence's own n-gram index (atom/model/speculation/ngram.py)."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self._config = config
        self._indexes: dict[str, NgramIndex] = {}

    def propose(self, seq_id: str, token_ids: Sequence[int], num_tokens: int) -> tuple[int, ...]:
        index = self._indexes.get(seq_id)
        if index is None:
            c = self._config
            index = NgramIndex(min_n=c.prompt_lookup_min, max_n=c.prompt_lookup_max)
            self._indexes[seq_id] = index
        return index.propose(token_ids, num_tokens)

    def finish(self, seq_id: str, output_ids: Sequence[int]) -> None:
        self._indexes.pop(seq_id, None)


def make_proposer(config: SpeculativeConfig) -> Proposer:
    if config.method == "suffix":
        return SuffixIndex(config)
    return NgramProposer(config)
