"""Engine: the actor tree under the app — the RequestLogger, then each model's load,
then each model's actor (a Batcher, or a Pooler for an embedding model).

`run` reports started at once so the server answers /health with 503 while the
models load. If loading fails or the Batcher dies, every pending request gets
an error and `on_fatal` stops the process loudly (no hung requests).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import trio

from atom.actors.bus import Clock, EventBus
from atom.actors.cores import Core, EngineCore, Loaded, PoolingCore, TranscriptionCore
from atom.actors.device import DeviceThread
from atom.actors.kv_events import publisher
from atom.actors.models import Models
from atom.actors.profiler import Phases, Profiler
from atom.actors.recent import RecentRequests
from atom.actors.tap import OutputTap
from atom.log.codec import read_log
from atom.log.crash_ring import CrashRing
from atom.log.shared_responses import SharedResponses
from atom.log.writer import RequestLogger
from atom.model.catalog import ModelKind, ModelSpec, served_models
from atom.model.heap import collect_less_often
from atom.projections.metrics import METRIC_EVENTS, Metrics
from atom.projections.responses_store import ResponsesStore
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import Conflict, EngineFailed, ServerDraining
from atom.vocabulary.events import (
    Envelope,
    PoolingFinished,
    PoolingRequested,
    RequestAborted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    TranscriptionFinished,
    TranscriptionRequested,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Detached:
    """A task that outlives its HTTP request (a background response)."""

    cancel: Callable[[str], None]  # ends it, with the reason the log gives
    done: trio.Event
    tap: OutputTap | None = None  # its output, when it streams


def exit_drained() -> None:
    """Exit with status 0: the server drained and the request log is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def terminate_process(grace_s: float = 1.0) -> None:
    """Exit with status 1 after `grace_s`, time for the error responses in flight to go out.

    A hard exit, not SIGTERM: hypercorn runs the app in a worker process whose graceful
    stop would report success, and a supervisor must see the crash."""
    sys.stderr.flush()
    threading.Timer(grace_s, os._exit, (1,)).start()


GENERATION = frozenset({ModelKind.GENERATE})
# A request's first event, and its last ones.
OPENS = (RequestReceived, PoolingRequested, TranscriptionRequested)
ENDS = (RequestCompleted, RequestFailed, RequestAborted, PoolingFinished, TranscriptionFinished)
SPEECH = frozenset({ModelKind.TRANSCRIBE})
SAME_STOP_S = 1.0  # a signal this soon after the one that began the drain repeats it


class Engine:
    """Every served model's actor (a Batcher or a Pooler) over one device thread, the
    request logger, and what is shared: the event bus, metrics and the Responses store."""

    def __init__(
        self,
        settings: Settings,
        load: Callable[[Settings, ModelSpec], Loaded],
        *,
        clock: Clock = time.time,
        on_fatal: Callable[[], None] = terminate_process,
        on_drained: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        # on_drained given: SIGTERM/SIGINT drain, then it ends the process.
        self._stop_process, self._on_drained = on_fatal, on_drained
        self.bus = EventBus(clock)
        self.crash_ring = CrashRing.on(self.bus.subscribe, settings.crash_dump_dir)
        self.recent = RecentRequests.on(self.bus) if settings.request_log else None  # web page
        self.metrics = Metrics.on(self.bus.subscribe, METRIC_EVENTS)
        self.responses = ResponsesStore(settings.responses_store_max)
        self.phases = Phases()  # the Batchers' loop phases, recorded while a profile runs
        self.kv_events = publisher(settings.kv_events, settings.data_parallel_rank, settings.device)
        self.profiler: Profiler | None = None  # with --profile-dir, once the device exists
        self.models = Models(
            settings,
            served_models(settings),
            load,
            bus=self.bus,
            clock=clock,
            responses=self.responses,
            on_fatal=self._on_fatal,
            phases=self.phases,
            kv_events=None if self.kv_events is None else self.kv_events.put,
        )
        self.logger: RequestLogger | None = None
        self.has_stopped = False  # the engine ended (failure or shutdown): nothing is served
        self.is_draining = False  # a signal asked it to stop: new requests are refused
        self.is_failing = False  # a fatal error happened: the process is being stopped
        self._open, self._none_open, self._drained = set[str](), trio.Event(), trio.Event()
        self.bus.subscribe(self._track_open, (*OPENS, *ENDS))
        self.detached: dict[str, Detached] = {}  # running background tasks, by request id
        self._nursery: trio.Nursery | None = None
        self.created = int(clock())

    @property
    def is_ready(self) -> bool:
        """Every start-up model is loaded and nothing has stopped."""
        return self.models.is_started and not self.has_stopped

    def generation(self, requested: str | None, route: str) -> EngineCore:
        """The generation model a request names (the first one when it names none)."""
        core = self.core(requested, GENERATION, route)
        assert isinstance(core, EngineCore)
        return core

    def pooling(
        self, requested: str | None, kinds: frozenset[ModelKind], route: str
    ) -> PoolingCore:
        core = self.core(requested, kinds, route)
        assert isinstance(core, PoolingCore)
        return core

    def transcription(self, requested: str | None, route: str) -> TranscriptionCore:
        """The speech model a request names (the first one when it names none)."""
        core = self.core(requested, SPEECH, route)
        assert isinstance(core, TranscriptionCore)
        return core

    def core(self, requested: str | None, kinds: frozenset[ModelKind], route: str) -> Core:
        """The loaded model a request to `route` means (Registry.core); ServerDraining while
        the server drains, EngineFailed once the engine has stopped."""
        if self.has_stopped:
            raise EngineFailed("the engine has stopped; the server is shutting down")
        if self.is_draining:
            raise ServerDraining("the server is shutting down; retry on another instance")
        return self.models.registry.core(requested, kinds, route)

    def admit(self, request_id: str, model: str) -> None:
        """A planned request is about to start on `model`: Conflict (409) when a request
        with this id is open or stored (a client's `x-request-id` may not take over
        another request's events); otherwise the model counts as used now (for
        --models-max). On the event loop, with no checkpoint before it is published."""
        if request_id in self._open or self.responses.has(request_id):
            raise Conflict(f"a request with the id {request_id!r} exists", param="x-request-id")
        self.models.registry.touch(model)

    def _track_open(self, envelope: Envelope) -> None:
        """Which requests are still being answered (`_open`): from their first event to
        their last; `_none_open` is set while none is."""
        event = envelope.event
        if isinstance(event, OPENS):
            self._open.add(event.request_id)
            if self._none_open.is_set():
                self._none_open = trio.Event()
        elif isinstance(event, ENDS):
            self._open.discard(event.request_id)
            if not self._open:
                self._none_open.set()

    def _on_fatal(self) -> None:
        """A fatal error: the crash dump first (with --crash-dump-dir), then the process
        stops (`on_fatal`)."""
        self.is_failing = True
        if self.crash_ring is not None:
            self.crash_ring.dump()
        self._stop_process()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        collect_less_often()  # a served token's short-lived objects: atom/model/heap.py
        try:
            await self._run(task_status)
        except Exception:
            log.critical("engine_died", exc_info=True)
            self._on_fatal()
        finally:
            self.has_stopped = True
        if self._drained.is_set() and self._on_drained is not None:
            self._on_drained()

    def start_detached(
        self,
        key: str,
        run: Callable[[], Awaitable[None]],
        cancel: Callable[[str], None],
        tap: OutputTap | None = None,
    ) -> Detached:
        """Run `run` in the engine's nursery until it ends or the engine stops."""
        if self._nursery is None or self.has_stopped:
            raise EngineFailed("the engine has stopped; the server is shutting down")
        entry = Detached(cancel=cancel, done=trio.Event(), tap=tap)
        self.detached[key] = entry

        async def detached() -> None:
            try:
                await run()
            finally:
                del self.detached[key]
                entry.done.set()

        self._nursery.start_soon(detached)
        return entry

    def _cancel_detached(self, key: str) -> None:
        """Another replica asked to cancel a background response; a no-op unless it runs here."""
        running = self.detached.get(key)
        if running is not None:
            running.cancel("cancelled")

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.settings.request_log:
                # Off the event loop: a long log takes a while to fold.
                await trio.to_thread.run_sync(self._restore, self.settings.request_log)
                self.logger = RequestLogger(self.settings.request_log)
                await nursery.start(self.logger.run)
                self.bus.subscribe(self.logger.log_nowait)
            self.bus.subscribe(self.responses.apply)
            if self.settings.responses_store_dir:
                shared = SharedResponses(
                    self.settings.responses_store_dir, self.responses, self._cancel_detached
                )
                await nursery.start(shared.run)
                self.bus.subscribe(shared.apply)
            if self._on_drained is not None:
                nursery.start_soon(self._drain_on_signal, nursery)
            task_status.started()
            device = DeviceThread()  # loads the start-up models, then runs every model call
            if self.settings.profile_dir:
                self.profiler = Profiler(self.settings.profile_dir, device, self.phases)
            if self.settings.watchdog_timeout > 0:
                nursery.start_soon(self._watchdog, device)
            try:
                await self.models.run(device)  # until every model's actor stopped
                if not self.is_draining and not self.is_failing:
                    # Nothing asked it to stop: a server that serves nothing must not stay up.
                    log.critical("engine_stopped_unexpectedly")
                    self._on_fatal()
                if self.is_draining:
                    await self._drained.wait()  # the failed requests' last events first
                elif self._open:  # a fatal stop: the logger writes their ends too
                    with trio.move_on_after(5):
                        await self._none_open.wait()
            finally:
                device.close()
                if self.kv_events is not None:
                    self.kv_events.close()
                nursery.cancel_scope.cancel()  # the logger, after it wrote what is queued

    async def _watchdog(self, device: DeviceThread) -> None:
        """A model call (a step, a forward) running past `--watchdog-timeout` is a hung
        kernel: every waiting request gets an error and the process stops loudly, rather
        than clients hanging forever. Start-up loads are not timed."""
        limit = self.settings.watchdog_timeout
        while not self.models.is_started:
            await trio.sleep(0.1)
        while True:
            await trio.sleep(min(1.0, limit / 4))
            began = device.busy_since
            if began is not None and time.monotonic() - began > limit:
                log.critical("watchdog_timeout", model_call_s=round(time.monotonic() - began, 1))
                self.models.fail_all(
                    EngineFailed(f"a model step ran for more than {limit:g} s; the server stops")
                )
                self._on_fatal()
                return

    async def _drain_on_signal(self, nursery: trio.Nursery) -> None:
        """The first SIGTERM or SIGINT drains the server; a second ends it at once,
        unless it comes within `SAME_STOP_S` of the first: then it is the same stop asked
        twice (Ctrl-C reaches the whole process group, and `make` or a supervisor may
        forward its own copy)."""
        first_at: float | None = None  # when the signal that began the drain came
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                name = signal.Signals(signum).name
                if first_at is not None and trio.current_time() - first_at < SAME_STOP_S:
                    log.info("repeated_signal_same_drain", signal=name)
                    continue
                if first_at is not None or self.is_draining:
                    log.warning("second_signal_exit_now", signal=name)
                    os._exit(1)
                first_at = trio.current_time()
                log.warning(
                    "draining",
                    signal=name,
                    open_requests=len(self._open),
                    shutdown_timeout_s=self.settings.shutdown_timeout,
                )
                nursery.start_soon(self.drain)

    async def drain(self) -> None:
        """Refuse new requests, let the open ones finish for `--shutdown-timeout` seconds,
        fail the rest (their clients get an error), then stop the engine: the request
        log is written out (after those errors) and `on_drained` ends the process."""
        self.is_draining = True
        if self._open:
            with trio.move_on_after(self.settings.shutdown_timeout):
                await self._none_open.wait()
        self.models.stop("the server is shutting down")
        if self._open:
            with trio.move_on_after(5):  # their error answers go out
                await self._none_open.wait()
        log.info("drained", open_requests=len(self._open))
        self._drained.set()

    def _restore(self, log_path: str) -> None:
        """Stored responses come back from the request log of earlier runs (a log that is
        no regular file, such as a pipe or a device, cannot be read back)."""
        if not os.path.isfile(log_path):
            return

        def skipped(number: int, reason: str) -> None:
            log.warning("request_log_line_skipped", path=log_path, line=number, reason=reason)

        for envelope in read_log(log_path, on_torn=skipped):
            self.responses.apply(envelope)
