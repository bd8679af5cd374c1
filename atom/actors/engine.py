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
from typing import Any

import structlog
import trio

from atom.actors.batcher import Batcher
from atom.actors.bus import Clock, EventBus
from atom.actors.device import DeviceThread
from atom.actors.logger import RequestLogger
from atom.actors.pooler import Pooler
from atom.actors.tap import OutputTap
from atom.config import Settings
from atom.errors import EngineFailed, EngineNotReady, InvalidRequest, ModelNotFound
from atom.metrics import Metrics
from atom.model.catalog import ModelKind, ModelSpec, served_models
from atom.model.pooling import PoolingRuntime
from atom.model.runner import Runtime
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.request_log import read_log
from atom.responses_store import ResponsesStore
from atom.text.prompt import max_token_chars

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCore:
    """What request actors and routes use of a loaded generation model."""

    name: str  # the served model name
    bus: EventBus
    batcher: Batcher
    tokenizer: Any
    clock: Clock
    max_model_len: int
    max_prompt_chars: int  # a longer prompt text cannot fit: refused before tokenizing
    precompile: Callable[[str], object] | None = None
    responses: ResponsesStore | None = None  # the Responses API's store


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingCore:
    """What the pooling routes use of a loaded embedding, score or classify model."""

    name: str
    kind: ModelKind
    bus: EventBus
    pooler: Pooler
    tokenizer: Any
    clock: Clock
    max_model_len: int
    num_dimensions: int
    labels: tuple[str, ...] = ()
    is_matryoshka: bool = False


Core = EngineCore | PoolingCore
Loaded = Runtime | PoolingRuntime
GENERATION = frozenset({ModelKind.GENERATE})
KIND_NAMES = {
    ModelKind.GENERATE: "a generation model",
    ModelKind.EMBED: "an embedding model",
    ModelKind.SCORE: "a cross-encoder (score) model",
    ModelKind.CLASSIFY: "a classification model",
}


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
        self.specs = served_models(settings)
        self._load = load
        self._clock = clock
        self._on_fatal = on_fatal
        self.bus = EventBus(clock)
        self.metrics = Metrics()
        self.bus.subscribe(self.metrics.apply)
        self.responses = ResponsesStore(settings.responses_store_max)
        self.cores: dict[str, Core] = {}  # the loaded models, by served name
        self.logger: RequestLogger | None = None
        self.has_stopped = False  # the engine ended (failure or shutdown): nothing is served
        self.detached: dict[str, Detached] = {}  # running background tasks, by request id
        self._nursery: trio.Nursery | None = None
        self.created = int(clock())

    @property
    def is_ready(self) -> bool:
        return len(self.cores) == len(self.specs) and not self.has_stopped

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
        """The loaded model for a request to `route`, which models of `kinds` serve.
        ModelNotFound (404) for an unknown name, InvalidRequest (400) for a model of
        another kind, EngineNotReady (503) while it loads, EngineFailed once stopped."""
        if self.has_stopped:
            raise EngineFailed("the engine has stopped; the server is shutting down")
        serving = [s.name for s in self.specs if s.kind in kinds]
        names = ", ".join(f"`{name}`" for name in serving) or "no model here"
        if requested is None and serving:
            requested = serving[0]
        spec = next((s for s in self.specs if s.name == requested), None)
        if spec is None and requested is not None:
            served = ", ".join(f"`{s.name}`" for s in self.specs)
            raise ModelNotFound(
                f"the model `{requested}` does not exist; this server serves {served}",
                param="model",
            )
        if spec is None or spec.kind not in kinds:
            kind = "" if spec is None else f"`{spec.name}` is {KIND_NAMES[spec.kind]}; "
            raise InvalidRequest(f"{kind}{route} is served by {names}", param="model")
        core = self.cores.get(spec.name)
        if core is None:
            raise EngineNotReady(f"the model `{spec.name}` is still loading; retry shortly")
        return core

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
            device = DeviceThread()  # loads the models, then runs every step of each
            try:
                async with trio.open_nursery() as models:
                    for spec in self.specs:
                        try:
                            loaded = await device.run_sync(self._load, self.settings, spec)
                        except Exception:
                            log.critical("model_load_failed", model=spec.source, exc_info=True)
                            self._on_fatal()
                            return
                        models.start_soon(self._serve, spec, loaded, device)
            finally:
                device.close()
                nursery.cancel_scope.cancel()  # the logger, after it wrote what is queued

    async def _serve(self, spec: ModelSpec, loaded: Loaded, device: DeviceThread) -> None:
        """Serve one model until the engine stops; its actor failing stops the server."""
        actor = self._actor(spec, loaded, device)
        try:
            await actor.run()
        except Exception:
            log.critical("model_actor_died", model=spec.name, exc_info=True)
            actor.fail_all(EngineFailed("the engine failed; the server is shutting down"))
            self._on_fatal()
        finally:
            actor.fail_all(EngineFailed("the server is shutting down"))
            self.cores.pop(spec.name, None)

    def _actor(self, spec: ModelSpec, loaded: Loaded, device: DeviceThread) -> Batcher | Pooler:
        """The model's actor, its core registered for the routes."""
        if isinstance(loaded, PoolingRuntime):
            pooler = Pooler(
                loaded.runner,
                device=device,
                max_num_batched_tokens=self.settings.max_num_batched_tokens,
                max_queued_requests=self.settings.max_queued_requests,
            )
            self.cores[spec.name] = PoolingCore(
                name=spec.name,
                kind=loaded.kind,
                bus=self.bus,
                pooler=pooler,
                tokenizer=loaded.tokenizer,
                clock=self._clock,
                max_model_len=loaded.max_model_len,
                num_dimensions=loaded.num_dimensions,
                labels=loaded.labels,
                is_matryoshka=loaded.is_matryoshka,
            )
            return pooler
        batcher = self._batcher(spec.name, loaded, device)
        self.cores[spec.name] = EngineCore(
            name=spec.name,
            bus=self.bus,
            batcher=batcher,
            tokenizer=loaded.tokenizer,
            clock=self._clock,
            max_model_len=loaded.max_model_len,
            max_prompt_chars=loaded.max_model_len * max_token_chars(loaded.tokenizer),
            precompile=loaded.precompile,
            responses=self.responses,
        )
        return batcher

    def _batcher(self, name: str, runtime: Runtime, device: DeviceThread) -> Batcher:
        """The Batcher over a Scheduler and KV bookkeeping sized to the runner's cache."""
        s = self.settings
        runner = runtime.runner
        log.info(
            "engine_ready",
            model=name,
            max_model_len=runtime.max_model_len,
            max_num_seqs=s.max_num_seqs,
            num_kv_blocks=runner.num_blocks,
            block_size=runner.block_size,
            max_concurrency=round(runner.num_blocks * runner.block_size / runtime.max_model_len, 2),
        )
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
            model=name,
        )

    def _restore(self, log_path: str) -> None:
        """Stored responses come back from the request log of earlier runs."""
        if not os.path.exists(log_path):
            return
        for envelope in read_log(log_path):
            self.responses.apply(envelope)
