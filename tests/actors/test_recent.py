"""RecentRequests: the web page's request view keeps the last requests, bounded."""

from __future__ import annotations

from atom.actors.recent import RecentRequests
from atom.vocabulary.events import (
    Envelope,
    Event,
    RequestAborted,
    RequestCompleted,
    RequestReceived,
    TextDelta,
)
from atom.vocabulary.plan import Endpoint


def feed(recent: RecentRequests, *events: Event) -> None:
    for seq, event in enumerate(events):
        recent.keep(Envelope(seq=seq, at=float(seq), event=event))


def received(rid: str) -> RequestReceived:
    return RequestReceived(request_id=rid, endpoint=Endpoint.CHAT, model="m", created=0)


def delta(rid: str, text: str = "x") -> TextDelta:
    return TextDelta(request_id=rid, choice_idx=0, text=text)


def test_requests_are_kept_newest_first_with_their_state() -> None:
    recent = RecentRequests()
    done = RequestCompleted(request_id="a", prompt_tokens=1, completion_tokens=1, ttft_s=0.1,
                            tpot_s=0.1, latency_s=0.2)  # fmt: skip
    aborted = RequestAborted(request_id="b", reason="client_disconnected")
    feed(recent, received("a"), received("b"), delta("a"), done, delta("z"), aborted)
    listed = recent.newest_first()
    assert [(rid, r.state, r.endpoint, r.model) for rid, r in listed] == [
        ("b", "aborted", "chat.completions", "m"),
        ("a", "completed", "chat.completions", "m"),
    ]
    a = recent.get("a")
    assert a is not None and [type(e.event) for e in a.envelopes] == [
        RequestReceived,
        TextDelta,
        RequestCompleted,
    ]
    assert recent.get("z") is None  # an event of a request never received is not kept


def test_the_oldest_request_goes_and_a_long_one_keeps_its_first_events() -> None:
    recent = RecentRequests(max_requests=2, max_events=3)
    feed(recent, received("a"), received("b"), received("c"))
    assert [rid for rid, _ in recent.newest_first()] == ["c", "b"]
    feed(recent, *(delta("c", str(i)) for i in range(5)))
    c = recent.get("c")
    assert c is not None and c.num_dropped == 3
    assert [getattr(e.event, "text", None) for e in c.envelopes] == [None, "0", "1"]
