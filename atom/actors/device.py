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
from typing import TypeVar

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
        """Run `fn(*args)` on the device thread; the caller waits for it even when
        cancelled (a model call cannot be interrupted half way)."""
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        result: list[outcome.Outcome[T]] = []

        def job() -> None:
            result.append(outcome.capture(fn, *args))
            with contextlib.suppress(trio.RunFinishedError):  # no loop left: nobody waits
                token.run_sync_soon(done.set)

        self._jobs.put(job)
        with trio.CancelScope(shield=True):
            await done.wait()
        return result[0].unwrap()

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
