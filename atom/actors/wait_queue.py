"""WaitQueue: a Batcher's submitted requests that are not admitted yet — bounded (a full
queue refuses, a 429), in arrival order or by priority, each waiting at most
`max_wait_s`. Only its Batcher touches it, on the event loop."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import trio

from atom.actors.batcher_records import Queued
from atom.actors.outbox import Outbox
from atom.vocabulary.errors import Overloaded
from atom.vocabulary.events import Submit


class WaitQueue:
    def __init__(self, max_size: int, max_wait_s: float, *, by_priority: bool) -> None:
        self.max_wait_s = max_wait_s
        self._max_size = max_size
        self._by_priority = by_priority
        self._items: deque[Queued] = deque()  # oldest first

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Queued]:
        return iter(self._items)

    def put(self, submit: Submit, outbox: Outbox) -> None:
        """Queue a request now; Overloaded when the queue is full."""
        if len(self._items) >= self._max_size:
            raise Overloaded("the server is overloaded; retry later")
        self._items.append(Queued(submit, outbox, trio.current_time()))

    def head(self) -> Queued:
        """The request admitted next: the oldest, or the oldest of the lowest priority."""
        if not self._by_priority:
            return self._items[0]
        return min(self._items, key=lambda q: q.submit.priority)  # min keeps the first

    def remove(self, queued: Queued) -> None:
        self._items.remove(queued)  # the first, unless a priority came before it

    def expired(self) -> list[Queued]:
        """Take out the requests that waited longer than `max_wait_s` (the oldest first)."""
        deadline = trio.current_time() - self.max_wait_s
        gone = []
        while self._items and self._items[0].queued_at < deadline:
            gone.append(self._items.popleft())
        return gone

    def take_all(self) -> list[Queued]:
        gone, self._items = list(self._items), deque()
        return gone
