"""The Runner protocol: what the Batcher asks of a model, and the step plan it hands over.

The Batcher owns sequence bookkeeping (how many tokens each sequence has, when it
ends); a Runner owns per-sequence device state (KV cache, sampling generator)
and turns one StepPlan into one sampled token per scheduled sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from atom.events import SamplingParams


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqChunk:
    """Feed `token_ids` to sequence `seq_id`, whose cache already holds `start_pos` tokens.

    When `needs_sample`, the runner samples the sequence's next token from the last
    position (a prefill chunk that does not reach the prompt's end needs none, so a
    seeded generator advances the same way however the prompt was split). `seed`
    seeds the sequence's own generator when the runner first sees it.
    """

    seq_id: str
    token_ids: tuple[int, ...]
    start_pos: int
    params: SamplingParams
    seed: int
    needs_sample: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPlan:
    chunks: tuple[SeqChunk, ...]

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)


class Runner(Protocol):
    """A model behind one ragged step. Called from one worker thread at a time."""

    eos_token_ids: frozenset[int]
    max_model_len: int

    def step(self, plan: StepPlan) -> Mapping[str, int]:
        """Run every chunk in one forward; return the sampled token of each chunk that
        `needs_sample`, by seq_id."""
        ...

    def release(self, seq_id: str) -> None:
        """Forget a sequence and free its cache; unknown ids are ignored."""
        ...

    def num_sequences(self) -> int:
        """How many sequences hold state (0 once everything is released)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """What loading produces: the runner, its tokenizer, and the context limit."""

    runner: Runner
    tokenizer: Any
    max_model_len: int
