"""Registry: which models and adapters are served, which are loaded, and which one a
request means.

Requests are planned in worker threads (templates and tokenizers run off the event
loop), and they look their model up there, while admin routes load and unload models
on the event loop. So the table is a `Routes` snapshot that is never changed in place:
every change (on the event loop) builds a new one and swaps it in with one assignment,
and a lookup reads one snapshot from start to end.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from atom.actors.cores import Core, EngineCore
from atom.model.catalog import ModelKind, ModelSpec
from atom.vocabulary.errors import EngineNotReady, InvalidRequest, ModelNotFound

V = TypeVar("V")
KIND_NAMES = {
    ModelKind.GENERATE: "a generation model",
    ModelKind.EMBED: "an embedding model",
    ModelKind.SCORE: "a cross-encoder (score) model",
    ModelKind.CLASSIFY: "a classification model",
    ModelKind.TRANSCRIBE: "a speech-to-text model",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraCard:
    """A served adapter, as /v1/models lists it."""

    name: str
    path: str
    base: str  # the served name of its base model
    rank: int
    num_bytes: int


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Routes:
    """One moment's routing table."""

    specs: Mapping[str, ModelSpec] = field(default_factory=_empty)  # served or loading
    cores: Mapping[str, Core] = field(default_factory=_empty)  # the loaded ones
    loras: Mapping[str, LoraCard] = field(default_factory=_empty)  # routed adapters


def _with(table: Mapping[str, V], name: str, value: V | None) -> Mapping[str, V]:
    """A copy of `table` with `name` set to `value` (None: without `name`), in order."""
    changed = {k: v for k, v in table.items() if k != name or value is not None}
    if value is not None:
        changed[name] = value
    return MappingProxyType(changed)


class Registry:
    def __init__(self, specs: tuple[ModelSpec, ...]) -> None:
        self.routes = Routes(specs=MappingProxyType({spec.name: spec for spec in specs}))
        # When each model was last asked for (--models-max unloads the least recent).
        # Written and read on the event loop only (`touch`).
        self._last_used: dict[str, float] = {}

    @property
    def specs(self) -> Mapping[str, ModelSpec]:
        return self.routes.specs

    @property
    def cores(self) -> Mapping[str, Core]:
        return self.routes.cores

    @property
    def loras(self) -> Mapping[str, LoraCard]:
        return self.routes.loras

    # --- changes (on the event loop) ------------------------------------------------

    def put_spec(self, name: str, spec: ModelSpec | None) -> None:
        self.routes = dataclasses.replace(self.routes, specs=_with(self.specs, name, spec))

    def put_core(self, name: str, core: Core | None) -> None:
        self.routes = dataclasses.replace(self.routes, cores=_with(self.cores, name, core))

    def put_lora(self, name: str, card: LoraCard | None) -> None:
        self.routes = dataclasses.replace(self.routes, loras=_with(self.loras, name, card))

    def touch(self, name: str) -> None:
        """A request was admitted for `name` (an adapter counts for its base model)."""
        card = self.loras.get(name)
        self._last_used[card.base if card is not None else name] = time.monotonic()

    def least_recently_used(self) -> str:
        return min(self.cores, key=lambda name: self._last_used.get(name, 0.0))

    # --- lookups (any thread) -------------------------------------------------------

    def core(self, requested: str | None, kinds: frozenset[ModelKind], route: str) -> Core:
        """The loaded model for a request to `route`, which models of `kinds` serve (the
        first of them when the request names none). ModelNotFound (404) for an unknown
        name, InvalidRequest (400) for a model of another kind, EngineNotReady (503) while
        it loads."""
        return _core(self.routes, requested, kinds, route)  # one snapshot throughout

    def description_of(self, name: str) -> dict[str, str]:
        """What loading chose for a loaded model (device, dtype, kernels…); {} otherwise."""
        core = self.cores.get(name)
        return dict(core.description) if core else {}

    def card_of(self, name: str) -> dict[str, Any]:
        """What /v1/models says of a model beyond its name: its kind, limit and state (an
        adapter: its folder and its base model as `parent`)."""
        routes = self.routes
        lora = routes.loras.get(name)
        if lora is not None:
            card = self.card_of(lora.base)
            return {**card, "root": lora.path, "parent": lora.base, "lora_rank": lora.rank}
        spec, core = routes.specs[name], routes.cores.get(name)
        return {
            "root": spec.source,
            "kind": spec.kind.value,
            "max_model_len": core.max_model_len if core else None,
            "status": "loaded" if core else "loading",
        }


def _core(routes: Routes, requested: str | None, kinds: frozenset[ModelKind], route: str) -> Core:
    card = routes.loras.get(requested) if requested is not None else None
    if card is not None:  # an adapter: its base model's core, under the adapter's name
        base = _core(routes, card.base, kinds, route)
        assert isinstance(base, EngineCore)
        return dataclasses.replace(base, name=card.name, lora=card.name)
    serving = [s.name for s in routes.specs.values() if s.kind in kinds]
    if requested is None and serving:
        requested = serving[0]
    spec = routes.specs.get(requested) if requested is not None else None
    if spec is None and requested is not None:
        served = ", ".join(f"`{name}`" for name in [*routes.specs, *routes.loras])
        raise ModelNotFound(
            f"the model `{requested}` does not exist; this server serves {served}",
            param="model",
        )
    if spec is None or spec.kind not in kinds:
        kind = "" if spec is None else f"`{spec.name}` is {KIND_NAMES[spec.kind]}; "
        names = ", ".join(f"`{name}`" for name in serving) or "no model here"
        raise InvalidRequest(f"{kind}{route} is served by {names}", param="model")
    core = routes.cores.get(spec.name)
    if core is None:
        raise EngineNotReady(f"the model `{spec.name}` is still loading; retry shortly")
    return core
