"""Draft-model proposals: a smaller model with the served model's tokenizer drafts its
greedy continuation of each sequence, through a Runner of its own (the same TorchRunner
code as the served model) over a paged KV cache of its own.

The Batcher calls `propose` on the device thread before a step. A sequence's first call
prefills its whole context into the draft's cache; later calls feed only what the served
model appended since (accepted drafts are fed again: the draft's cache past the last
token is never trusted). Proposals are point masses (the draft's argmax), so the served
model's verification keeps every request's distribution, and a seeded request's tokens,
exactly as without drafts (docs/speculative-decoding.md). When the draft's cache is
full, the sequences drafted least recently give their blocks back and prefill again
when next asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from atom.model.runner import Runner, SeqChunk, StepPlan
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.vocabulary.events import SamplingParams

if TYPE_CHECKING:
    from atom.model.speculation.proposer import DraftRequest

GREEDY = SamplingParams(temperature=0.0)


class DraftModelProposer:
    runs_a_model = True

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._kv = KVCacheManager(
            num_blocks=runner.num_blocks, block_size=runner.block_size, enable_prefix_caching=False
        )
        # Tokens of each sequence in the draft's cache, least recently drafted first.
        self._computed: dict[str, int] = {}

    def propose(self, requests: Sequence[DraftRequest]) -> Mapping[str, tuple[int, ...]]:
        """Each request's greedy continuation, `num_tokens` long: all sequences step
        together, one draft token each a forward, the first forward also feeding what
        each sequence gained since it was last drafted."""
        asked = {r.seq_id for r in requests}
        wanted = {r.seq_id: r.num_tokens for r in requests}
        chunks = [c for r in requests if (c := self._catch_up(r, asked)) is not None]
        drafts: dict[str, list[int]] = {c.seq_id: [] for c in chunks}
        while chunks:
            sampled = self._runner.step(StepPlan(chunks=tuple(chunks)))
            following = []
            for chunk in chunks:
                run = drafts[chunk.seq_id]
                run.append(sampled[chunk.seq_id][0].token_id)
                if len(run) < wanted[chunk.seq_id]:
                    start = chunk.start_pos + len(chunk.token_ids)
                    following.append(replace(chunk, token_ids=(run[-1],), start_pos=start))
            chunks = following
        return {seq_id: tuple(run) for seq_id, run in drafts.items()}

    def finish(self, seq_id: str, output_ids: Sequence[int]) -> None:
        self._drop(seq_id)

    def _catch_up(self, request: DraftRequest, asked: set[str]) -> SeqChunk | None:
        """The first forward's chunk for `request`: its tokens the draft's cache lacks
        (at least the last one, whose logits propose the first draft), with blocks for
        every draft fed after it; None when they do not fit."""
        seq_id, num_tokens = request.seq_id, len(request.token_ids)
        positions = num_tokens + request.num_tokens - 1  # the last draft is never fed
        if positions > self._runner.max_model_len or not self._allocate(seq_id, positions, asked):
            self._drop(seq_id)
            return None
        start = min(self._computed.pop(seq_id, 0), num_tokens - 1)
        self._computed[seq_id] = num_tokens  # once this call's first forward has run
        return SeqChunk(
            seq_id=seq_id,
            token_ids=tuple(request.token_ids[start:]),
            start_pos=start,
            block_ids=self._kv.table(seq_id),
            params=GREEDY,
            seed=0,
        )

    def _allocate(self, seq_id: str, positions: int, asked: set[str]) -> bool:
        """Blocks for `positions`, taken from sequences not asked this time, least
        recently drafted first, when the cache is short."""
        while not self._kv.allocate(seq_id, positions):
            idle = next((s for s in self._computed if s not in asked), None)
            if idle is None:
                return False
            self._drop(idle)
        return True

    def _drop(self, seq_id: str) -> None:
        self._computed.pop(seq_id, None)
        self._kv.free(seq_id)
        self._runner.release(seq_id)
