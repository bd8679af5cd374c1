"""Transcriber: the one owner of a speech model (Whisper); decodes the windows of every
request in one batch (atom/model/whisper/batch.py), on the engine's device thread.

A request's audio comes as windows of up to 30 seconds. Its windows decode one after
another, each prompted with the text of the one before (as OpenAI's transcribe does);
the windows of different requests decode together: a window starts into a free slot
between steps and leaves its slot when it ends, so a request that arrives while
others decode joins their next step. Each finished window goes back to its request as
it ends (`WindowDone`), for a streamed answer or a whole one.

The queue of requests is bounded: a full one is `Overloaded` (429). A request whose
caller left starts no more windows. If the model raises, every request fails and the
error goes up to the engine, which stops the server (as a Batcher's does).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import trio

from atom.actors.device import DeviceThread
from atom.actors.idle import IdleWatch
from atom.actors.inbox import queued, submit, take
from atom.model.whisper.decoding import WindowDecode, WindowTask
from atom.model.whisper.runtime import WhisperRuntime
from atom.vocabulary.errors import AtomError, EngineFailed

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WindowDone:
    """One window's decoding: where it starts in the audio, how long it is, the language
    it was decoded in, and the tokens chosen (timestamps among them when asked)."""

    index: int
    start: float  # seconds
    seconds: float
    language: str
    tokens: tuple[int, ...]


@dataclass(slots=True, eq=False)
class _Job:
    audio: Sequence[np.ndarray]  # the windows' samples, in order
    task: WindowTask
    send: trio.MemorySendChannel[WindowDone | AtomError]
    next_index: int = 0
    previous: tuple[int, ...] = ()  # the last window's text tokens
    language: str | None = None  # detected in the first window, kept for the others
    is_abandoned: bool = False

    def next_window(self, runtime: WhisperRuntime) -> WindowDecode:
        """The next window's decoding: prompted with the last window's text, in its
        language, sampling (at a temperature above 0) from the request's seed plus the
        window's index."""
        seed = self.task.seed
        task = replace(
            self.task,
            language=self.task.language or self.language,
            previous=self.task.previous + self.previous,
            seed=None if seed is None else seed + self.next_index,
        )
        return WindowDecode(runtime.tokens, task, max_tokens=runtime.max_tokens)


@dataclass(slots=True)
class _Running:
    job: _Job
    index: int
    window: WindowDecode


class Transcriber:
    def __init__(
        self, runtime: WhisperRuntime, *, device: DeviceThread, max_queued_requests: int
    ) -> None:
        self._runtime = runtime
        self._device = device
        self._send, self._inbox = trio.open_memory_channel[_Job](max_queued_requests)
        self._waiting: deque[_Job] = deque()  # a window ready to start, in arrival order
        self._running: list[_Running] = []
        self.num_steps = 0
        self.most_windows_a_step = 0  # the largest batch a step has decoded
        self.idle = IdleWatch(lambda: self.is_idle)

    @property
    def is_idle(self) -> bool:
        queued = self._inbox.statistics().current_buffer_used
        return not queued and not self._waiting and not self._running

    async def transcribe(
        self,
        audio: Sequence[np.ndarray],
        task: WindowTask,
        on_window: Callable[[WindowDone], None] | None = None,
    ) -> list[WindowDone]:
        """Every window's decoding, in order; `on_window` is told of each as it ends.
        Raises Overloaded when the queue is full, EngineFailed when the engine stopped;
        a cancelled caller's windows stop (the one decoding leaves its slot)."""
        send, receive = trio.open_memory_channel[WindowDone | AtomError](len(audio) + 1)
        job = _Job(audio=audio, task=task, send=send)
        submit(self._send, job, what="transcriptions")
        done: list[WindowDone] = []
        try:
            while len(done) < len(audio):
                item = await receive.receive()
                if isinstance(item, AtomError):
                    raise item
                done.append(item)
                if on_window is not None:
                    on_window(item)
        finally:
            job.is_abandoned = True
        return done

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                await self._take_requests()
                await self._start_windows()
                if self._running:
                    await self._step()
                self.idle.changed()
        finally:
            self.fail_all(EngineFailed("the engine stopped; the server is shutting down"))

    async def _take_requests(self) -> None:
        """Everything queued; waits for a request when nothing waits or runs."""
        idle = not self._waiting and not self._running
        self._waiting.extend(job for job in await take(self._inbox, wait=idle) if job.audio)

    async def _start_windows(self) -> None:
        """The waiting requests' next windows, into the free slots, in one encoding."""
        free = self._runtime.batch.num_free
        starting: list[_Running] = []
        while self._waiting and len(starting) < free:
            job = self._waiting.popleft()
            if not job.is_abandoned:
                starting.append(_Running(job, job.next_index, job.next_window(self._runtime)))
        if not starting:
            return
        audio = [run.job.audio[run.index] for run in starting]
        windows = [run.window for run in starting]
        await self._on_device(self._runtime.start, windows, audio)
        self._running += starting

    async def _step(self) -> None:
        for run in [r for r in self._running if r.job.is_abandoned]:  # their caller left
            self._running.remove(run)
            self._runtime.batch.drop(run.window)
        if not self._running:
            return
        self.most_windows_a_step = max(self.most_windows_a_step, len(self._running))
        ended = await self._on_device(self._runtime.batch.step)
        self.num_steps += 1
        done = {id(window) for window in ended}
        for run in [r for r in self._running if id(r.window) in done]:
            self._running.remove(run)
            self._finish(run)

    def _finish(self, run: _Running) -> None:
        job, window = run.job, run.window
        assert window.language is not None
        rate = self._runtime.sample_rate
        start = sum(len(a) for a in job.audio[: run.index]) / rate
        seconds = len(job.audio[run.index]) / rate
        job.send.send_nowait(
            WindowDone(run.index, start, seconds, window.language, tuple(window.generated))
        )
        job.language = window.language
        job.previous = tuple(t for t in window.generated if t < self._runtime.tokens.end_of_text)
        job.next_index += 1
        if job.next_index < len(job.audio) and not job.is_abandoned:
            self._waiting.append(job)

    async def _on_device(self, fn: Callable[..., T], *args: object) -> T:
        try:
            return await self._device.run_sync(fn, *args)
        except Exception:
            self.fail_all(EngineFailed("the engine failed; the server is shutting down"))
            raise

    def fail_all(self, error: AtomError) -> None:
        """Fail every request not yet answered (the engine stopped); new ones are refused."""
        self._send.close()
        jobs = [*self._waiting, *(run.job for run in self._running), *queued(self._inbox)]
        self._waiting.clear()
        self._running.clear()
        for job in jobs:
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                job.send.send_nowait(error)
