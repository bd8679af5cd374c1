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
        self._is_poked = False  # the request side asked to wake (a keep-alive is due)
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

    def poke(self) -> None:
        """Request side: wake the waiting `receive_batch` with nothing (a keep-alive is
        due), from another task of the request."""
        self._is_poked = True
        self._arrived.set()

    def abandon(self) -> None:
        """Request side: stop producing for this request (it was aborted)."""
        self.is_abandoned = True

    async def receive_batch(self) -> list[Envelope]:
        """Everything pending, waiting for at least one item or a poke; [] once closed
        and drained, or for a poke (`is_closed` tells them apart)."""
        while not self._items and not self.is_closed and not self._is_poked:
            await self._arrived.wait()
            self._arrived = trio.Event()
        items, self._items, self._is_poked = self._items, [], False
        if not items and self._error is not None:
            raise self._error
        return items

    def take_nowait(self) -> list[Envelope]:
        """Whatever is pending now, maybe nothing (a closing or a poke is left for
        `receive_batch`)."""
        items, self._items = self._items, []
        return items
