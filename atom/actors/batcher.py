"""Batcher: the one actor that owns the model runner and the scheduler.

Loop: apply aborts → admit queued requests while sequences are free → plan one
step → run it on the device thread (HTTP stays responsive) → publish sampled
tokens to each request's Outbox. New requests join the running batch at step
boundaries (continuous batching). The WaitQueue is bounded (full: Overloaded, a 429)
and a request that waits in it longer than `max_queue_wait_s` gets a QueueTimeout (503).
Between two steps it also changes the model's state for the admin routes (new weights,
LoRA adapters, sleep, wake-up): jobs run at the step boundary, so a step never sees a
half-changed runner. With overlapped steps (`overlap`, --async-scheduling) the next step
is queued on the device thread before the step ahead of it is done, and publishing
that one's tokens runs while the device works (atom/model/scheduling/ahead.py); a step
after a prompt's middle chunk, or with drafts or a job, waits for an idle device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial

import trio

from atom.actors.batcher_records import (
    Admitted,
    BatcherStatistics,
    BoundaryJobs,
    InFlight,
    Queued,
    Ran,
)
from atom.actors.device import DeviceThread, Handoff
from atom.actors.disk_tier import DiskTierLink
from atom.actors.idle import IdleWatch
from atom.actors.model_state import ModelState
from atom.actors.outbox import Outbox
from atom.actors.profiler import Phases
from atom.actors.wait_queue import WaitQueue
from atom.model.kv_tier import DiskTier
from atom.model.runner import Runner, StepPlan
from atom.model.scheduling.ahead import follow
from atom.model.scheduling.scheduler import Scheduler
from atom.model.scheduling.sequence import SeqOutput, StepStats
from atom.vocabulary.errors import (
    AtomError,
    EngineFailed,
    ModelNotFound,
    QueueTimeout,
)
from atom.vocabulary.events import (
    Abort,
    EngineIdle,
    EngineStepped,
    Envelope,
    Event,
    PrefixCacheReset,
    PromptChunkComputed,
    RequestReleased,
    RequestScheduled,
    Submit,
)


class Batcher(ModelState):
    def __init__(
        self,
        runner: Runner,
        scheduler: Scheduler,
        *,
        publish: Callable[[Event], Envelope],
        max_queued_requests: int,
        max_queue_wait_s: float = math.inf,
        device: DeviceThread,
        model: str = "",
        reject_while_asleep: bool = True,
        phases: Phases | None = None,
        disk: DiskTier | None = None,
        overlap: bool = False,
    ) -> None:
        self._model = model  # the served name its engine events carry
        self._runner = runner
        self._scheduler = scheduler
        self._publish = publish
        self._queue = WaitQueue(
            max_queued_requests, max_queue_wait_s, by_priority=scheduler.by_priority
        )
        self._is_closed = False
        self._to_aborts, self._aborts = trio.open_memory_channel[Abort](math.inf)
        self._running: dict[str, Admitted] = {}
        self._wake = trio.Event()
        self.idle = IdleWatch(lambda: self.is_idle)  # an unload waits on it
        self._device = device  # every runner call happens on this one thread
        self._disk = None if disk is None else DiskTierLink(disk, scheduler, device)
        self._num_steps = 0
        self._overlap = overlap and disk is None and scheduler.proposer is None  # _step_ahead
        self._ahead: InFlight | None = None  # the step planned ahead, queued on the device
        self._published_usage = 0.0  # the KV usage the last EngineStepped/EngineIdle said
        self._is_reset_asked = False  # POST /reset_prefix_cache, applied between steps
        self._jobs = BoundaryJobs(wake=lambda: self._wake.set())  # model-state changes
        self.loras: set[str] = set()  # the LoRA adapters the runner holds (docs/lora.md)
        self.sleep_level = 0  # POST /sleep's level from the ask to the wake-up; 0: awake
        self.is_asleep = False  # the runner has freed its cache (and maybe its weights)
        self._reject_while_asleep = reject_while_asleep  # else requests wait in the queue
        self._phase = partial((phases or Phases()).enter, f"batcher {model}")  # for a profile

    # --- called by request actors (same Trio thread) ---------------------------

    def submit_nowait(self, submit: Submit, outbox: Outbox) -> None:
        """Queue a request; raises Overloaded when the queue is full. Never blocks."""
        if self._is_closed:
            raise EngineFailed("the engine is not running")
        if self.sleep_level and self._reject_while_asleep:
            raise self._asleep()
        if submit.lora is not None and submit.lora not in self.loras:
            raise ModelNotFound(f"the adapter `{submit.lora}` is no longer served", param="model")
        self._queue.put(submit, outbox)
        self._wake.set()

    def reset_prefix_cache_nowait(self) -> None:
        """Forget the cached prefixes at the next step boundary (PrefixCacheReset)."""
        self._is_reset_asked = True
        self._wake.set()

    def abort_nowait(self, abort: Abort) -> None:
        """Drop a request (or one choice) at the next step boundary. Never fails."""
        self._to_aborts.send_nowait(abort)
        self._wake.set()

    @property
    def is_idle(self) -> bool:
        """Nothing queued or running, no step under way: stopping now cuts nothing."""
        return not self._queue and not self._running and self._ahead is None

    def statistics(self) -> BatcherStatistics:
        return BatcherStatistics(
            num_running_requests=len(self._running),
            num_running_seqs=self._scheduler.num_seqs,
            num_queued_requests=len(self._queue),
            num_runner_seqs=self._runner.num_sequences(),
            num_steps=self._num_steps,
        )

    # --- the loop ----------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await self._loop()
        finally:
            if self._disk is not None and not self.is_asleep:
                await self._disk.close(self._runner)  # the cache's blocks outlive the process

    async def _loop(self) -> None:
        while True:
            await trio.lowlevel.checkpoint_if_cancelled()  # (a step under way runs out)
            if self._ahead is None:  # the device is idle: a step boundary
                await self._jobs.run_due(is_running=bool(self._running))
                self._apply_reset()
            self._apply_aborts()
            self._admit()
            step = self._ahead or await self._next_step()
            if step is None:
                await self._rest()
                continue
            self._ahead = self._step_ahead(step) if self._overlap else None
            self._phase("model step")
            ran = await step.running.result()
            self._phase("delivery")
            self._record(ran, step.stats)
            self._phase("between steps")
            self.idle.changed()
            # (request actors take the step's tokens while the device runs the next one)

    async def _next_step(self) -> InFlight | None:
        """Plan a step and start it on the device thread; None if there is nothing to do."""
        if self._disk is not None:
            await self._disk.fetch()
        self._phase("schedule")
        plan = self._scheduler.schedule(await self._drafts())
        if not plan.chunks:
            return None
        return InFlight(plan, self._scheduler.stats, self._device.start(self._run, plan))

    def _step_ahead(self, step: InFlight) -> InFlight | None:
        """With overlapped steps: plan the step after `step` and queue it behind `step`
        on the device thread (atom/model/scheduling/ahead.py), unless the next boundary
        has work that needs an idle device (a model-state job, a prefix-cache reset) or
        the Scheduler cannot plan it ahead. `_overlap` (--async-scheduling) is off with
        the disk tier or a proposer: their reads and drafts come at an idle boundary."""
        if self._jobs.is_due(is_running=bool(self._running)) or self._is_reset_asked:
            return None
        plan = self._scheduler.schedule_ahead(step.plan)
        if plan is None:
            return None
        running = self._device.start(self._step_after, step.running, plan)
        return InFlight(plan, self._scheduler.stats, running)

    def _run(self, plan: StepPlan) -> Ran:
        """Device thread: one step."""
        return Ran(plan, self._runner.step(plan))

    def _step_after(self, before: Handoff[Ran], plan: StepPlan) -> Ran:
        """Device thread: a step planned ahead, run with the tokens of the step `before`
        it (which this thread has just run)."""
        return self._run(follow(plan, before.value().sampled, self._runner.eos_token_ids))

    async def _rest(self) -> None:
        """Nothing to step: say the KV usage if aborts freed blocks, then wait for work."""
        if self._scheduler.kv.usage != self._published_usage:
            self._published_usage = self._scheduler.kv.usage
            self._publish(EngineIdle(model=self._model, kv_cache_usage=self._published_usage))
        self._wake = trio.Event()
        self.idle.changed()
        self._phase("idle")
        await self._wake.wait()
        self._phase("between steps")

    async def _drafts(self) -> Mapping[str, tuple[int, ...]]:
        """This step's drafts (speculative decoding); a draft model runs on the device."""
        proposer = self._scheduler.proposer
        if proposer is None:
            return {}
        requests = self._scheduler.draft_requests()
        if not proposer.runs_a_model:
            return proposer.propose(requests)
        return await self._device.run_sync(proposer.propose, requests) if requests else {}

    def _apply_reset(self) -> None:
        if self._is_reset_asked:
            self._is_reset_asked = False
            num_blocks = self._scheduler.kv.forget_prefixes()
            self._publish(PrefixCacheReset(model=self._model, num_blocks=num_blocks))

    def fail_all(self, error: AtomError) -> None:
        """Close every outbox with `error` (the Batcher is dying) and refuse new submits.
        Idempotent."""
        self._is_closed = True
        self._jobs.fail_all(error)
        for outbox in [
            *(a.outbox for a in self._running.values()),
            *(q.outbox for q in self._queue.take_all()),
        ]:
            outbox.close(error)

    def _apply_aborts(self) -> None:
        while True:
            try:
                abort = self._aborts.receive_nowait()
            except trio.WouldBlock:
                break
            if abort.request_id not in self._running:
                continue  # not admitted yet (its abandoned outbox is dropped on admission)
            self._end_choices(
                abort.request_id, self._scheduler.drop(abort.request_id, abort.choice_idx)
            )
            self._forget_released()

    def _admit(self) -> None:
        """Admit queued requests oldest first while the scheduler has room, dropping the
        abandoned ones as they reach the head, after failing those that waited too long."""
        for queued in self._queue.expired():
            wait = f"{self._queue.max_wait_s:g}"
            timeout = QueueTimeout(f"the request waited more than {wait} s in the queue")
            self._refuse(queued, timeout)
        while self._queue and not self.sleep_level:
            head = self._queue.head()
            if not head.outbox.is_abandoned and not self._scheduler.can_admit(
                head.submit.total_choices
            ):
                return
            self._queue.remove(head)
            if head.outbox.is_abandoned:
                head.outbox.close()
                self._publish(
                    RequestReleased(request_id=head.submit.request_id, was_scheduled=False)
                )
                continue
            submit = head.submit
            self._scheduler.add(submit)
            self._running[submit.request_id] = Admitted(submit, head.outbox, submit.total_choices)
            self._publish(
                RequestScheduled(request_id=submit.request_id, num_running=len(self._running))
            )

    def _refuse(self, queued: Queued, error: AtomError) -> None:
        """A queued request that will not be admitted: its client gets `error`."""
        queued.outbox.close(error)
        self._publish(RequestReleased(request_id=queued.submit.request_id, was_scheduled=False))

    def _deliver(self, output: SeqOutput) -> None:
        request_id = output.seq.request_id
        self._running[request_id].outbox.put_nowait(self._publish(output.event()))
        if output.finish_reason is not None:
            self._end_choices(request_id, 1)  # the Scheduler removed it

    def _record(self, ran: Ran, stats: StepStats) -> None:
        """Publish a step's results: a `PromptChunkComputed` for each chunk that stopped
        short of its prompt's end, the sampled tokens, then `EngineStepped` (`stats`:
        what planning it did)."""
        plan, sampled = ran.plan, ran.sampled
        self._num_steps += 1
        self._published_usage = self._scheduler.kv.usage
        for chunk in plan.chunks:
            seq = self._scheduler.seq(chunk.seq_id)
            if chunk.needs_sample or seq is None or not seq.has_blocks:
                continue
            event = PromptChunkComputed(
                request_id=seq.request_id,
                choice_idx=seq.choice_idx,
                num_tokens=len(chunk.token_ids),
                num_computed=chunk.start_pos + len(chunk.token_ids),
                num_prompt_tokens=seq.num_prompt_tokens,
            )
            self._publish(event)
        for output in self._scheduler.update(plan, sampled):
            self._deliver(output)
        self._forget_released()
        self._publish(
            EngineStepped(
                model=self._model,
                num_tokens=plan.num_tokens,
                num_seqs=len(plan.chunks),
                kv_cache_usage=self._scheduler.kv.usage,
                num_preemptions=stats.num_preemptions,
                prefix_cache_queries=stats.prefix_cache_queries,
                prefix_cache_hits=stats.prefix_cache_hits,
                prefix_cache_disk_hits=stats.prefix_cache_disk_hits,
                **(self._disk.step_counts() if self._disk is not None else {}),
            )
        )

    def _forget_released(self) -> None:
        """The runner forgets the sequences the Scheduler removed (finished, aborted,
        or beams the search dropped): at once while the device is idle, else on the
        device thread after the step planned ahead (which may still hold them)."""
        for seq_id in self._scheduler.take_released():
            if self._ahead is None:
                self._runner.release(seq_id)
            else:
                self._device.start(self._runner.release, seq_id)

    def _end_choices(self, request_id: str, count: int) -> None:
        """`count` choices of a request ended; its last releases the request."""
        admitted = self._running[request_id]
        admitted.num_live_choices -= count
        if admitted.num_live_choices == 0:
            del self._running[request_id]
            admitted.outbox.close()
            self._publish(RequestReleased(request_id=request_id, was_scheduled=True))
