"""Proposers: where draft tokens come from. The Scheduler owns one; before each step it
says which decoding sequences may take drafts (`DraftRequest`), the Batcher asks the
proposer for them (on the device thread when it runs a model), and the Scheduler tells
it when a sequence ends."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from atom.model.runner import Runner
from atom.model.speculation.draft import DraftModelProposer
from atom.model.speculation.ngram import NgramIndex
from atom.model.speculation.suffix import SuffixIndex
from atom.vocabulary.speculative import SpeculativeConfig


@dataclass(frozen=True, slots=True)
class DraftRequest:
    seq_id: str
    token_ids: Sequence[int]  # the sequence so far; only ever grows between calls
    num_tokens: int  # at most this many drafts


class Proposer(Protocol):
    runs_a_model: bool  # then the Batcher calls `propose` on the device thread

    def propose(self, requests: Sequence[DraftRequest]) -> Mapping[str, tuple[int, ...]]:
        """Up to `num_tokens` drafts to follow each request's tokens, by seq_id (a
        sequence may get none)."""
        ...

    def finish(self, seq_id: str, output_ids: Sequence[int]) -> None:
        """The sequence ended (or was aborted) with this output; forget it."""
        ...


class SequenceDrafter(Protocol):
    def propose(self, seq_id: str, token_ids: Sequence[int], num_tokens: int) -> tuple[int, ...]:
        """Up to `num_tokens` drafts to follow one sequence's `token_ids`."""
        ...

    def finish(self, seq_id: str, output_ids: Sequence[int]) -> None: ...


class EachSequence:
    """A Proposer over a drafter that looks at one sequence at a time, on the event loop
    (a dictionary lookup or a short walk a sequence: n-gram and suffix)."""

    runs_a_model = False

    def __init__(self, drafter: SequenceDrafter) -> None:
        self._drafter = drafter

    def propose(self, requests: Sequence[DraftRequest]) -> Mapping[str, tuple[int, ...]]:
        return {
            r.seq_id: self._drafter.propose(r.seq_id, r.token_ids, r.num_tokens) for r in requests
        }

    def finish(self, seq_id: str, output_ids: Sequence[int]) -> None:
        self._drafter.finish(seq_id, output_ids)


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


def make_proposer(config: SpeculativeConfig, draft: Runner | None = None) -> Proposer:
    """The proposer `config` names; `draft`: the draft model's runner (draft_model)."""
    if config.method == "draft_model":
        if draft is None:
            raise ValueError("--speculative-config: the draft model is not loaded")
        return DraftModelProposer(draft)
    if config.method == "suffix":
        return EachSequence(SuffixIndex(config))
    return EachSequence(NgramProposer(config))
