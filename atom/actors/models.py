"""Models: the served models — which exist, which are loaded, which one a request means —
and each one's actor (a Batcher or a Pooler), started, stopped and swapped at runtime.

The Engine starts it with the models of the command line; the admin routes load and
unload more while the others serve. A load runs in a worker thread, never on the
device thread, so running models keep stepping meanwhile; an unload first takes the
model out of routing, lets what it runs finish (bounded), then stops its actor.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import structlog
import trio

from atom.actors.batcher import Batcher
from atom.actors.bus import Clock, EventBus
from atom.actors.cores import Core, EngineCore, Loaded
from atom.actors.device import DeviceThread
from atom.actors.loras import LoraCard, Loras
from atom.actors.model_actors import ActorParts, make_actor
from atom.actors.pooler import Pooler
from atom.actors.profiler import Phases
from atom.model.catalog import ModelKind, ModelSpec
from atom.model.heap import loading, thaw_heap
from atom.model.runner import Runtime
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

KIND_NAMES = {
    ModelKind.GENERATE: "a generation model",
    ModelKind.EMBED: "an embedding model",
    ModelKind.SCORE: "a cross-encoder (score) model",
    ModelKind.CLASSIFY: "a classification model",
}
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
    ) -> None:
        self.settings = settings
        self.specs = {spec.name: spec for spec in specs}  # served or loading, in order
        self.cores: dict[str, Core] = {}  # the loaded ones
        self._load = load
        self._on_fatal = on_fatal
        self._actors: dict[str, tuple[Batcher | Pooler, trio.CancelScope]] = {}
        self._last_used: dict[str, float] = {}
        self._sources: dict[str, str] = {}  # where weights replaced at runtime came from
        self._nursery: trio.Nursery | None = None
        self._device: DeviceThread | None = None
        self.is_started = False  # every start-up model is loaded
        self._stop_reason: str | None = None
        self._stopped = trio.Event()  # stop() was called: run() returns once actors end
        if settings.models_max is not None and len(specs) > settings.models_max:
            raise ValueError(f"--models-max {settings.models_max} is fewer than the --model values")
        self._speculation = settings.speculative
        self._parts = ActorParts(
            settings=settings,
            bus=bus,
            clock=clock,
            responses=responses,
            phases=phases,
            speculation=self._speculation,
        )
        self.loras = Loras(settings)  # the served LoRA adapters, by name

    # --- routing (called by the routes, on the event loop) -------------------------

    def core(self, requested: str | None, kinds: frozenset[ModelKind], route: str) -> Core:
        """The loaded model for a request to `route`, which models of `kinds` serve (the
        first of them when the request names none). ModelNotFound (404) for an unknown
        name, InvalidRequest (400) for a model of another kind, EngineNotReady (503) while
        it loads."""
        card = self.loras.cards.get(requested) if requested is not None else None
        if card is not None:  # an adapter: its base model's core, under the adapter's name
            base = self.core(card.base, kinds, route)
            assert isinstance(base, EngineCore)
            return dataclasses.replace(base, name=card.name, lora=card.name)
        serving = [s.name for s in self.specs.values() if s.kind in kinds]
        if requested is None and serving:
            requested = serving[0]
        spec = self.specs.get(requested) if requested is not None else None
        if spec is None and requested is not None:
            served = ", ".join(f"`{name}`" for name in [*self.specs, *self.loras.cards])
            raise ModelNotFound(
                f"the model `{requested}` does not exist; this server serves {served}",
                param="model",
            )
        if spec is None or spec.kind not in kinds:
            kind = "" if spec is None else f"`{spec.name}` is {KIND_NAMES[spec.kind]}; "
            names = ", ".join(f"`{name}`" for name in serving) or "no model here"
            raise InvalidRequest(f"{kind}{route} is served by {names}", param="model")
        core = self.cores.get(spec.name)
        if core is None:
            raise EngineNotReady(f"the model `{spec.name}` is still loading; retry shortly")
        # A monotonic clock, not trio's: generation requests are built in worker threads.
        self._last_used[spec.name] = time.monotonic()
        return core

    # --- lifecycle -------------------------------------------------------------------

    async def run(self, device: DeviceThread) -> None:
        """Load the start-up models one after the other on `device`, then serve them (and
        those loaded later) until cancelled. A start-up model that fails to load, or any
        model's actor failing, is fatal."""
        self._device = device
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for spec in list(self.specs.values()):
                try:
                    loaded = await device.run_sync(self._load_with_draft, spec)
                except Exception:
                    log.critical("model_load_failed", model=spec.source, exc_info=True)
                    self._on_fatal()
                    nursery.cancel_scope.cancel()  # the models already loaded stop too
                    return
                await nursery.start(self._serve, spec, loaded)
                if not await self._start_loras(spec):
                    nursery.cancel_scope.cancel()
                    return
            self.is_started = True
            # Open until stop(): a runtime load must find the nursery open even while an
            # eviction (--models-max) leaves it with no actor for a moment.
            await self._stopped.wait()
            for _, actor_scope in list(self._actors.values()):
                actor_scope.cancel()

    async def _start_loras(self, spec: ModelSpec) -> bool:
        """Serve the `--lora-modules` of a start-up model; False (fatal) when one fails."""
        generation = [s.name for s in self.specs.values() if s.kind is ModelKind.GENERATE]
        for module in self.loras.at_start(spec.name, generation[:1] == [spec.name]):
            try:
                await self.load_lora(module.name, module.path, spec.name)
            except AtomError as error:
                log.critical("lora_load_failed", lora=module.name, error=error.message)
                self._on_fatal()
                return False
        return True

    async def load_lora(
        self, name: str, path: str, base: str | None, *, replace: bool = False
    ) -> LoraCard:
        """Serve the PEFT adapter at `path` as `name` on the generation model `base` (the
        first one when None): Loras.load; Conflict (409) for a model's name."""
        if name in self.specs:
            raise Conflict(f"a model is already served as `{name}`", param="lora_name")
        card = self.loras.cards.get(name)
        if card is not None and replace:
            base = card.base
        core = self.core(base, frozenset({ModelKind.GENERATE}), "/v1/load_lora_adapter")
        assert isinstance(core, EngineCore)
        card = await self.loras.load(core, name, path, replace=replace)
        log.info(
            "lora_loaded",
            lora=name,
            model=card.base,
            path=card.path,
            rank=card.rank,
            num_bytes=card.num_bytes,  # its host copy; device slots come on top
        )
        return card

    async def unload_lora(self, name: str) -> LoraCard:
        """Stop serving the adapter `name`: ModelNotFound (404) when none is served so,
        the Batcher's Conflict (409) while requests use it."""
        card = self.loras.cards.get(name)
        core = self.cores.get(card.base) if card is not None else None
        if card is None or not isinstance(core, EngineCore):
            raise ModelNotFound(f"no adapter is served as `{name}`", param="lora_name")
        card = await self.loras.unload(core, name)
        log.info("lora_unloaded", lora=name, model=card.base)
        return card

    async def load(self, spec: ModelSpec) -> Core:
        """Load `spec` at runtime and serve it; over `--models-max`, the least recently
        used other model is unloaded first. Conflict (409) for a name already served,
        InvalidRequest (400) when its files do not load."""
        if self._nursery is None:
            raise EngineNotReady("the server is still starting; retry shortly")
        if spec.name in self.specs or spec.name in self.loras.cards:
            raise Conflict(f"a model is already served as `{spec.name}`", param="model")
        self.specs[spec.name] = spec  # listed as loading from now on
        try:
            with trio.CancelScope(shield=True):  # a load cannot be stopped half way
                loaded = await trio.to_thread.run_sync(self._load_with_draft, spec)
        except Exception as exc:
            del self.specs[spec.name]
            log.warning("model_load_failed", model=spec.source, error=str(exc))
            raise InvalidRequest(f"could not load {spec.source}: {exc}", param="model") from None
        limit = self.settings.models_max
        while limit is not None and len(self.cores) >= limit:
            oldest = min(self.cores, key=lambda name: self._last_used.get(name, 0.0))
            await self.unload(oldest, is_eviction=True)
        await self._nursery.start(self._serve, spec, loaded)
        log.info("model_loaded_at_runtime", model=spec.name, kind=spec.kind.value)
        return self.cores[spec.name]

    async def unload(self, name: str, *, is_eviction: bool = False) -> ModelSpec:
        """Stop serving `name`: new requests get a 404 at once; running ones may finish
        for UNLOAD_DRAIN_S seconds, then get an error. Conflict (409) for the last loaded
        model or the last generation model, unless a load evicts it for its successor."""
        if name not in self.cores:
            raise ModelNotFound(f"the model `{name}` is not loaded", param="model")
        if not is_eviction:
            self._check_not_last(name)
        spec = self.specs.pop(name)
        self.loras.drop_base(name)
        self._sources.pop(name, None)  # a model loaded later under this name starts afresh
        actor, scope = self._actors[name]
        with trio.move_on_after(UNLOAD_DRAIN_S):
            while not actor.is_idle:
                await trio.sleep(0.05)
        scope.cancel()
        while name in self.cores:
            await trio.sleep(0)
        thaw_heap()
        log.info("model_unloaded", model=name)
        return spec

    def _check_not_last(self, name: str) -> None:
        """No unload leaves the server with no model, or no generation model."""
        others = [other for other in self.cores if other != name]
        if not others:
            raise Conflict(f"`{name}` is the only model served; load another first")
        generating = [o for o in others if self.specs[o].kind is ModelKind.GENERATE]
        if self.specs[name].kind is ModelKind.GENERATE and not generating:
            raise Conflict(f"`{name}` is the last generation model; load another first")

    def _load_with_draft(self, spec: ModelSpec) -> Loaded:
        """`spec` loaded (on the calling thread), with the draft model speculative decoding
        names beside a generation model; the garbage collector paused meanwhile, then what
        is alive frozen (heap.loading)."""
        with loading():
            loaded = self._load(self.settings, spec)
            config = self._speculation
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

    # --- model state (update weights, sleep) ---------------------------------------

    async def update_weights(self, name: str | None, path: str, version: str | None) -> int:
        """New weights for a generation model (the first one when `name` is None), read
        from `path` in a worker thread and swapped in between two steps. Returns how many
        requests continue on them. InvalidRequest when they do not load or fit."""
        core = self.core(name, frozenset({ModelKind.GENERATE}), "/update_weights_from_disk")
        assert isinstance(core, EngineCore)
        if core.batcher.sleep_level:
            raise Conflict(f"the model `{core.name}` is asleep; POST /wake_up first")
        weights = await self._read_weights(core, path)
        paused = await core.batcher.replace_weights(weights, source=path, version=version)
        self._sources[core.name] = path
        log.info("weights_updated", model=core.name, source=path, weight_version=version)
        return paused

    async def sleep(self, level: int) -> None:
        """Every generation model sleeps once what it runs has finished (Batcher.sleep).
        Level 2 drops weights: refused while a model cannot read them again."""
        stuck = [c.name for c in self._generation_cores() if c.load_weights is None]
        if level >= 2 and stuck:
            raise InvalidRequest(
                f"sleep level 2 drops the weights and `{stuck[0]}` cannot load them again "
                "(a vision-language model): use level 1",
                param="level",
            )
        async with trio.open_nursery() as nursery:
            for core in self._generation_cores():
                nursery.start_soon(core.batcher.sleep, level)

    async def wake_up(self) -> None:
        """Every sleeping generation model wakes; after a level-2 sleep its weights are
        read again from where they last came from."""
        for core in self._generation_cores():
            weights, source = None, None
            if core.batcher.is_asleep and core.batcher.sleep_level >= 2:
                source = self._sources.get(core.name, self.specs[core.name].source)
                weights = await self._read_weights(core, source)
            await core.batcher.wake_up(weights, source=source)

    @property
    def is_sleeping(self) -> bool:
        return any(core.batcher.sleep_level for core in self._generation_cores())

    def _generation_cores(self) -> list[EngineCore]:
        return [core for core in self.cores.values() if isinstance(core, EngineCore)]

    async def _read_weights(self, core: EngineCore, path: str) -> Any:
        if core.load_weights is None:
            raise InvalidRequest(f"the model `{core.name}` cannot load new weights")
        try:
            with trio.CancelScope(shield=True):  # a load cannot be stopped half way
                return await trio.to_thread.run_sync(core.load_weights, path)
        except Exception as exc:
            log.warning("weights_load_failed", model=core.name, source=path, error=str(exc))
            raise InvalidRequest(f"could not load weights from {path}: {exc}") from None

    def fail_all(self, error: AtomError) -> None:
        """Fail every request any model holds (the engine is dying); new ones are refused."""
        for actor, _ in self._actors.values():
            actor.fail_all(error)

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
        self.cores[spec.name] = core
        with trio.CancelScope() as scope:
            self._actors[spec.name] = (actor, scope)
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
                del self.cores[spec.name], self._actors[spec.name]

    def description_of(self, name: str) -> dict[str, str]:
        """What loading chose for a loaded model (device, dtype, kernels…); {} otherwise."""
        core = self.cores.get(name)
        return dict(core.description) if core else {}

    def card_of(self, name: str) -> dict[str, Any]:
        """What /v1/models says of a model beyond its name: its kind, limit and state (an
        adapter: its folder and its base model as `parent`)."""
        lora = self.loras.cards.get(name)
        if lora is not None:
            card = self.card_of(lora.base)
            return {**card, "root": lora.path, "parent": lora.base, "lora_rank": lora.rank}
        spec, core = self.specs[name], self.cores.get(name)
        return {
            "root": spec.source,
            "kind": spec.kind.value,
            "max_model_len": core.max_model_len if core else None,
            "status": "loaded" if core else "loading",
        }
