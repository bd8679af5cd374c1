from __future__ import annotations

import trio
import trio.testing

from atom.actors.batcher import Batcher
from atom.actors.bus import EventBus
from atom.actors.device import DeviceThread
from atom.actors.outbox import Outbox
from atom.model.fake_runner import FakeRunner
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.errors import EngineFailed, Overloaded
from atom.vocabulary.events import (
    Abort,
    Envelope,
    PromptChunkComputed,
    RequestReleased,
    SamplingParams,
    Submit,
    TokensSampled,
)

PARAMS = SamplingParams(temperature=0.0, max_tokens=100)


def make(
    runner: FakeRunner, *, max_queued: int = 8, max_num_seqs: int = 8
) -> tuple[Batcher, list[Envelope]]:
    bus = EventBus(clock=trio.current_time)
    seen: list[Envelope] = []
    bus.subscribe(seen.append)
    scheduler = Scheduler(
        kv=KVCacheManager(num_blocks=runner.num_blocks, block_size=runner.block_size),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=64,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=512,
    )
    batcher = Batcher(
        runner,
        scheduler,
        publish=bus.publish,
        max_queued_requests=max_queued,
        device=DeviceThread(),
    )
    return batcher, seen


def submit(rid: str, n: int = 1, prompt: tuple[int, ...] = (5, 6, 7)) -> Submit:
    return Submit(request_id=rid, prompt_ids=prompt, params=PARAMS, choices_per_prompt=n)


async def drain(outbox: Outbox) -> list[TokensSampled]:
    out: list[TokensSampled] = []
    while batch := await outbox.receive_batch():
        out.extend(e.event for e in batch)  # type: ignore[misc]
    return out


async def test_requests_are_batched_and_finish_with_eos() -> None:
    runner = FakeRunner(eos_token_id=0)
    batcher, seen = make(runner)
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        a, b = Outbox(), Outbox()
        batcher.submit_nowait(submit("a"), a)
        batcher.submit_nowait(submit("b", n=2, prompt=(9, 8)), b)
        got_a, got_b = await drain(a), await drain(b)
        nursery.cancel_scope.cancel()
    assert [t.token_ids[0] for t in got_a] == [7, 6, 5, 0]
    assert got_a[-1].finish_reason == "stop"
    assert sorted((t.choice_idx, t.token_ids[0]) for t in got_b) == sorted(
        [(0, 8), (0, 9), (0, 0), (1, 8), (1, 9), (1, 0)]
    )
    assert runner.num_steps == 4  # both requests shared every step
    assert runner.num_sequences() == 0
    released = [e.event.request_id for e in seen if isinstance(e.event, RequestReleased)]
    assert sorted(released) == ["a", "b"]


async def test_a_prompt_longer_than_a_step_reports_each_chunk_before_its_first_token() -> None:
    runner = FakeRunner(eos_token_id=0)
    batcher, seen = make(runner)  # 64 tokens a step
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        long, short = Outbox(), Outbox()
        batcher.submit_nowait(submit("long", n=2, prompt=tuple(range(1, 151))), long)
        batcher.submit_nowait(submit("short"), short)
        await drain(long), await drain(short)
        nursery.cancel_scope.cancel()
    chunks = [e.event for e in seen if isinstance(e.event, PromptChunkComputed)]
    assert {c.request_id for c in chunks} == {"long"}  # "short" fits a step with room
    first = [c for c in chunks if c.choice_idx == 0]
    assert [(c.num_tokens, c.num_computed) for c in first] == [(64, 64), (64, 128)]
    assert all(c.num_prompt_tokens == 150 for c in chunks)
    events = [e.event for e in seen if getattr(e.event, "request_id", None) == "long"]
    first_token = next(i for i, e in enumerate(events) if isinstance(e, TokensSampled))
    assert all(events.index(c) < first_token for c in first)


async def test_abort_frees_everything_at_the_next_step() -> None:
    runner = FakeRunner(eos_token_id=0, script=lambda p, s, seed: [1] * 1000)
    batcher, _ = make(runner)
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        outbox = Outbox()
        batcher.submit_nowait(submit("a", n=3), outbox)
        await outbox.receive_batch()
        batcher.abort_nowait(Abort(request_id="a"))
        await drain(outbox)
        stats = batcher.statistics()
        nursery.cancel_scope.cancel()
    assert outbox.is_closed
    assert (stats.num_running_requests, stats.num_running_seqs, stats.num_runner_seqs) == (0, 0, 0)


async def test_aborting_one_choice_keeps_the_others() -> None:
    runner = FakeRunner(eos_token_id=0)
    batcher, _ = make(runner)
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        outbox = Outbox()
        batcher.submit_nowait(submit("a", n=2, prompt=tuple(range(1, 30))), outbox)
        await outbox.receive_batch()
        batcher.abort_nowait(Abort(request_id="a", choice_idx=0))
        rest = await drain(outbox)
        nursery.cancel_scope.cancel()
    assert rest[-1].choice_idx == 1 and rest[-1].finish_reason == "stop"
    assert runner.num_sequences() == 0


async def test_full_queue_is_overloaded_never_unbounded() -> None:
    runner = FakeRunner(eos_token_id=0)
    batcher, _ = make(runner, max_queued=2)
    batcher.submit_nowait(submit("a"), Outbox())
    batcher.submit_nowait(submit("b"), Outbox())
    try:
        batcher.submit_nowait(submit("c"), Outbox())
    except Overloaded as exc:
        assert exc.status == 429
    else:
        raise AssertionError("the third submit should be refused")


async def test_abandoned_request_is_dropped_before_admission() -> None:
    runner = FakeRunner(eos_token_id=0)
    batcher, seen = make(runner)
    outbox = Outbox()
    batcher.submit_nowait(submit("a"), outbox)
    outbox.abandon()
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert outbox.is_closed and runner.num_steps == 0
    assert [e.event for e in seen] == [RequestReleased(request_id="a", was_scheduled=False)]


async def test_fail_all_delivers_the_error_to_every_pending_request() -> None:
    runner = FakeRunner(eos_token_id=0)
    batcher, _ = make(runner, max_num_seqs=1)
    running, queued = Outbox(), Outbox()
    batcher.submit_nowait(submit("a", prompt=tuple(range(1, 50))), running)
    batcher.submit_nowait(submit("b"), queued)
    batcher.fail_all(EngineFailed("boom"))
    for outbox in (running, queued):
        try:
            await outbox.receive_batch()
        except EngineFailed as exc:
            assert exc.message == "boom"
        else:
            raise AssertionError("the pending request should fail")


async def test_under_priority_the_queue_admits_the_lowest_value_first() -> None:
    runner = FakeRunner(eos_token_id=0)
    bus = EventBus(clock=trio.current_time)
    seen: list[Envelope] = []
    bus.subscribe(seen.append)
    scheduler = Scheduler(
        kv=KVCacheManager(num_blocks=runner.num_blocks, block_size=runner.block_size),
        max_num_seqs=1,  # one at a time: the order of admission is the order of service
        max_num_batched_tokens=64,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=512,
        by_priority=True,
    )
    batcher = Batcher(
        runner, scheduler, publish=bus.publish, max_queued_requests=8, device=DeviceThread()
    )
    order = [("late-low", 9), ("urgent", -1), ("normal", 0), ("late-low-2", 9), ("normal-2", 0)]
    outboxes = [Outbox() for _ in order]
    for (rid, priority), outbox in zip(order, outboxes, strict=True):
        params = SamplingParams(temperature=0.0, max_tokens=2)
        submit = Submit(request_id=rid, prompt_ids=(5, 6), params=params, priority=priority)
        batcher.submit_nowait(submit, outbox)
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        for outbox in outboxes:
            await drain(outbox)
        nursery.cancel_scope.cancel()
    scheduled = [e.event.request_id for e in seen if e.event.type == "request_scheduled"]
    assert scheduled == ["urgent", "normal", "normal-2", "late-low", "late-low-2"]
