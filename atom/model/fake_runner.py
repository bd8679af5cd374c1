"""FakeRunner: a deterministic, torch-free Runner for tests and replay.

Each sequence answers with a scripted reply (by default its prompt reversed;
a random pick from the prompt when sampling with a seed), then an EOS token.
It keeps a fake paged KV store of token ids and reads every sequence's context
back through its block table, so a wrong table (a bad prefix hit, a block
reused too early) changes the reply or fails loudly, as a real model would.
Reading it all back each step costs a token the sequence's length; a runner that
must cost nothing (bench/host_app.py) sets `reads_back=False` and reads a
sequence's context once, at its first step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from atom.model.runner import Sampled, SeqChunk, StepPlan, slot_of
from atom.vocabulary.events import SamplingParams

if TYPE_CHECKING:
    from atom.model.lora.adapter import LoraAdapter

Script = Callable[[tuple[int, ...], SamplingParams, int], Sequence[int]]


def reverse_script(prompt_ids: tuple[int, ...], params: SamplingParams, seed: int) -> list[int]:
    """Greedy: the prompt reversed. Sampled: 32 tokens drawn from the prompt with `seed`."""
    if params.is_greedy:
        return list(reversed(prompt_ids))
    rng = random.Random(seed)
    return [rng.choice(prompt_ids) for _ in range(32)]


@dataclass(slots=True)
class _FakeSeq:
    prompt_ids: tuple[int, ...]
    params: SamplingParams
    seed: int
    reply: list[int]
    sampled: list[int] = field(default_factory=list)


@dataclass(slots=True)
class FakeRunner:
    """Satisfies the Runner protocol; `step_delay_s` stands in for model time."""

    eos_token_id: int = 0
    max_model_len: int = 4096
    num_blocks: int = 4096
    block_size: int = 16
    script: Script = reverse_script
    step_delay_s: float = 0.0
    reads_back: bool = True  # check each step that the KV store holds the whole sequence
    num_steps: int = 0
    is_asleep_at: int = 0  # the sleep level, 0 while awake
    _seqs: dict[str, _FakeSeq] = field(default_factory=dict)
    _slots: dict[int, int] = field(default_factory=dict)
    loras: set[str] = field(default_factory=set)  # the adapters added (a fake has no weights)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({self.eos_token_id})

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        assert not self.is_asleep_at, "a step while asleep"
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        self.num_steps += 1
        unknown = {c.lora for c in plan.chunks if c.lora is not None} - self.loras
        assert not unknown, f"a step with adapters never added: {unknown}"
        size = self.block_size
        for src, dst in plan.moves.copies:  # a forked beam's copy of its parent's last block
            for offset in range(size):
                if (token := self._slots.get(src * size + offset)) is not None:
                    self._slots[dst * size + offset] = token
        for chunk in plan.chunks:  # write every chunk first: one forward sees them all
            for offset, token in enumerate(chunk.token_ids):
                self._slots[self._slot(chunk, chunk.start_pos + offset)] = token
        return {c.seq_id: self._verify(c) for c in plan.chunks if c.needs_sample}

    def _slot(self, chunk: SeqChunk, pos: int) -> int:
        return slot_of(chunk.block_ids, pos, self.block_size)

    def _verify(self, chunk: SeqChunk) -> tuple[Sampled, ...]:
        """The next token, then one more after each draft equal to the token before it."""
        end = chunk.start_pos + len(chunk.token_ids) - chunk.num_draft_tokens
        run = [self._sample(chunk, end)]
        for draft in chunk.draft_ids:
            if run[-1] != draft:
                break
            end += 1
            run.append(self._sample(chunk, end))
        return tuple(Sampled(token_id=t) for t in run)

    def _sample(self, chunk: SeqChunk, end: int) -> int:
        """The token after the first `end` positions of the chunk's sequence."""
        seq = self._seqs.get(chunk.seq_id)
        if seq is None:
            context = self._context(chunk, end)
            reply = list(self.script(context, chunk.params, chunk.seed))
            seq = _FakeSeq(prompt_ids=context, params=chunk.params, seed=chunk.seed, reply=reply)
            self._seqs[chunk.seq_id] = seq
        elif self.reads_back and self._context(chunk, end) != seq.prompt_ids + tuple(seq.sampled):
            raise ValueError(f"{chunk.seq_id}: the KV cache does not hold the sequence's tokens")
        idx = len(seq.sampled)
        token = seq.reply[idx] if idx < len(seq.reply) else self.eos_token_id
        seq.sampled.append(token)
        return token

    def _context(self, chunk: SeqChunk, end: int) -> tuple[int, ...]:
        return tuple(self._slots[self._slot(chunk, pos)] for pos in range(end))

    def release(self, seq_id: str) -> None:
        self._seqs.pop(seq_id, None)

    def add_lora(self, adapter: LoraAdapter) -> None:
        self.loras.add(adapter.name)

    def remove_lora(self, name: str) -> None:
        self.loras.discard(name)

    def replace_weights(self, weights: Script) -> None:
        """Fake weights are a script: later tokens of every sequence come from it."""
        self.script = weights
        for seq in self._seqs.values():
            done = len(seq.sampled)
            seq.reply[done:] = list(weights(seq.prompt_ids, seq.params, seq.seed))[done:]

    def sleep(self, level: int) -> None:
        assert not self._seqs, "sleep with sequences alive"
        self._slots.clear()  # the KV cache is gone
        self.is_asleep_at = level

    def wake_up(self, weights: Script | None) -> None:
        assert self.is_asleep_at, "wake_up while awake"
        assert (weights is not None) == (self.is_asleep_at >= 2), "level 2 needs weights"
        if weights is not None:
            self.script = weights
        self.is_asleep_at = 0

    def num_sequences(self) -> int:
        return len(self._seqs)
