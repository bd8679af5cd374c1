"""Transcriber: the one owner of a speech model (Whisper); decodes the windows of every
request in one batch (atom/model/whisper/batch.py), on the engine's device thread.

A request's audio comes as an iterator of windows of up to 30 seconds, decoded from its
file as they are needed (atom/audio/decode.py's `audio_windows`), on the device thread
just before the window is encoded: memory holds the window, not the file's audio. A
request's windows decode one after another, each prompted with the text of the one
before (as OpenAI's transcribe does); the windows of different requests decode
together: a window starts into a free slot between steps and leaves its slot when it
ends, so a request that arrives while others decode joins their next step. Each
finished window goes back to its request as it ends (`WindowDone`), for a streamed
answer or a whole one.

The queue of requests is bounded: a full one is `Overloaded` (429). A request whose
caller left starts no more windows. Audio found damaged past its first window fails
its request alone (InvalidRequest naming `file`). If the model raises, every request
fails and the error goes up to the engine, which stops the server (as a Batcher's does).
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np
import trio

from atom.actors.device import DeviceThread
from atom.actors.idle import IdleWatch
from atom.actors.inbox import queued, submit, take
from atom.audio.decode import AudioError
from atom.model.whisper.decoding import WindowDecode, WindowTask, WordTime
from atom.model.whisper.runtime import WhisperRuntime
from atom.vocabulary.errors import AtomError, EngineFailed, InvalidRequest

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WindowDone:
    """One window's decoding: where it starts in the audio, how long it is, the language
    it was decoded in, and the tokens chosen (timestamps among them when asked; none
    for a window judged silent), with what OpenAI's verbose answer shows of its try."""

    index: int
    start: float  # seconds
    seconds: float
    language: str
    tokens: tuple[int, ...]
    avg_logprob: float
    temperature: float  # of the try kept
    compression_ratio: float
    no_speech_prob: float
    words: tuple[WordTime, ...] = ()  # when the task asks them: from the window's start


@dataclass(frozen=True, slots=True)
class AudioEnded:
    """A request's audio has no more windows: its length in seconds."""

    seconds: float


_Answer = WindowDone | AudioEnded | AtomError


@dataclass(slots=True, eq=False)
class _Job:
    windows: Iterator[np.ndarray]  # the windows' samples, in order, decoded as pulled
    task: WindowTask
    send: trio.MemorySendChannel[_Answer]
    next_index: int = 0
    num_samples: int = 0  # in the windows pulled so far
    previous: tuple[int, ...] = ()  # the last window's text tokens
    language: str | None = None  # detected in the first window, kept for the others
    is_abandoned: bool = False

    def next_window(self, runtime: WhisperRuntime, seconds: float) -> WindowDecode:
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
        return WindowDecode(runtime.tokens, task, max_tokens=runtime.max_tokens, seconds=seconds)


@dataclass(slots=True)
class _Running:
    job: _Job
    index: int
    window: WindowDecode  # its `seconds`: the window's length
    start: float  # seconds into the audio


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

    async def windows(
        self, audio: Iterable[np.ndarray], task: WindowTask
    ) -> AsyncGenerator[WindowDone | AudioEnded]:
        """Each window's decoding as it ends, in order, then the audio's length. Raises
        Overloaded when the queue is full (at the first item, before any window),
        EngineFailed when the engine stopped, InvalidRequest when a window past the
        first cannot be decoded; a caller that stops iterating (or is cancelled) stops
        its windows: the one decoding leaves its slot."""
        # Unbounded: a window's answer never waits (a request has few windows).
        send, receive = trio.open_memory_channel[_Answer](math.inf)
        job = _Job(windows=iter(audio), task=task, send=send)
        submit(self._send, job, what="transcriptions")
        try:
            while True:
                item = await receive.receive()
                if isinstance(item, AtomError):
                    raise item
                yield item
                if isinstance(item, AudioEnded):
                    return
        finally:
            job.is_abandoned = True

    async def transcribe(
        self,
        audio: Iterable[np.ndarray],
        task: WindowTask,
        on_window: Callable[[WindowDone], None] | None = None,
    ) -> tuple[list[WindowDone], float]:
        """Every window's decoding (`windows`), and the audio's length in seconds;
        `on_window` is told of each window as it ends."""
        done: list[WindowDone] = []
        async with contextlib.aclosing(self.windows(audio, task)) as items:
            async for item in items:
                if isinstance(item, AudioEnded):
                    return done, item.seconds
                done.append(item)
                if on_window is not None:
                    on_window(item)
        raise AssertionError("the windows ended without their length")

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
        self._waiting.extend(await take(self._inbox, wait=idle))

    async def _start_windows(self) -> None:
        """The waiting requests' next windows, decoded from their files and encoded into
        the free slots in one call on the device."""
        free = self._runtime.batch.num_free
        jobs: list[_Job] = []
        while self._waiting and len(jobs) < free:
            job = self._waiting.popleft()
            if not job.is_abandoned:
                jobs.append(job)
        if not jobs:
            return
        pulled = await self._on_device(self._begin, jobs)
        for job, outcome in zip(jobs, pulled, strict=True):
            if isinstance(outcome, _Running):
                self._running.append(outcome)
            else:  # no window left, or one that would not decode
                job.send.send_nowait(outcome)
                job.is_abandoned = True

    def _begin(self, jobs: list[_Job]) -> list[_Running | AudioEnded | InvalidRequest]:
        """On the device thread: each job's next window pulled from its file, and those
        that have one started."""
        rate = self._runtime.sample_rate
        pulled: list[_Running | AudioEnded | InvalidRequest] = []
        audio_of: list[np.ndarray] = []
        for job in jobs:
            try:
                audio = next(job.windows, None)
            except AudioError as error:
                pulled.append(InvalidRequest(str(error), param="file"))
                continue
            if audio is None:
                pulled.append(AudioEnded(job.num_samples / rate))
                continue
            start, job.num_samples = job.num_samples / rate, job.num_samples + len(audio)
            window = job.next_window(self._runtime, len(audio) / rate)
            pulled.append(_Running(job, job.next_index, window, start))
            audio_of.append(audio)
        started = [run for run in pulled if isinstance(run, _Running)]
        if started:
            self._runtime.start([run.window for run in started], audio_of)
        return pulled

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
        generated = () if window.is_silent else tuple(window.generated)
        job.send.send_nowait(
            WindowDone(
                run.index,
                run.start,
                window.seconds,
                window.language,
                generated,
                window.avg_logprob,
                window.temperature,
                window.compression_ratio,
                window.no_speech_prob,
                () if window.is_silent else tuple(window.words),
            )
        )
        job.language = window.language
        job.previous = tuple(t for t in generated if t < self._runtime.tokens.end_of_text)
        job.next_index += 1
        if not job.is_abandoned:
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
