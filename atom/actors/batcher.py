"""Batcher: the one actor that owns the model runner and the scheduler.

Loop: apply aborts → admit queued requests while sequences are free → plan one
step → run it on the device thread (HTTP stays responsive) → publish sampled
tokens to each request's Outbox. New requests join the running batch at step
boundaries (continuous batching). The submit queue is bounded: when it is full
`submit_nowait` raises Overloaded and the client gets a 429.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import trio

from atom.actors.device import DeviceThread
from atom.actors.outbox import Outbox
from atom.errors import AtomError, Overloaded
from atom.events import (
    Abort,
    EngineStepped,
    Envelope,
    Event,
    RequestReleased,
    RequestScheduled,
    Submit,
    TokensSampled,
)
from atom.model.runner import Runner
from atom.model.scheduler import Scheduler, SeqOutput


@dataclass(frozen=True, slots=True, kw_only=True)
class BatcherStatistics:
    num_running_requests: int
    num_running_seqs: int
    num_queued_requests: int
    num_runner_seqs: int
    num_steps: int


@dataclass(slots=True)
class _Admitted:
    submit: Submit
    outbox: Outbox
    num_live_seqs: int


class Batcher:
    def __init__(
        self,
        runner: Runner,
        scheduler: Scheduler,
        *,
        publish: Callable[[Event], Envelope],
        max_queued_requests: int,
        device: DeviceThread,
    ) -> None:
        self._runner = runner
        self._scheduler = scheduler
        self._publish = publish
        self._to_queue, self._queue = trio.open_memory_channel[tuple[Submit, Outbox]](
            max_queued_requests
        )
        self._to_aborts, self._aborts = trio.open_memory_channel[Abort](math.inf)
        self._next: tuple[Submit, Outbox] | None = None  # pulled from the queue, not admitted
        self._running: dict[str, _Admitted] = {}
        self._wake = trio.Event()
        self._device = device  # every runner call happens on this one thread
        self._num_steps = 0

    # --- called by request actors (same Trio thread) ---------------------------

    def submit_nowait(self, submit: Submit, outbox: Outbox) -> None:
        """Queue a request; raises Overloaded when the queue is full. Never blocks."""
        try:
            self._to_queue.send_nowait((submit, outbox))
        except trio.WouldBlock:
            raise Overloaded("the server is overloaded; retry later") from None
        self._wake.set()

    def abort_nowait(self, abort: Abort) -> None:
        """Drop a request (or one choice) at the next step boundary. Never fails."""
        self._to_aborts.send_nowait(abort)
        self._wake.set()

    def statistics(self) -> BatcherStatistics:
        queued = self._queue.statistics().current_buffer_used + (self._next is not None)
        return BatcherStatistics(
            num_running_requests=len(self._running),
            num_running_seqs=self._scheduler.num_seqs,
            num_queued_requests=queued,
            num_runner_seqs=self._runner.num_sequences(),
            num_steps=self._num_steps,
        )

    # --- the loop ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            self._apply_aborts()
            self._admit()
            plan = self._scheduler.schedule()
            if not plan.chunks:
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            stats = self._scheduler.stats
            sampled = await self._device.run_sync(self._runner.step, plan)
            self._num_steps += 1
            for output in self._scheduler.update(plan, sampled):
                self._deliver(output)
            self._publish(
                EngineStepped(
                    num_tokens=plan.num_tokens,
                    num_seqs=len(plan.chunks),
                    kv_cache_usage=self._scheduler.kv.usage,
                    num_preemptions=stats.num_preemptions,
                    prefix_cache_queries=stats.prefix_cache_queries,
                    prefix_cache_hits=stats.prefix_cache_hits,
                )
            )
            await trio.lowlevel.checkpoint()  # let request actors run between steps

    def fail_all(self, error: AtomError) -> None:
        """Close every outbox with `error` (the Batcher is dying). Idempotent."""
        pending = [a.outbox for a in self._running.values()]
        if self._next is not None:
            pending.append(self._next[1])
        while True:
            try:
                pending.append(self._queue.receive_nowait()[1])
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        for outbox in pending:
            outbox.close(error)
        self._to_queue.close()

    def _apply_aborts(self) -> None:
        while True:
            try:
                abort = self._aborts.receive_nowait()
            except trio.WouldBlock:
                break
            admitted = self._running.get(abort.request_id)
            if admitted is None:
                continue  # not admitted yet (its abandoned outbox is dropped on admission)
            for seq in self._scheduler.seqs_of(abort.request_id):
                if abort.choice_idx is None or abort.choice_idx == seq.choice_idx:
                    self._release_seq(seq.seq_id, abort.request_id)

    def _admit(self) -> None:
        while True:
            if self._next is None:
                try:
                    self._next = self._queue.receive_nowait()
                except trio.WouldBlock:
                    return
            submit, outbox = self._next
            if outbox.is_abandoned:
                self._next = None
                outbox.close()
                self._publish(RequestReleased(request_id=submit.request_id, was_scheduled=False))
                continue
            if not self._scheduler.can_admit(submit.total_choices):
                return
            self._next = None
            self._scheduler.add(submit)
            self._running[submit.request_id] = _Admitted(submit, outbox, submit.total_choices)
            self._publish(
                RequestScheduled(request_id=submit.request_id, num_running=len(self._running))
            )

    def _deliver(self, output: SeqOutput) -> None:
        seq = output.seq
        admitted = self._running[seq.request_id]
        event = TokensSampled(
            request_id=seq.request_id,
            choice_idx=seq.choice_idx,
            token_ids=(output.token_id,),
            finish_reason=output.finish_reason,
            num_cached_tokens=seq.num_cached_tokens if output.is_first else None,
            logprobs=None if output.logprobs is None else (output.logprobs,),
            prompt_logprobs=output.prompt_logprobs,
        )
        admitted.outbox.put_nowait(self._publish(event))
        if output.finish_reason is not None:
            self._release_seq(seq.seq_id, seq.request_id)

    def _release_seq(self, seq_id: str, request_id: str) -> None:
        self._scheduler.remove(seq_id)
        self._runner.release(seq_id)
        admitted = self._running[request_id]
        admitted.num_live_seqs -= 1
        if admitted.num_live_seqs == 0:
            del self._running[request_id]
            admitted.outbox.close()
            self._publish(RequestReleased(request_id=request_id, was_scheduled=True))
