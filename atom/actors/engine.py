"""Engine: the actor tree under the app — the RequestLogger, then each model's load,
then each model's actor (a Batcher, or a Pooler for an embedding model).

`run` reports started at once so the server answers /health with 503 while the
models load. If loading fails or the Batcher dies, every pending request gets
an error and `on_fatal` stops the process loudly (no hung requests).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
import trio

from atom.actors.bus import Clock, EventBus
from atom.actors.cores import Core, EngineCore, Loaded, PoolingCore
from atom.actors.device import DeviceThread
from atom.actors.logger import RequestLogger
from atom.actors.models import Models
from atom.actors.tap import OutputTap
from atom.config import Settings
from atom.errors import EngineFailed
from atom.metrics import Metrics
from atom.model.catalog import ModelKind, ModelSpec, served_models
from atom.request_log import read_log
from atom.responses_store import ResponsesStore

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Detached:
    """A task that outlives its HTTP request (a background response)."""

    cancel: Callable[[str], None]  # ends it, with the reason the log gives
    done: trio.Event
    tap: OutputTap | None = None  # its output, when it streams


def terminate_process(grace_s: float = 1.0) -> None:
    """Exit with status 1 after `grace_s`, time for the error responses in flight to go out.

    A hard exit, not SIGTERM: hypercorn runs the app in a worker process whose graceful
    stop would report success, and a supervisor must see the crash."""
    sys.stderr.flush()
    threading.Timer(grace_s, os._exit, (1,)).start()


GENERATION = frozenset({ModelKind.GENERATE})


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
    ) -> None:
        self.settings = settings
        self._on_fatal = on_fatal
        self.bus = EventBus(clock)
        self.metrics = Metrics()
        self.bus.subscribe(self.metrics.apply)
        self.responses = ResponsesStore(settings.responses_store_max)
        self.models = Models(
            settings,
            served_models(settings),
            load,
            bus=self.bus,
            clock=clock,
            responses=self.responses,
            on_fatal=on_fatal,
        )
        self.logger: RequestLogger | None = None
        self.has_stopped = False  # the engine ended (failure or shutdown): nothing is served
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

    def core(self, requested: str | None, kinds: frozenset[ModelKind], route: str) -> Core:
        """The loaded model a request to `route` means (Models.core); EngineFailed once
        the engine has stopped."""
        if self.has_stopped:
            raise EngineFailed("the engine has stopped; the server is shutting down")
        return self.models.core(requested, kinds, route)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._run(task_status)
        except Exception:
            log.critical("engine_died", exc_info=True)
            self._on_fatal()
        finally:
            self.has_stopped = True

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
            task_status.started()
            device = DeviceThread()  # loads the start-up models, then runs every model call
            try:
                await self.models.run(device)
            finally:
                device.close()
                nursery.cancel_scope.cancel()  # the logger, after it wrote what is queued

    def _restore(self, log_path: str) -> None:
        """Stored responses come back from the request log of earlier runs."""
        if not os.path.exists(log_path):
            return
        for envelope in read_log(log_path):
            self.responses.apply(envelope)
