"""The Batcher's model-state changes for the admin routes (new weights, LoRA adapters,
sleep, wake-up): each is a job that runs on the Batcher's loop between two steps
(BoundaryJobs), so a step never sees a half-changed runner. A part of the Batcher
(atom/actors/batcher.py), kept apart to keep each file short."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from atom.actors.batcher_records import Admitted, BoundaryJobs, Queued
from atom.actors.device import DeviceThread
from atom.actors.disk_tier import DiskTierLink
from atom.actors.wait_queue import WaitQueue
from atom.model.lora.adapter import LoraAdapter
from atom.model.runner import Runner
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.errors import AtomError, Conflict, EngineFailed, ModelAsleep
from atom.vocabulary.events import (
    Envelope,
    Event,
    LoraLoaded,
    LoraUnloaded,
    ModelSlept,
    ModelWoke,
    WeightsUpdated,
)


class ModelState:
    """What the Batcher's admin jobs read and change (the Batcher sets every field)."""

    _model: str
    _runner: Runner
    _scheduler: Scheduler
    _device: DeviceThread
    _disk: DiskTierLink | None
    _jobs: BoundaryJobs
    _queue: WaitQueue
    _running: dict[str, Admitted]
    _is_closed: bool
    _reject_while_asleep: bool
    loras: set[str]
    sleep_level: int
    is_asleep: bool
    _publish: Callable[[Event], Envelope]

    def _refuse(self, queued: Queued, error: AtomError) -> None:
        raise NotImplementedError

    async def replace_weights(self, weights: Any, *, source: str, version: str | None) -> int:
        """The runner takes `weights` between two steps and every cached prefix is
        forgotten; running requests continue on them. Returns how many were running."""
        paused: list[int] = []

        async def swap() -> None:
            await self._device.run_sync(self._runner.replace_weights, weights)
            paused.append(len(self._running))
            num_blocks = await self._forget_all()
            updated = WeightsUpdated(
                model=self._model,
                source=source,
                weight_version=version,
                num_paused_requests=paused[0],
                num_blocks=num_blocks,
            )
            self._publish(updated)

        await self._at_boundary(swap)
        return paused[0]

    async def add_lora(self, adapter: LoraAdapter) -> None:
        """The runner takes `adapter` between two steps. An adapter of the same name is
        replaced (running requests continue on the new one) and every cached prefix is
        forgotten, so none computed with the old one is reused."""

        async def add() -> None:
            await self._device.run_sync(self._runner.add_lora, adapter)
            if adapter.name in self.loras:
                await self._forget_all()
            self.loras.add(adapter.name)
            loaded = LoraLoaded(
                model=self._model, lora=adapter.name, path=adapter.path, rank=adapter.rank
            )
            self._publish(loaded)

        await self._at_boundary(add)

    async def remove_lora(self, name: str) -> None:
        """The runner forgets the adapter `name` between two steps, and every cached
        prefix is forgotten. Conflict (409) while requests run or wait with it."""

        async def remove() -> None:
            users = {s.request_id for s in self._scheduler.sequences() if s.lora == name}
            users.update(q.submit.request_id for q in self._queue if q.submit.lora == name)
            if users:
                raise Conflict(
                    f"the adapter `{name}` has {len(users)} requests running or queued; "
                    "unload it once they finish",
                    param="lora_name",
                )
            self.loras.discard(name)
            await self._device.run_sync(self._runner.remove_lora, name)
            await self._forget_all()
            self._publish(LoraUnloaded(model=self._model, lora=name))

        await self._at_boundary(remove)

    async def sleep(self, level: int) -> None:
        """Admit nothing more (queued requests fail with ModelAsleep unless they may
        wait), let the running ones finish, then free the KV cache and, at level 2, the
        weights. Returns once asleep, or once woken again if that came first."""
        if self.sleep_level:
            return
        self.sleep_level = level
        if self._reject_while_asleep:
            for queued in self._queue.take_all():
                self._refuse(queued, self._asleep())

        async def fall_asleep() -> None:
            if self.sleep_level:  # no wake-up came first
                if self._disk is not None:  # the cache's blocks wait on disk
                    await self._disk.save_all(self._runner)
                self._scheduler.kv.forget_prefixes(in_use=True)  # the cache itself goes
                await self._device.run_sync(self._runner.sleep, level)
                self.is_asleep = True
                self._publish(ModelSlept(model=self._model, level=level))

        await self._at_boundary(fall_asleep, when_idle=True)

    async def wake_up(self, weights: Any | None = None, *, source: str | None = None) -> None:
        """Undo `sleep` (`weights`, read from `source`, after a level-2 sleep): the KV
        cache comes back and queued requests are admitted again."""

        async def wake() -> None:
            if self.is_asleep:
                await self._device.run_sync(self._runner.wake_up, weights)
                self._publish(ModelWoke(model=self._model, source=source))
            self.sleep_level, self.is_asleep = 0, False

        if self.sleep_level:
            await self._at_boundary(wake)

    async def _forget_all(self) -> int:
        """New weights or adapters: no cached block holds, in memory or on disk."""
        if self._disk is not None:
            await self._disk.clear()
        return self._scheduler.kv.forget_prefixes(in_use=True)

    def _asleep(self) -> ModelAsleep:
        return ModelAsleep(f"the model `{self._model}` is asleep; POST /wake_up wakes it")

    async def _at_boundary(
        self, run: Callable[[], Awaitable[None]], when_idle: bool = False
    ) -> None:
        if self._is_closed:
            raise EngineFailed("the engine is not running")
        await self._jobs.ask(run, when_idle=when_idle)
