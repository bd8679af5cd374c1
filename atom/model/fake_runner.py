"""FakeRunner: a deterministic, torch-free Runner for tests and replay.

Each sequence answers with a scripted reply (by default its prompt reversed;
a random pick from the prompt when sampling with a seed), then an EOS token.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from atom.events import SamplingParams
from atom.model.runner import SeqChunk, StepPlan

Script = Callable[[tuple[int, ...], SamplingParams, int], Sequence[int]]


def reverse_script(prompt_ids: tuple[int, ...], params: SamplingParams, seed: int) -> list[int]:
    """Greedy: the prompt reversed. Sampled: 32 tokens drawn from the prompt with `seed`."""
    if params.is_greedy:
        return list(reversed(prompt_ids))
    rng = random.Random(seed)
    return [rng.choice(prompt_ids) for _ in range(32)]


@dataclass(slots=True)
class _FakeSeq:
    num_cached: int
    prompt_ids: list[int]
    reply: list[int]
    num_sampled: int = 0


@dataclass(slots=True)
class FakeRunner:
    """Satisfies the Runner protocol; `step_delay_s` stands in for model time."""

    eos_token_id: int = 0
    max_model_len: int = 4096
    script: Script = reverse_script
    step_delay_s: float = 0.0
    _seqs: dict[str, _FakeSeq] = field(default_factory=dict)
    num_steps: int = 0

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({self.eos_token_id})

    def step(self, plan: StepPlan) -> Mapping[str, int]:
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        self.num_steps += 1
        sampled = {chunk.seq_id: self._advance(chunk) for chunk in plan.chunks}
        return {seq_id: token for seq_id, token in sampled.items() if token is not None}

    def _advance(self, chunk: SeqChunk) -> int | None:
        seq = self._seqs.get(chunk.seq_id)
        if seq is None:
            seq = self._seqs[chunk.seq_id] = _FakeSeq(num_cached=0, prompt_ids=[], reply=[])
        if chunk.start_pos != seq.num_cached:
            raise ValueError(f"{chunk.seq_id}: start_pos {chunk.start_pos} != {seq.num_cached}")
        seq.num_cached += len(chunk.token_ids)
        if seq.num_sampled == 0:
            seq.prompt_ids.extend(chunk.token_ids)
        if not chunk.needs_sample:
            return None
        if seq.num_sampled == 0:
            seq.reply = list(self.script(tuple(seq.prompt_ids), chunk.params, chunk.seed))
        idx, seq.num_sampled = seq.num_sampled, seq.num_sampled + 1
        return seq.reply[idx] if idx < len(seq.reply) else self.eos_token_id

    def release(self, seq_id: str) -> None:
        self._seqs.pop(seq_id, None)

    def num_sequences(self) -> int:
        return len(self._seqs)
