"""Overlapped steps (--async-scheduling): the Batcher queues a step of decodes before the
step ahead of it is done, and the answers stay those of one step at a time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio

from atom.actors.batcher import Batcher
from atom.actors.bus import EventBus
from atom.actors.device import DeviceThread
from atom.actors.outbox import Outbox
from atom.model.fake_runner import FakeRunner
from atom.model.runner import Sampled, StepPlan
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.events import (
    Abort,
    EngineStepped,
    Envelope,
    RequestReleased,
    SamplingParams,
    Submit,
    TokensSampled,
)
from tests.actors.test_batcher import drain

GREEDY = SamplingParams(temperature=0.0, max_tokens=100)
SEEDED = SamplingParams(temperature=1.0, seed=7, frequency_penalty=0.5, max_tokens=50)


@dataclass
class Watched:
    """A FakeRunner (which checks every step that its KV store holds each sequence) that
    also checks the history a penalty reads and that no sequence runs past its EOS, and
    notes for each step how many steps before it the Batcher had not recorded yet when
    it began."""

    runner: FakeRunner
    stepped: list[Envelope]  # the EngineStepped the bus published so far
    behind: list[int] = field(default_factory=list)
    sampled: dict[str, list[int]] = field(default_factory=dict)

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        self.behind.append(self.runner.num_steps - len(self.stepped))
        for chunk in plan.chunks:
            assert 0 not in chunk.token_ids  # no step runs a sequence past its EOS (0)
            if chunk.needs_sample and chunk.params.needs_history:
                assert chunk.output_ids == tuple(self.sampled.get(chunk.seq_id, ()))
        out = self.runner.step(plan)
        for seq_id, tokens in out.items():
            self.sampled.setdefault(seq_id, []).extend(t.token_id for t in tokens)
        return out

    def release(self, seq_id: str) -> None:
        self.sampled.pop(seq_id, None)
        self.runner.release(seq_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)


def make(overlap: bool, *, num_blocks: int = 4096) -> tuple[Batcher, Watched, list[Envelope]]:
    seen: list[Envelope] = []
    stepped: list[Envelope] = []
    bus = EventBus(clock=trio.current_time)
    bus.subscribe(seen.append)
    bus.subscribe(lambda e: stepped.append(e) if isinstance(e.event, EngineStepped) else None)
    runner = Watched(FakeRunner(eos_token_id=0, num_blocks=num_blocks, step_delay_s=0.002), stepped)
    return batcher_over(runner, bus, overlap, eos_token_ids=runner.eos_token_ids), runner, seen


def batcher_over(
    runner: Any, bus: EventBus, overlap: bool, *, eos_token_ids: frozenset[int]
) -> Batcher:
    """A Batcher over `runner` with room for 8 sequences and 64 tokens a step."""
    scheduler = Scheduler(
        kv=KVCacheManager(num_blocks=runner.num_blocks, block_size=runner.block_size),
        max_num_seqs=8,
        max_num_batched_tokens=64,
        eos_token_ids=eos_token_ids,
        max_model_len=256,
    )
    return Batcher(
        runner,
        scheduler,
        publish=bus.publish,
        max_queued_requests=8,
        device=DeviceThread(),
        overlap=overlap,
    )


async def serve(
    batcher: Batcher, runner: Any, submits: list[Submit], late: Submit | None = None
) -> None:
    """Run `submits` (and `late`, submitted once the first has tokens) to their ends,
    until the runner has forgotten every sequence (a release may follow the step
    planned ahead)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        outboxes = [Outbox() for _ in submits]
        for one, outbox in zip(submits, outboxes, strict=True):
            batcher.submit_nowait(one, outbox)
        if late is not None:
            await outboxes[0].receive_batch()
            outboxes.append(Outbox())
            batcher.submit_nowait(late, outboxes[-1])
        for outbox in outboxes:
            await drain(outbox)
        with trio.fail_after(30):
            while runner.num_sequences():
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()


def answers(seen: list[Envelope]) -> dict[tuple[str, int], list[tuple[int, ...] | str | None]]:
    """Each choice's tokens, then how it finished."""
    out: dict[tuple[str, int], list[tuple[int, ...] | str | None]] = {}
    for envelope in seen:
        event = envelope.event
        if isinstance(event, TokensSampled):
            out.setdefault((event.request_id, event.choice_idx), []).append(event.token_ids)
            if event.finish_reason is not None:
                out[(event.request_id, event.choice_idx)].append(event.finish_reason)
    return out


async def serve_mix(overlap: bool, *, num_blocks: int = 4096) -> tuple[Watched, list[Envelope]]:
    """Greedy, seeded with a penalty, n=2 over a prompt longer than a step, a max_tokens
    cut, and a request that arrives while the others decode."""
    batcher, runner, seen = make(overlap, num_blocks=num_blocks)
    submits = [
        Submit(request_id="greedy", prompt_ids=(5, 6, 7, 8, 9), params=GREEDY),
        Submit(request_id="seeded", prompt_ids=(3, 4, 5, 6), params=SEEDED),
        Submit(
            request_id="long",
            prompt_ids=tuple(range(1, 100)),
            params=SamplingParams(temperature=0.0, max_tokens=20),
            choices_per_prompt=2,
        ),
    ]
    late = Submit(request_id="late", prompt_ids=(11, 12, 13), params=GREEDY)
    await serve(batcher, runner, submits, late)
    return runner, seen


async def test_overlapped_steps_answer_as_one_step_at_a_time() -> None:
    alone, seen_alone = await serve_mix(overlap=False)
    overlapped, seen_overlapped = await serve_mix(overlap=True)
    assert answers(seen_overlapped) == answers(seen_alone)
    assert len(answers(seen_alone)) == 5 and answers(seen_alone)[("long", 1)][-1] == "length"
    assert max(alone.behind) == 0  # one step at a time: each began after the last was recorded
    assert max(overlapped.behind) == 1  # some began before the one ahead of it was recorded


async def test_without_free_blocks_for_a_step_ahead_the_next_waits() -> None:
    """A cache too small for every sequence's token ahead at some step (and for all of
    them, so it preempts): that step waits for the one before, the answers stay."""
    _, seen_alone = await serve_mix(overlap=False, num_blocks=10)
    _, seen_overlapped = await serve_mix(overlap=True, num_blocks=10)
    assert answers(seen_overlapped) == answers(seen_alone)


@pytest.mark.parametrize("overlap", [False, True])
async def test_an_abort_is_released_after_at_most_the_step_under_way(overlap: bool) -> None:
    batcher, runner, seen = make(overlap)
    runner.runner.script = lambda prompt, params, seed: [1] * 1000
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        outbox = Outbox()
        batcher.submit_nowait(Submit(request_id="a", prompt_ids=(5, 6), params=GREEDY), outbox)
        for _ in range(3):
            await outbox.receive_batch()
        asked = len([e for e in seen if isinstance(e.event, EngineStepped)])
        batcher.abort_nowait(Abort(request_id="a"))
        await drain(outbox)
        with trio.fail_after(10):
            while runner.num_sequences():
                await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    events = [e.event for e in seen]
    released = next(i for i, e in enumerate(events) if isinstance(e, RequestReleased))
    steps_before = len([e for e in events[:released] if isinstance(e, EngineStepped)])
    assert steps_before - asked <= 1
    last_token = max(i for i, e in enumerate(events) if isinstance(e, TokensSampled))
    assert last_token < released  # nothing of it is delivered after its release


async def test_a_tiny_llama_answers_the_same_overlapped() -> None:
    """ATOM's own forward on a random-weight Llama (a TorchRunner, its sampler and
    penalties): greedy, seeded with a penalty, and n=2, overlapped or not."""
    from transformers import LlamaConfig

    from tests.model.tiny import torch_runner

    runner = torch_runner(LlamaConfig, impl="atom")
    seeded = SamplingParams(temperature=0.8, seed=3, repetition_penalty=1.3, max_tokens=12)
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    submits = [
        Submit(request_id="g", prompt_ids=(5, 6, 7, 8), params=greedy),
        Submit(request_id="s", prompt_ids=(9, 3, 4), params=seeded, choices_per_prompt=2),
    ]

    async def served(overlap: bool) -> list[Envelope]:
        bus = EventBus(clock=trio.current_time)
        seen: list[Envelope] = []
        bus.subscribe(seen.append)
        never = frozenset({-2})  # no EOS: every answer runs to max_tokens
        await serve(batcher_over(runner, bus, overlap, eos_token_ids=never), runner, submits)
        return seen

    alone = answers(await served(overlap=False))
    assert answers(await served(overlap=True)) == alone
    assert [len(alone[("s", i)]) for i in (0, 1)] == [13, 13]  # 12 tokens and "length"
