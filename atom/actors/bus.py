"""EventBus: stamps every published event with a sequence number and the time, and fans it out.

Subscribers are synchronous and must not block: the metrics projection folds
the envelope in place, the RequestLogger queues it for its own task.
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
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def publish(self, event: Event) -> Envelope:
        """Stamp and deliver `event`; returns the envelope (its `at` is the event's time)."""
        envelope = Envelope(seq=next(self._seq), at=self._clock(), event=event)
        for subscriber in self._subscribers:
            subscriber(envelope)
        return envelope
