"""Weights: new weights for a generation model, and sleep and wake-up of them all.

Weights are read in a worker thread (a load cannot be stopped half way) and handed to
the model's Batcher, which swaps them in between two steps. Models owns one Weights.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from atom.actors.cores import EngineCore
from atom.actors.registry import Registry
from atom.model.catalog import ModelKind
from atom.vocabulary.errors import Conflict, InvalidRequest

log = structlog.get_logger(__name__)


class Weights:
    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._sources: dict[str, str] = {}  # where weights replaced at runtime came from

    async def update(self, name: str | None, path: str, version: str | None) -> int:
        """New weights for a generation model (the first one when `name` is None), read
        from `path` and swapped in between two steps. Returns how many requests continue
        on them. InvalidRequest when they do not load or fit."""
        core = self._registry.core(
            name, frozenset({ModelKind.GENERATE}), "/update_weights_from_disk"
        )
        assert isinstance(core, EngineCore)
        if core.batcher.sleep_level:
            raise Conflict(f"the model `{core.name}` is asleep; POST /wake_up first")
        weights = await self._read(core, path)
        paused = await core.batcher.replace_weights(weights, source=path, version=version)
        self._sources[core.name] = path
        log.info("weights_updated", model=core.name, source=path, weight_version=version)
        return paused

    def forget(self, name: str) -> None:
        """`name` is unloaded: a model loaded later under this name starts afresh."""
        self._sources.pop(name, None)

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
                source = self._sources.get(core.name, self._registry.specs[core.name].source)
                weights = await self._read(core, source)
            await core.batcher.wake_up(weights, source=source)

    @property
    def is_sleeping(self) -> bool:
        return any(core.batcher.sleep_level for core in self._generation_cores())

    def _generation_cores(self) -> list[EngineCore]:
        cores = self._registry.cores.values()
        return [core for core in cores if isinstance(core, EngineCore)]

    async def _read(self, core: EngineCore, path: str) -> Any:
        if core.load_weights is None:
            raise InvalidRequest(f"the model `{core.name}` cannot load new weights")
        try:
            with trio.CancelScope(shield=True):  # a load cannot be stopped half way
                return await trio.to_thread.run_sync(core.load_weights, path)
        except Exception as exc:
            log.warning("weights_load_failed", model=core.name, source=path, error=str(exc))
            raise InvalidRequest(f"could not load weights from {path}: {exc}") from None
