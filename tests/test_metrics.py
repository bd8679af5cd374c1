from __future__ import annotations

from atom.events import (
    ChoiceFinished,
    Endpoint,
    Envelope,
    Event,
    FinishReason,
    RequestAccepted,
    RequestCompleted,
    RequestReceived,
    RequestReleased,
    RequestScheduled,
    SamplingParams,
    TokensSampled,
)
from atom.metrics import Metrics


def feed(metrics: Metrics, timed: list[tuple[float, Event]]) -> None:
    for seq, (at, event) in enumerate(timed):
        metrics.apply(Envelope(seq=seq, at=at, event=event))


def test_gauges_counters_and_histograms_follow_the_events() -> None:
    m = Metrics()
    p = SamplingParams()
    feed(m, [
        (0.0, RequestReceived(request_id="a", endpoint=Endpoint.CHAT, model="m", created=0)),
        (0.0, RequestAccepted(request_id="a", prompt_ids=(1, 2, 3), params=p, num_choices=1)),
    ])  # fmt: skip
    assert (m.num_waiting, m.num_running, m.prompt_tokens) == (1, 0, 3)
    feed(m, [
        (0.1, RequestScheduled(request_id="a", num_running=1)),
        (0.3, TokensSampled(request_id="a", choice_idx=0, token_ids=(5,))),
        (0.35, TokensSampled(request_id="a", choice_idx=0, token_ids=(6,),
                             finish_reason=FinishReason.LENGTH)),
    ])  # fmt: skip
    assert (m.num_waiting, m.num_running, m.generation_tokens) == (0, 1, 2)
    assert m.ttft.num == 1 and abs(m.ttft.total - 0.3) < 1e-9
    assert m.itl.num == 1 and abs(m.itl.total - 0.05) < 1e-9
    feed(m, [
        (0.4, RequestReleased(request_id="a", was_scheduled=True)),
        (0.4, ChoiceFinished(request_id="a", choice_idx=0, finish_reason=FinishReason.LENGTH,
                             num_tokens=2)),
        (0.5, RequestCompleted(request_id="a", prompt_tokens=3, completion_tokens=2, ttft_s=0.3,
                               tpot_s=0.05, latency_s=0.5)),
    ])  # fmt: skip
    assert m.num_running == 0 and m.e2e.num == 1 and m.success["length"] == 1
    text = m.render("m")
    assert 'atom:num_requests_running{model_name="m"} 0' in text
    assert 'atom:request_success_total{model_name="m",finished_reason="length"} 1' in text
    assert 'atom:time_to_first_token_seconds_bucket{model_name="m",le="0.5"} 1' in text
    assert 'atom:time_to_first_token_seconds_bucket{model_name="m",le="0.25"} 0' in text
    assert 'atom:e2e_request_latency_seconds_count{model_name="m"} 1' in text


def test_a_request_dropped_before_scheduling_leaves_waiting() -> None:
    m = Metrics()
    feed(m, [
        (0.0, RequestAccepted(request_id="a", prompt_ids=(1,), params=SamplingParams(),
                              num_choices=1)),
        (0.1, RequestReleased(request_id="a", was_scheduled=False)),
    ])  # fmt: skip
    assert (m.num_waiting, m.num_running) == (0, 0)
