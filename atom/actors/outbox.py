"""Outbox: the Batcher's per-request mailbox. The Batcher never waits on it; the request
actor takes everything pending at once, so a slow client only makes batches larger."""

from __future__ import annotations

import trio

from atom.vocabulary.errors import AtomError
from atom.vocabulary.events import Envelope


class Outbox:
    def __init__(self) -> None:
        self._items: list[Envelope] = []
        self._arrived = trio.Event()
        self._error: AtomError | None = None
        self.is_closed = False  # the Batcher will put nothing more
        self.is_abandoned = False  # the request actor wants nothing more

    def put_nowait(self, item: Envelope) -> None:
        """Batcher side: never blocks."""
        self._items.append(item)
        self._arrived.set()

    def close(self, error: AtomError | None = None) -> None:
        """Batcher side: the request is released; `error` fails the request instead. The
        first close decides: a later one (a dying actor failing everything again) does
        not change how the request ends."""
        if self.is_closed:
            return
        self.is_closed = True
        self._error = error
        self._arrived.set()

    def abandon(self) -> None:
        """Request side: stop producing for this request (it was aborted)."""
        self.is_abandoned = True

    async def receive_batch(self) -> list[Envelope]:
        """Everything pending, waiting for at least one item; [] once closed and drained."""
        while not self._items and not self.is_closed:
            await self._arrived.wait()
            self._arrived = trio.Event()
        items, self._items = self._items, []
        if not items and self._error is not None:
            raise self._error
        return items
