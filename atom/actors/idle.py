"""IdleWatch: wait until an actor has nothing to do, without polling."""

from __future__ import annotations

from collections.abc import Callable

import trio


class IdleWatch:
    """The actor calls `changed()` wherever its work may have ended (after a step, when it
    comes to rest); `wait()` returns once `is_idle()` holds at one of those moments."""

    def __init__(self, is_idle: Callable[[], bool]) -> None:
        self._is_idle = is_idle
        self._waiting = trio.lowlevel.ParkingLot()

    def changed(self) -> None:
        self._waiting.unpark_all()

    async def wait(self) -> None:
        while not self._is_idle():
            await self._waiting.park()
