"""The Batcher's records: what it holds for queued, admitted and waiting work, and what it
reports of itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import outcome
import trio

from atom.actors.device import Handoff
from atom.actors.outbox import Outbox
from atom.model.runner import Sampled, StepPlan
from atom.model.scheduling.sequence import StepStats
from atom.vocabulary.events import Submit


@dataclass(frozen=True, slots=True, kw_only=True)
class BatcherStatistics:
    """What /metrics and health read of a Batcher."""

    num_running_requests: int
    num_running_seqs: int
    num_queued_requests: int
    num_runner_seqs: int
    num_steps: int


@dataclass(frozen=True, slots=True)
class Queued:
    submit: Submit
    outbox: Outbox
    queued_at: float  # trio's clock


@dataclass(frozen=True, slots=True)
class BoundaryJob:
    """Work for the step boundary: `run` on the loop between two steps (`when_idle`: once
    no request runs); its outcome is handed to the waiting caller."""

    run: Callable[[], Awaitable[None]]
    when_idle: bool
    done: trio.Event = field(default_factory=trio.Event)
    result: list[outcome.Outcome[None]] = field(default_factory=list)

    def is_due(self, is_running: bool) -> bool:
        return not (self.when_idle and is_running)


class BoundaryJobs:
    """The model-state changes a Batcher was asked for, waiting for its step boundary:
    `ask` queues one and waits (shielded: asked is done) for its outcome; the Batcher's
    loop runs the due ones between two steps (`run_due`)."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake  # the Batcher's loop, if it is resting
        self._jobs: list[BoundaryJob] = []

    async def ask(self, run: Callable[[], Awaitable[None]], *, when_idle: bool) -> None:
        job = BoundaryJob(run, when_idle)
        self._jobs.append(job)
        self._wake()
        with trio.CancelScope(shield=True):  # the caller leaving stops nothing
            await job.done.wait()
        job.result[0].unwrap()

    def is_due(self, *, is_running: bool) -> bool:
        """Whether `run_due` would run a job now."""
        return any(job.is_due(is_running) for job in self._jobs)

    async def run_due(self, *, is_running: bool) -> None:
        """Every job due now (`when_idle` ones only once no request runs), in order."""
        for job in list(self._jobs):
            if job.is_due(is_running):
                self._jobs.remove(job)
                job.result.append(await outcome.acapture(job.run))
                job.done.set()

    def fail_all(self, error: Exception) -> None:
        """Their callers get `error` (the Batcher is dying)."""
        for job in self._jobs:
            job.result.append(outcome.Error(error))
            job.done.set()
        self._jobs.clear()


@dataclass(slots=True)
class Admitted:
    submit: Submit
    outbox: Outbox
    num_live_choices: int  # its choices not ended yet


@dataclass(frozen=True, slots=True)
class Ran:
    """A step the device thread ran: the plan as it ran (a step planned ahead with its
    tokens put in, atom/model/scheduling/ahead.py) and what it sampled."""

    plan: StepPlan
    sampled: Mapping[str, tuple[Sampled, ...]]


@dataclass(frozen=True, slots=True)
class InFlight:
    """A step started on the device thread: its plan as planned, what planning it did
    (for its `EngineStepped`), and what it ran, to come."""

    plan: StepPlan
    stats: StepStats
    running: Handoff[Ran]
