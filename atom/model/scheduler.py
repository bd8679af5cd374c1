"""Scheduler: sequence bookkeeping and one token budget per step (pure, no trio, no torch).

Each step: every decoding sequence gets one token first, then prefilling
sequences get what is left of the budget, oldest first; a prompt longer than
the budget is prefilled over several steps (chunked prefill).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from atom.events import FinishReason, SamplingParams, Submit
from atom.model.runner import SeqChunk, StepPlan


@dataclass(slots=True, kw_only=True)
class Sequence:
    """One choice of one request: prompt plus output so far. Owned by the Scheduler."""

    seq_id: str
    request_id: str
    choice_idx: int
    params: SamplingParams
    seed: int
    token_ids: list[int]
    num_prompt_tokens: int
    num_computed: int = 0

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqOutput:
    """A token sampled for `seq` this step; `finish_reason` when the sequence just ended."""

    seq: Sequence
    token_id: int
    finish_reason: FinishReason | None


def choice_seed(seed: int, choice_idx: int) -> int:
    """Each choice of a seeded request gets its own stream of randomness."""
    return (seed * 1_000_003 + choice_idx) % (1 << 63)


class Scheduler:
    def __init__(
        self,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        eos_token_ids: frozenset[int],
        max_model_len: int,
    ) -> None:
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self._eos = eos_token_ids
        self._max_model_len = max_model_len
        self._seqs: dict[str, Sequence] = {}  # insertion order is arrival order

    @property
    def num_seqs(self) -> int:
        return len(self._seqs)

    def can_admit(self, num_seqs: int) -> bool:
        return self.num_seqs + num_seqs <= self.max_num_seqs

    def add(self, submit: Submit) -> list[Sequence]:
        """Start one sequence per choice of `submit`."""
        new = [
            Sequence(
                seq_id=f"{submit.request_id}/{idx}",
                request_id=submit.request_id,
                choice_idx=idx,
                params=submit.params,
                seed=choice_seed(submit.params.seed, idx),
                token_ids=list(submit.prompt_ids),
                num_prompt_tokens=len(submit.prompt_ids),
            )
            for idx in range(submit.num_choices)
        ]
        self._seqs.update((s.seq_id, s) for s in new)
        return new

    def remove(self, seq_id: str) -> Sequence | None:
        return self._seqs.pop(seq_id, None)

    def seqs_of(self, request_id: str) -> list[Sequence]:
        return [s for s in self._seqs.values() if s.request_id == request_id]

    def schedule(self) -> StepPlan:
        """Plan one step within the token budget: decodes first, then prefill chunks."""
        budget = self.max_num_batched_tokens
        decodes = [s for s in self._seqs.values() if s.num_computed >= s.num_prompt_tokens]
        prefills = [s for s in self._seqs.values() if s.num_computed < s.num_prompt_tokens]
        chunks = [self._chunk(s, s.num_computed, len(s.token_ids)) for s in decodes[:budget]]
        budget -= len(chunks)
        for s in prefills:
            if budget <= 0:
                break
            end = min(s.num_prompt_tokens, s.num_computed + budget)
            chunks.append(self._chunk(s, s.num_computed, end))
            budget -= end - s.num_computed
        return StepPlan(chunks=tuple(chunks))

    def _chunk(self, seq: Sequence, start: int, end: int) -> SeqChunk:
        return SeqChunk(
            seq_id=seq.seq_id,
            token_ids=tuple(seq.token_ids[start:end]),
            start_pos=start,
            params=seq.params,
            seed=seq.seed,
            needs_sample=end == len(seq.token_ids),
        )

    def update(self, plan: StepPlan, sampled: Mapping[str, int]) -> list[SeqOutput]:
        """Record a finished step; finished sequences are removed and reported."""
        outputs = []
        for chunk in plan.chunks:
            seq = self._seqs.get(chunk.seq_id)
            if seq is None:
                continue
            seq.num_computed = chunk.start_pos + len(chunk.token_ids)
            if chunk.needs_sample:
                seq.token_ids.append(sampled[chunk.seq_id])
                reason = self._finish_reason(seq)
                if reason is not None:
                    del self._seqs[seq.seq_id]
                outputs.append(SeqOutput(seq=seq, token_id=seq.token_ids[-1], finish_reason=reason))
        return outputs

    def _finish_reason(self, seq: Sequence) -> FinishReason | None:
        if seq.token_ids[-1] in self._eos and not seq.params.ignore_eos:
            return FinishReason.STOP
        if seq.num_output >= seq.params.max_tokens or len(seq.token_ids) >= self._max_model_len:
            return FinishReason.LENGTH
        return None
