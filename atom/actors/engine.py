"""Engine: the actor tree under the app — the RequestLogger, then the model load, then the Batcher.

`run` reports started at once so the server answers /health with 503 while the
model loads. If loading fails or the Batcher dies, every pending request gets
an error and `on_fatal` stops the process loudly (no hung requests).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from atom.actors.batcher import Batcher
from atom.actors.bus import Clock, EventBus
from atom.actors.device import DeviceThread
from atom.actors.logger import RequestLogger
from atom.actors.tap import OutputTap
from atom.config import Settings
from atom.errors import EngineFailed
from atom.metrics import Metrics
from atom.model.runner import Runtime
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.request_log import read_log
from atom.responses_store import ResponsesStore
from atom.text.prompt import max_token_chars

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCore:
    """What request actors and routes use once the model is loaded."""

    bus: EventBus
    batcher: Batcher
    tokenizer: Any
    clock: Clock
    max_model_len: int
    max_prompt_chars: int  # a longer prompt text cannot fit: refused before tokenizing
    precompile: Callable[[str], object] | None = None
    responses: ResponsesStore | None = None  # the Responses API's store


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


class Engine:
    def __init__(
        self,
        settings: Settings,
        load: Callable[[Settings], Runtime],
        *,
        clock: Clock = time.time,
        on_fatal: Callable[[], None] = terminate_process,
    ) -> None:
        self.settings = settings
        self._load = load
        self._clock = clock
        self._on_fatal = on_fatal
        self.bus = EventBus(clock)
        self.metrics = Metrics()
        self.bus.subscribe(self.metrics.apply)
        self.responses = ResponsesStore(settings.responses_store_max)
        self.core: EngineCore | None = None
        self.logger: RequestLogger | None = None
        self.has_stopped = False  # the engine ended (failure or shutdown): nothing is served
        self.detached: dict[str, Detached] = {}  # running background tasks, by request id
        self._nursery: trio.Nursery | None = None
        self.created = int(clock())

    @property
    def is_ready(self) -> bool:
        return self.core is not None and not self.has_stopped

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
            device = DeviceThread()  # loads the model, then runs every step
            try:
                try:
                    runtime = await device.run_sync(self._load, self.settings)
                except Exception:
                    log.critical("model_load_failed", model=self.settings.model, exc_info=True)
                    self._on_fatal()
                    return
                await self._serve(runtime, device)
            finally:
                device.close()
                nursery.cancel_scope.cancel()  # the logger, after it wrote what is queued

    async def _serve(self, runtime: Runtime, device: DeviceThread) -> None:
        batcher = self._batcher(runtime, device)
        runner = runtime.runner
        self.core = EngineCore(
            bus=self.bus,
            batcher=batcher,
            tokenizer=runtime.tokenizer,
            clock=self._clock,
            max_model_len=runtime.max_model_len,
            max_prompt_chars=runtime.max_model_len * max_token_chars(runtime.tokenizer),
            precompile=runtime.precompile,
            responses=self.responses,
        )
        log.info(
            "engine_ready",
            max_model_len=runtime.max_model_len,
            max_num_seqs=self.settings.max_num_seqs,
            num_kv_blocks=runner.num_blocks,
            block_size=runner.block_size,
            max_concurrency=round(runner.num_blocks * runner.block_size / runtime.max_model_len, 2),
        )
        try:
            await batcher.run()
        except Exception:
            log.critical("batcher_died", exc_info=True)
            batcher.fail_all(EngineFailed("the engine failed; the server is shutting down"))
            self._on_fatal()
        finally:
            batcher.fail_all(EngineFailed("the server is shutting down"))

    def _batcher(self, runtime: Runtime, device: DeviceThread) -> Batcher:
        """The Batcher over a Scheduler and KV bookkeeping sized to the runner's cache."""
        s = self.settings
        kv = KVCacheManager(
            num_blocks=runtime.runner.num_blocks,
            block_size=runtime.runner.block_size,
            enable_prefix_caching=s.enable_prefix_caching,
        )
        scheduler = Scheduler(
            kv=kv,
            max_num_seqs=s.max_num_seqs,
            max_num_batched_tokens=s.max_num_batched_tokens,
            eos_token_ids=runtime.runner.eos_token_ids,
            max_model_len=runtime.max_model_len,
        )
        return Batcher(
            runtime.runner,
            scheduler,
            publish=self.bus.publish,
            max_queued_requests=s.max_queued_requests,
            max_queue_wait_s=s.max_queue_wait,
            device=device,
        )

    def _restore(self, log_path: str) -> None:
        """Stored responses come back from the request log of earlier runs."""
        if not os.path.exists(log_path):
            return
        for envelope in read_log(log_path):
            self.responses.apply(envelope)
