"""DeviceThread: the one OS thread that runs every model call of the engine.

OpenMP keeps a team of worker threads for each thread that opens a parallel
region, and with `OMP_WAIT_POLICY=ACTIVE` (docs/configuration.md) a team that
has just worked keeps spinning for a while (about a second with ATOM's spin
count, minutes without it). `trio.to_thread` hands each job to whichever cached
thread is free, so the model load and the steps could start teams on different
threads, and two spinning teams on two cores slow a step down by more than half
(bench/results/history.md). Loading and every step run here, on one long-lived
thread, so there is one team.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Generic, TypeVar

import outcome
import trio

T = TypeVar("T")


class DeviceThread:
    def __init__(self, name: str = "atom-device") -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        # time.monotonic() when the running job began, None while idle (the watchdog reads it)
        self.busy_since: float | None = None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    async def run_sync(self, fn: Callable[..., T], *args: object) -> T:
        """Run `fn(*args)` on the device thread; a cancelled caller raises Cancelled
        before it starts, and once started the caller waits for it even when cancelled
        (a model call cannot be interrupted half way)."""
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller starts nothing
        return await self.start(fn, *args).result()

    def start(self, fn: Callable[..., T], *args: object) -> Handoff[T]:
        """Queue `fn(*args)` behind the jobs already queued and return at once; its
        `Handoff` gives the result (jobs run in the order they were started)."""
        handoff: Handoff[T] = Handoff(trio.lowlevel.current_trio_token(), fn, args)
        self._jobs.put(handoff.run)
        return handoff

    def close(self) -> None:
        """Let the thread end after the jobs already queued."""
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            self.busy_since = time.monotonic()
            try:
                job()
            finally:
                self.busy_since = None


class Handoff(Generic[T]):
    """One job's result, from the device thread to the Trio task that waits for it."""

    def __init__(
        self, token: trio.lowlevel.TrioToken, fn: Callable[..., T], args: tuple[object, ...]
    ) -> None:
        self._token = token
        self._call = partial(fn, *args)
        self._lock = threading.Lock()
        self._outcome: outcome.Outcome[T] | None = None
        self._done: trio.Event | None = None  # set once the caller has to wait

    def run(self) -> None:
        """Device thread: run the job; wake the caller if it waits already."""
        result = outcome.capture(self._call)
        with self._lock:
            self._outcome, done = result, self._done
        if done is not None:
            with contextlib.suppress(trio.RunFinishedError):  # no loop left: nobody waits
                self._token.run_sync_soon(done.set)

    async def result(self) -> T:
        """Trio side: the job's result, waiting (shielded) if it is not done yet.

        It first lets every other runnable task take its turn, then looks: a job done
        by then (a fast step, or a busy loop) is taken at once, without the trip
        through Trio's wake-up socket that a waiter costs (a loop iteration)."""
        await trio.lowlevel.cancel_shielded_checkpoint()
        with self._lock:
            if self._outcome is None:
                self._done = trio.Event()
        if self._done is not None:
            with trio.CancelScope(shield=True):
                await self._done.wait()
        assert self._outcome is not None
        return self._outcome.unwrap()

    def value(self) -> T:
        """Device thread, in a job started after this one: its result (the caller of
        `result` still gets it too); a RuntimeError if it failed."""
        done = self._outcome
        assert done is not None, "a job read a result before it ran"
        if isinstance(done, outcome.Error):
            raise RuntimeError("the job this one follows failed") from done.error
        assert isinstance(done, outcome.Value)
        return done.value
