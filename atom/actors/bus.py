"""EventBus: stamps every published event with a sequence number and the time, and fans it out.

Subscribers are synchronous and must not block: the metrics projection folds
the envelope in place, the RequestLogger queues it for its own task. A subscriber that
needs only some kinds of event names them, and is not called for the others (a
token's text events reach the log, not the counters).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count

from atom.vocabulary.events import Envelope, Event

Clock = Callable[[], float]
Subscriber = Callable[[Envelope], None]


class EventBus:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._seq = count()
        self._subscribers: list[tuple[Subscriber, tuple[type[Event], ...] | None]] = []
        self._by_type: dict[type[Event], tuple[Subscriber, ...]] = {}  # who gets each kind

    def subscribe(
        self, subscriber: Subscriber, kinds: tuple[type[Event], ...] | None = None
    ) -> None:
        """`subscriber` gets every envelope after this, or only those of `kinds`."""
        self._subscribers.append((subscriber, kinds))
        self._by_type.clear()

    def publish(self, event: Event) -> Envelope:
        """Stamp and deliver `event`; returns the envelope (its `at` is the event's time)."""
        envelope = Envelope(seq=next(self._seq), at=self._clock(), event=event)
        kind = type(event)
        targets = self._by_type.get(kind)
        if targets is None:
            targets = self._by_type[kind] = tuple(
                s for s, kinds in self._subscribers if kinds is None or issubclass(kind, kinds)
            )
        for subscriber in targets:
            subscriber(envelope)
        return envelope
