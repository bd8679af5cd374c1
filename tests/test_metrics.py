from __future__ import annotations

from atom.projections.metrics import Metrics
from atom.vocabulary.audio_events import (
    AudioRef,
    TranscriptionFinished,
    TranscriptionPlan,
    TranscriptionRequested,
)
from atom.vocabulary.events import (
    ChoiceFinished,
    Endpoint,
    EngineStepped,
    Envelope,
    Event,
    FinishReason,
    LoraLoaded,
    LoraUnloaded,
    PoolingFinished,
    PoolingInput,
    PoolingRequested,
    RequestAborted,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    RequestReleased,
    RequestScheduled,
    SamplingParams,
    TokensSampled,
)
from atom.vocabulary.plan import PoolingPlan


def feed(metrics: Metrics, timed: list[tuple[float, Event]]) -> None:
    for seq, (at, event) in enumerate(timed):
        metrics.apply(Envelope(seq=seq, at=at, event=event))


def test_gauges_counters_and_histograms_follow_the_events() -> None:
    metrics = Metrics()
    m = metrics.model("m")
    p = SamplingParams()
    feed(metrics, [
        (0.0, RequestReceived(request_id="a", endpoint=Endpoint.CHAT, model="m", created=0)),
        (0.0, RequestAccepted(request_id="a", prompt_ids=(1, 2, 3), params=p, num_choices=1)),
    ])  # fmt: skip
    assert (m.num_waiting, m.num_running, m.prompt_tokens) == (1, 0, 3)
    feed(metrics, [
        (0.1, RequestScheduled(request_id="a", num_running=1)),
        (0.3, TokensSampled(request_id="a", choice_idx=0, token_ids=(5,))),
        (0.35, TokensSampled(request_id="a", choice_idx=0, token_ids=(6,),
                             finish_reason=FinishReason.LENGTH)),
    ])  # fmt: skip
    assert (m.num_waiting, m.num_running, m.generation_tokens) == (0, 1, 2)
    assert m.ttft.num == 1 and abs(m.ttft.total - 0.3) < 1e-9
    assert m.itl.num == 1 and abs(m.itl.total - 0.05) < 1e-9
    feed(metrics, [
        (0.4, RequestReleased(request_id="a", was_scheduled=True)),
        (0.4, ChoiceFinished(request_id="a", choice_idx=0, finish_reason=FinishReason.LENGTH,
                             num_tokens=2)),
        (0.5, RequestCompleted(request_id="a", prompt_tokens=3, completion_tokens=2, ttft_s=0.3,
                               tpot_s=0.05, latency_s=0.5)),
    ])  # fmt: skip
    assert m.num_running == 0 and m.e2e.num == 1 and m.success["length"] == 1
    text = metrics.render(["m"])
    assert 'atom:num_requests_running{model_name="m"} 0' in text
    assert 'atom:request_success_total{model_name="m",finished_reason="length"} 1' in text
    assert 'atom:time_to_first_token_seconds_bucket{model_name="m",le="0.5"} 1' in text
    assert 'atom:time_to_first_token_seconds_bucket{model_name="m",le="0.25"} 0' in text
    assert 'atom:e2e_request_latency_seconds_count{model_name="m"} 1' in text


def test_a_request_dropped_before_scheduling_leaves_waiting() -> None:
    metrics = Metrics()
    m = metrics.model("m")
    feed(metrics, [
        (0.0, RequestReceived(request_id="a", endpoint=Endpoint.CHAT, model="m", created=0)),
        (0.0, RequestAccepted(request_id="a", prompt_ids=(1,), params=SamplingParams(),
                              num_choices=1)),
        (0.1, RequestReleased(request_id="a", was_scheduled=False)),
    ])  # fmt: skip
    assert (m.num_waiting, m.num_running) == (0, 0)


def test_each_model_has_its_samples_under_one_header_per_family() -> None:
    metrics = Metrics()
    plan = PoolingPlan(endpoint=Endpoint.EMBEDDINGS)
    inputs = (PoolingInput(token_ids=(1, 2)), PoolingInput(token_ids=(3,)))
    feed(metrics, [
        (0.0, RequestReceived(request_id="g", endpoint=Endpoint.CHAT, model="chat", created=0)),
        (0.0, RequestAccepted(request_id="g", prompt_ids=(1, 2, 3, 4), num_choices=1)),
        (0.0, PoolingRequested(request_id="e", endpoint=Endpoint.EMBEDDINGS, model="emb",
                               created=0, inputs=inputs, plan=plan)),
        (0.1, RequestScheduled(request_id="g", num_running=1)),
        (0.1, EngineStepped(model="chat", num_tokens=4, num_seqs=1, kv_cache_usage=0.5,
                            num_preemptions=0, prefix_cache_queries=4, prefix_cache_hits=0)),
        (0.2, RequestAborted(request_id="g", reason="client_disconnected")),
        (0.3, PoolingFinished(request_id="e", outputs=("", ""))),
        (0.4, RequestReleased(request_id="g", was_scheduled=True)),  # after the abort
    ])  # fmt: skip
    chat, emb = metrics.model("chat"), metrics.model("emb")
    assert (chat.num_running, chat.prompt_tokens, chat.kv_cache_usage) == (0, 4, 0.5)
    assert (emb.num_running, emb.prompt_tokens, emb.success["stop"], emb.e2e.num) == (0, 3, 1, 1)
    text = metrics.render(["chat", "emb"], request_log_failures=0)
    assert text.count("# TYPE atom:prompt_tokens_total counter") == 1
    assert 'atom:prompt_tokens_total{model_name="chat"} 4' in text
    assert 'atom:prompt_tokens_total{model_name="emb"} 3' in text
    assert 'atom:e2e_request_latency_seconds_count{model_name="emb"} 1' in text
    assert "atom:request_log_failures_total 0" in text


def test_an_adapters_requests_count_for_its_base_and_show_in_lora_requests_info() -> None:
    metrics = Metrics()
    received = [
        RequestReceived(request_id=rid, endpoint=Endpoint.CHAT, model=model, created=0)
        for rid, model in (("a", "sql"), ("b", "chat-lora"), ("c", "m"))
    ]
    feed(metrics, [
        (0.0, LoraLoaded(model="m", lora="sql", path="/a/sql", rank=8)),
        (0.0, LoraLoaded(model="m", lora="chat-lora", path="/a/chat", rank=4)),
        *((0.0, event) for event in received),
        *((0.0, RequestAccepted(request_id=rid, prompt_ids=(1,), num_choices=1)) for rid in "abc"),
        (0.1, RequestScheduled(request_id="a", num_running=1)),
        (0.1, RequestScheduled(request_id="c", num_running=2)),
    ])  # fmt: skip
    m = metrics.model("m")
    assert (m.num_running, m.num_waiting) == (2, 1)  # every request counts for the base
    text = metrics.render(["m"], max_loras=2, now=5.0)
    assert (
        'atom:lora_requests_info{model_name="m",max_lora="2",running_lora_adapters="sql",'
        'waiting_lora_adapters="chat-lora"} 5.0'
    ) in text
    feed(metrics, [
        (0.2, RequestReleased(request_id="a", was_scheduled=True)),
        (0.2, RequestReleased(request_id="b", was_scheduled=False)),
        (0.3, LoraUnloaded(model="m", lora="sql")),
    ])  # fmt: skip
    assert 'running_lora_adapters="",waiting_lora_adapters=""' in metrics.render(["m"], max_loras=2)
    assert "lora_requests_info" not in metrics.render(["m"])  # --enable-lora off


def test_a_transcription_runs_from_its_request_to_its_end() -> None:
    """Transcriptions count under their speech model: running while their windows
    decode, a success and an end-to-end latency when they finish; a failed one frees
    its place and counts no success."""
    metrics = Metrics()
    plan = TranscriptionPlan(endpoint=Endpoint.TRANSCRIPTIONS)
    audio = AudioRef(sha256="0" * 64, num_bytes=1)

    def asked(rid: str) -> TranscriptionRequested:
        return TranscriptionRequested(
            request_id=rid, endpoint=plan.endpoint, model="w", created=0, audio=audio, plan=plan
        )

    feed(metrics, [
        (0.0, asked("a")),
        (0.5, asked("b")),
    ])  # fmt: skip
    assert metrics.model("w").num_running == 2
    feed(metrics, [
        (2.5, TranscriptionFinished(request_id="a", seconds=9.0, language="english",
                                    latency_s=2.5)),
        (3.0, RequestFailed(request_id="b", status=400, message="m", error_type="t")),
    ])  # fmt: skip
    speech = metrics.model("w")
    assert (speech.num_running, speech.success["stop"], speech.e2e.num) == (0, 1, 1)
    assert 'atom:e2e_request_latency_seconds_count{model_name="w"} 1' in metrics.render(
        ["w"], request_log_failures=0
    )
