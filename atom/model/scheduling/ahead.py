"""Overlapped steps (`--async-scheduling`): step N+1 is planned and queued on the device
thread before step N's tokens are known, so the device never waits for the event loop.

The Scheduler plans such a step (`Scheduler.schedule_ahead`) when step N samples for
every sequence in it: each feeds the token step N samples for it, which the plan names
with a placeholder, and prompts step N left out (one admitted meanwhile) take what
budget and free blocks are left, preempting nothing. The device thread runs the two
steps in order, so when it starts step N+1 it holds step N's result and `follow` puts
the tokens in (and into the history that penalties and grammars read). A sequence
that step N ends with a stop token is left out of step N+1 there (nothing would take
its token, and a grammar it completed has none to allow); one that a stop string or an
abort ends meanwhile still runs that step, its token dropped."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from atom.model.runner import Sampled, SeqChunk, StepPlan
from atom.model.scheduling.sequence import PLACEHOLDER, is_stop_token

__all__ = ["PLACEHOLDER", "follow"]


def follow(
    plan: StepPlan, before: Mapping[str, tuple[Sampled, ...]], eos_token_ids: frozenset[int]
) -> StepPlan:
    """`plan`, planned ahead, with each placeholder replaced by the token its sequence
    sampled in the step `before` it, and without the sequences that token ended."""
    chunks = []
    for chunk in plan.chunks:
        sampled = before.get(chunk.seq_id)
        if sampled is None:
            chunks.append(chunk)  # a prompt's chunk: nothing in it comes from `before`
        elif not is_stop_token(sampled[-1].token_id, chunk.params, eos_token_ids):
            chunks.append(_filled(chunk, sampled[-1].token_id))
    return replace(plan, chunks=tuple(chunks))


def _filled(chunk: SeqChunk, token_id: int) -> SeqChunk:
    assert chunk.token_ids == (PLACEHOLDER,), "a chunk planned ahead feeds one placeholder"
    if not chunk.params.needs_history:
        return replace(chunk, token_ids=(token_id,))
    return replace(chunk, token_ids=(token_id,), output_ids=(*chunk.output_ids, token_id))
