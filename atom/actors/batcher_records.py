"""The Batcher's records: what it holds for queued, admitted and waiting work, and what it
reports of itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import outcome
import trio

from atom.actors.outbox import Outbox
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


@dataclass(slots=True)
class Admitted:
    submit: Submit
    outbox: Outbox
    num_live_seqs: int
