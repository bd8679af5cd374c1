from __future__ import annotations

import pytest

from atom.events import (
    Abort,
    ChoiceFinished,
    ClientDisconnected,
    Endpoint,
    Envelope,
    Event,
    FinishReason,
    RequestAborted,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    RequestReleased,
    RequestScheduled,
    SamplingParams,
    Submit,
    TextDelta,
    TokensSampled,
)
from atom.request_log import decode, encode

PARAMS = SamplingParams(temperature=0.5, top_k=3, stop=("x", "y"), seed=9)
EVENTS: list[Event] = [
    Submit(request_id="r", prompt_ids=(1, 2), params=PARAMS, num_choices=2),
    Abort(request_id="r", choice_idx=1, reason="stop_string"),
    RequestReceived(request_id="r", endpoint=Endpoint.CHAT, model="m", created=5,
                    body={"messages": [{"role": "user", "content": "é🙂"}]}),
    RequestAccepted(request_id="r", prompt_ids=(1, 2, 3), params=PARAMS, num_choices=1),
    RequestScheduled(request_id="r", num_running=3),
    TokensSampled(request_id="r", choice_idx=0, token_ids=(7,), finish_reason=FinishReason.LENGTH),
    TokensSampled(request_id="r", choice_idx=1, token_ids=(8, 9)),
    TextDelta(request_id="r", choice_idx=0, text="hi\n"),
    ChoiceFinished(request_id="r", choice_idx=0, finish_reason=FinishReason.STOP, num_tokens=4),
    RequestCompleted(request_id="r", prompt_tokens=3, completion_tokens=4, ttft_s=0.1,
                     tpot_s=0.02, latency_s=0.3),
    ClientDisconnected(request_id="r"),
    RequestAborted(request_id="r", reason="client_disconnected"),
    RequestFailed(request_id="r", status=429, message="busy", error_type="rate_limit_error",
                  code="server_overloaded"),
    RequestReleased(request_id="r", was_scheduled=True),
]  # fmt: skip


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_every_event_round_trips(event: Event) -> None:
    envelope = Envelope(seq=3, at=1.25, event=event)
    line = encode(envelope)
    assert decode(line) == envelope
    assert '"v":1' in line and f'"type":"{event.type}"' in line


def test_type_tags_are_unique_snake_case() -> None:
    tags = [type(e).type for e in EVENTS]
    assert len(set(tags)) == len({type(e) for e in EVENTS})
    assert all(t == t.lower() and " " not in t for t in tags)


def test_unknown_type_or_version_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        decode('{"v":1,"seq":0,"at":0,"type":"nope","request_id":"r"}')
    with pytest.raises(ValueError, match="version"):
        decode('{"v":99,"seq":0,"at":0,"type":"abort","request_id":"r"}')
