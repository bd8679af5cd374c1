"""The bus gives a subscriber every event, or only the kinds it names; a subscriber added
later gets the events published after it."""

from __future__ import annotations

from atom.actors.bus import EventBus
from atom.vocabulary.events import ClientDisconnected, Envelope, RequestEvent, TextDelta


def test_a_subscriber_gets_only_the_kinds_it_names() -> None:
    bus = EventBus(clock=lambda: 0.0)
    everything: list[Envelope] = []
    texts: list[Envelope] = []
    bus.subscribe(everything.append)
    bus.subscribe(texts.append, (TextDelta,))
    delta = TextDelta(request_id="r", choice_idx=0, text="a")
    bus.publish(delta)
    bus.publish(ClientDisconnected(request_id="r"))
    assert [e.event for e in everything] == [delta, ClientDisconnected(request_id="r")]
    assert [e.event for e in texts] == [delta]
    base: list[Envelope] = []
    bus.subscribe(base.append, (RequestEvent,))  # a base class names its subclasses
    bus.publish(delta)
    assert [e.seq for e in base] == [2] and len(everything) == 3 and len(texts) == 2
