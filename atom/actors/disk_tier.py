"""The Batcher's side of the prefix cache's disk tier (atom/model/kv_tier.py): reading
the blocks new prefixes could take before a step is planned, saving every cached block
when the model sleeps or the server stops, and what the tier did for EngineStepped."""

from __future__ import annotations

from dataclasses import asdict

import trio

from atom.actors.device import DeviceThread
from atom.model.kv_tier import DiskTier, TierCounts
from atom.model.runner import Runner, StepPlan
from atom.model.scheduling.scheduler import Scheduler

SAVE_TIMEOUT_S = 60.0  # a stop waits at most this long for the cache to reach the disk


class DiskTierLink:
    def __init__(self, disk: DiskTier, scheduler: Scheduler, device: DeviceThread) -> None:
        self._disk, self._scheduler, self._device = disk, scheduler, device
        self._told = TierCounts()  # the counts the last EngineStepped covered

    async def fetch(self) -> None:
        """Read the blocks the new sequences' prefixes could take from disk (on the device
        thread: file reads and their checks stay off the event loop)."""
        wanted = self._scheduler.disk_wanted(self._disk.has)
        if wanted:
            self._scheduler.kv.staged.add(await self._device.run_sync(self._disk.read, wanted))

    async def save_all(self, runner: Runner) -> int:
        """Every cached block to disk, forgotten in memory (a sleep frees the cache; a stop
        ends it); returns how many there were."""
        kv = self._scheduler.kv
        num_blocks = kv.forget_prefixes(in_use=True, save=True)
        await self._device.run_sync(runner.step, StepPlan(chunks=(), moves=kv.take_moves()))
        await trio.to_thread.run_sync(self._disk.flush)
        return num_blocks

    async def close(self, runner: Runner) -> None:
        """Save every cached block and stop the tier's writer (shielded: a stop runs it)."""
        with trio.CancelScope(shield=True), trio.move_on_after(SAVE_TIMEOUT_S):
            await self.save_all(runner)
            await trio.to_thread.run_sync(self._disk.close)

    async def clear(self) -> None:
        """New weights: no block on disk holds any more."""
        await trio.to_thread.run_sync(self._disk.clear)

    def step_counts(self) -> dict[str, int]:
        """What the tier read and wrote since the last call, for EngineStepped."""
        now = TierCounts(**asdict(self._disk.counts))
        told, self._told = self._told, now
        return {
            "kv_disk_bytes_read": now.bytes_read - told.bytes_read,
            "kv_disk_bytes_written": now.bytes_written - told.bytes_written,
            "kv_disk_failures": (now.corrupt_blocks + now.failed_writes)
            - (told.corrupt_blocks + told.failed_writes),
        }
