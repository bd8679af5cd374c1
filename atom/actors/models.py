"""Models: loads and unloads the served models, and runs each one's actor (a Batcher, a
Pooler or a Transcriber). Its parts do the rest: the Registry routes names to loaded models, Loras
serves adapters on them, Weights swaps their weights and puts them to sleep.

The Engine starts it with the models of the command line; the admin routes load and
unload more while the others serve. A load runs in a worker thread, never on the
device thread, so running models keep stepping meanwhile; an unload first takes the
model out of routing, lets what it runs finish (bounded), then stops its actor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
import trio

from atom.actors.bus import Clock, EventBus
from atom.actors.cores import Core, Loaded
from atom.actors.device import DeviceThread
from atom.actors.loras import Loras
from atom.actors.model_actors import Actor, ActorParts, make_actor
from atom.actors.profiler import Phases
from atom.actors.registry import Registry
from atom.actors.weights import Weights
from atom.model.catalog import ModelKind, ModelSpec
from atom.model.heap import loading, thaw_heap
from atom.model.runner import Runtime
from atom.model.scheduling.kv_cache import KVChange
from atom.projections.responses_store import ResponsesStore
from atom.vocabulary.choices import Quantization
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import (
    AtomError,
    Conflict,
    EngineFailed,
    EngineNotReady,
    InvalidRequest,
    ModelNotFound,
)

log = structlog.get_logger(__name__)

UNLOAD_DRAIN_S = 30.0  # running requests of a model being unloaded may finish this long


class Models:
    def __init__(
        self,
        settings: Settings,
        specs: tuple[ModelSpec, ...],
        load: Callable[[Settings, ModelSpec], Loaded],
        *,
        bus: EventBus,
        clock: Clock,
        responses: ResponsesStore,
        on_fatal: Callable[[], None],
        phases: Phases | None = None,
        kv_events: Callable[[KVChange], None] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = Registry(specs)
        self.loras = Loras(settings, self.registry)  # the served LoRA adapters
        self.weights = Weights(self.registry)  # new weights, sleep and wake-up
        self._load = load
        self._on_fatal = on_fatal
        self._actors: dict[str, _Served] = {}
        self._nursery: trio.Nursery | None = None
        self._device: DeviceThread | None = None
        self.is_started = False  # every start-up model is loaded
        self._stop_reason: str | None = None
        self._stopped = trio.Event()  # stop() was called: run() returns once actors end
        if settings.models_max is not None and len(specs) > settings.models_max:
            raise ValueError(f"--models-max {settings.models_max} is fewer than the --model values")
        self._parts = ActorParts(
            settings=settings,
            bus=bus,
            clock=clock,
            responses=responses,
            phases=phases,
            kv_events=kv_events,
        )

    # --- lifecycle -------------------------------------------------------------------

    async def run(self, device: DeviceThread) -> None:
        """Load the start-up models one after the other on `device`, then serve them (and
        those loaded later) until cancelled. A start-up model that fails to load, or any
        model's actor failing, is fatal."""
        self._device = device
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for spec in list(self.registry.specs.values()):
                try:
                    loaded = await device.run_sync(self._load_with_draft, spec)
                except Exception:
                    log.critical("model_load_failed", model=spec.source, exc_info=True)
                    self._on_fatal()
                    nursery.cancel_scope.cancel()  # the models already loaded stop too
                    return
                await nursery.start(self._serve, spec, loaded)
                try:
                    await self.loras.start(spec)
                except AtomError as error:
                    log.critical("lora_load_failed", model=spec.name, error=error.message)
                    self._on_fatal()
                    nursery.cancel_scope.cancel()
                    return
            self.is_started = True
            # Open until stop(): a runtime load must find the nursery open even while an
            # eviction (--models-max) leaves it with no actor for a moment.
            await self._stopped.wait()
            for served in list(self._actors.values()):
                served.scope.cancel()

    async def load(self, spec: ModelSpec) -> Core:
        """Load `spec` at runtime and serve it; over `--models-max`, the least recently
        used other model is unloaded first. Conflict (409) for a name already served,
        InvalidRequest (400) when its files do not load."""
        if self._nursery is None:
            raise EngineNotReady("the server is still starting; retry shortly")
        if spec.name in self.registry.specs or spec.name in self.registry.loras:
            raise Conflict(f"a model is already served as `{spec.name}`", param="model")
        self.registry.put_spec(spec.name, spec)  # listed as loading from now on
        try:
            with trio.CancelScope(shield=True):  # a load cannot be stopped half way
                loaded = await trio.to_thread.run_sync(self._load_with_draft, spec)
        except Exception as exc:
            self.registry.put_spec(spec.name, None)
            log.warning("model_load_failed", model=spec.source, error=str(exc))
            raise InvalidRequest(f"could not load {spec.source}: {exc}", param="model") from None
        limit = self.settings.models_max
        while limit is not None and len(self.registry.cores) >= limit:
            await self.unload(self.registry.least_recently_used(), is_eviction=True)
        await self._nursery.start(self._serve, spec, loaded)
        log.info("model_loaded_at_runtime", model=spec.name, kind=spec.kind.value)
        return self.registry.cores[spec.name]

    async def unload(self, name: str, *, is_eviction: bool = False) -> ModelSpec:
        """Stop serving `name`: new requests get a 404 at once; running ones may finish
        for UNLOAD_DRAIN_S seconds, then get an error. Conflict (409) for the last loaded
        model or the last generation model, unless a load evicts it for its successor."""
        if name not in self.registry.cores:
            raise ModelNotFound(f"the model `{name}` is not loaded", param="model")
        if not is_eviction:
            self._check_not_last(name)
        spec = self.registry.specs[name]
        self.registry.put_spec(name, None)
        self.loras.drop_base(name)
        self.weights.forget(name)
        served = self._actors[name]
        with trio.move_on_after(UNLOAD_DRAIN_S):
            await served.actor.idle.wait()
        served.scope.cancel()
        await served.ended.wait()
        thaw_heap()
        log.info("model_unloaded", model=name)
        return spec

    def _check_not_last(self, name: str) -> None:
        """No unload leaves the server with no model, or no generation model."""
        specs = self.registry.specs
        others = [other for other in self.registry.cores if other != name]
        if not others:
            raise Conflict(f"`{name}` is the only model served; load another first")
        generating = [o for o in others if specs[o].kind is ModelKind.GENERATE]
        if specs[name].kind is ModelKind.GENERATE and not generating:
            raise Conflict(f"`{name}` is the last generation model; load another first")

    def _load_with_draft(self, spec: ModelSpec) -> Loaded:
        """`spec` loaded (on the calling thread), with the draft model speculative decoding
        names beside a generation model; the garbage collector paused meanwhile, then what
        is alive frozen (heap.loading)."""
        with loading():
            loaded = self._load(self.settings, spec)
            config = self.settings.speculative
            if config is not None and config.model is not None and isinstance(loaded, Runtime):
                loaded = self._with_draft(loaded, spec, config.model, config.quantization)
        return loaded

    def _with_draft(
        self, loaded: Runtime, spec: ModelSpec, source: str, quantization: Quantization | None
    ) -> Runtime:
        """`loaded` with the draft model at `source` beside it: the same settings but its
        own quantization if named, its own KV cache of --kv-cache-memory-bytes; refused
        unless its vocabulary is the served one's."""
        draft_spec = ModelSpec(name=f"{spec.name}:draft", source=source, kind=spec.kind)
        quantization = quantization or self.settings.quantization
        settings = dataclasses.replace(
            self.settings, speculative_config=None, quantization=quantization
        )
        draft = self._load(settings, draft_spec)
        assert isinstance(draft, Runtime)
        if draft.tokenizer.get_vocab() != loaded.tokenizer.get_vocab():
            raise ValueError(
                f"--speculative-config: the draft model {source} has another "
                f"tokenizer than {spec.source}"
            )
        return dataclasses.replace(loaded, draft=draft.runner)

    def fail_all(self, error: AtomError) -> None:
        """Fail every request any model holds (the engine is dying); new ones are refused."""
        for served in self._actors.values():
            served.actor.fail_all(error)

    def stop(self, reason: str) -> None:
        """Stop every model's actor; what they still run fails with `reason`."""
        self._stop_reason = reason
        self._stopped.set()

    async def _serve(
        self, spec: ModelSpec, loaded: Loaded, *, task_status: trio.TaskStatus[None]
    ) -> None:
        """Serve one model until it is unloaded or the engine stops."""
        assert self._device is not None
        actor, core = make_actor(self._parts, spec, loaded, self._device)
        self.registry.put_core(spec.name, core)
        with trio.CancelScope() as scope:
            served = self._actors[spec.name] = _Served(actor, scope)
            task_status.started()
            try:
                await actor.run()
            except Exception:
                log.critical("model_actor_died", model=spec.name, exc_info=True)
                actor.fail_all(EngineFailed("the engine failed; the server is shutting down"))
                self._on_fatal()
                self._stop_reason = "the engine failed; the server is shutting down"
                self._stopped.set()  # every other model stops too
            finally:
                gone = self._stop_reason or f"the model `{spec.name}` is no longer served"
                actor.fail_all(EngineFailed(gone))
                self.registry.put_core(spec.name, None)
                del self._actors[spec.name]
                served.ended.set()


@dataclass(slots=True)
class _Served:
    """A loaded model's actor, the scope that stops it, and when its task has ended."""

    actor: Actor
    scope: trio.CancelScope
    ended: trio.Event = field(default_factory=trio.Event)
