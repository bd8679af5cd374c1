"""Pooler: the one owner of a pooling model; batches the inputs of every request into
forwards within a token budget, on the engine's device thread.

A request's inputs may span several forwards and a forward holds inputs of several
requests (many short inputs in one forward is where the speed comes from). The
queue of requests is bounded: a full one is `Overloaded` (429). A request whose
caller left is skipped; if the runner raises, every waiting request fails and the
error goes up to the engine, which stops the server (as a Batcher's does).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from atom.actors.device import DeviceThread
from atom.actors.idle import IdleWatch
from atom.actors.inbox import queued, submit, take
from atom.model.pooling import PoolingRunner
from atom.vocabulary.errors import AtomError, EngineFailed
from atom.vocabulary.events import PoolingInput


@dataclass(slots=True, eq=False)
class _Job:
    inputs: Sequence[PoolingInput]
    outputs: list[array[float] | None]
    done: trio.Event = field(default_factory=trio.Event)
    error: AtomError | None = None
    is_abandoned: bool = False
    num_left: int = 0

    def finish(self, error: AtomError | None = None) -> None:
        self.error = self.error or error
        self.done.set()


class Pooler:
    def __init__(
        self,
        runner: PoolingRunner,
        *,
        device: DeviceThread,
        max_num_batched_tokens: int,
        max_queued_requests: int,
    ) -> None:
        self._runner = runner
        self._device = device
        self._budget = max_num_batched_tokens
        self._send, self._inbox = trio.open_memory_channel[_Job](max_queued_requests)
        self._pending: deque[tuple[_Job, int]] = deque()  # (request, input index), in order
        self.num_forwards = 0
        self._is_forwarding = False
        self.idle = IdleWatch(lambda: self.is_idle)  # an unload waits on it

    @property
    def is_idle(self) -> bool:
        """Nothing queued, pending or running: stopping now cuts no request."""
        queued = self._inbox.statistics().current_buffer_used
        return not queued and not self._pending and not self._is_forwarding

    async def pool(self, inputs: Sequence[PoolingInput]) -> list[array[float]]:
        """The runner's output for each input. Raises Overloaded when the queue is full,
        EngineFailed when the engine stopped; cancelling drops what is not yet run."""
        job = _Job(inputs=inputs, outputs=[None] * len(inputs), num_left=len(inputs))
        submit(self._send, job, what="pooling requests")
        try:
            await job.done.wait()
        finally:
            job.is_abandoned = True
        if job.error is not None:
            raise job.error
        return [out for out in job.outputs if out is not None]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                await self._take_requests()
                batch = self._next_batch()
                if batch:
                    await self._forward(batch)
                self.idle.changed()
        finally:
            self.fail_all(EngineFailed("the engine stopped; the server is shutting down"))

    async def _take_requests(self) -> None:
        """Everything queued; waits for a request when nothing is pending."""
        for job in await take(self._inbox, wait=not self._pending):
            self._enqueue(job)

    def _enqueue(self, job: _Job) -> None:
        self._pending.extend((job, idx) for idx in range(len(job.inputs)))
        if not job.inputs:
            job.finish()

    def _next_batch(self) -> list[tuple[_Job, int]]:
        """Pending inputs in arrival order while their tokens fit the budget (always one)."""
        batch: list[tuple[_Job, int]] = []
        num_tokens = 0
        while self._pending:
            job, idx = self._pending[0]
            if job.is_abandoned:
                self._pending.popleft()
                continue
            size = len(job.inputs[idx].token_ids)
            if batch and num_tokens + size > self._budget:
                break
            batch.append(self._pending.popleft())
            num_tokens += size
        return batch

    async def _forward(self, batch: list[tuple[_Job, int]]) -> None:
        inputs = [job.inputs[idx] for job, idx in batch]
        self._is_forwarding = True
        try:
            outputs = await self._device.run_sync(self._runner.pool, inputs)
        except Exception:
            for job, _ in batch:
                job.finish(EngineFailed("the engine failed; the server is shutting down"))
            raise
        finally:
            self._is_forwarding = False
        self.num_forwards += 1
        for (job, idx), output in zip(batch, outputs, strict=True):
            job.outputs[idx] = output
            job.num_left -= 1
            if job.num_left == 0:
                job.finish()

    def fail_all(self, error: AtomError) -> None:
        """Fail every request not yet answered (the engine stopped); new ones are refused."""
        self._send.close()
        while self._pending:
            self._pending.popleft()[0].finish(error)
        for job in queued(self._inbox):
            job.finish(error)
