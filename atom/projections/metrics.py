"""Prometheus metrics as a projection of the event stream (vLLM's names, `atom:` prefix)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from atom.projections.histogram import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, Histogram
from atom.projections.usage import RequestUsage
from atom.vocabulary.events import (
    ChoiceFinished,
    DraftsVerified,
    EngineIdle,
    EngineStepped,
    Envelope,
    Event,
    LoraLoaded,
    LoraUnloaded,
    PoolingFinished,
    PoolingRequested,
    RequestAborted,
    RequestAccepted,
    RequestCompleted,
    RequestEvent,
    RequestFailed,
    RequestReceived,
    RequestReleased,
    RequestScheduled,
    TokensSampled,
    TranscriptionFinished,
    TranscriptionRequested,
)

# Requests no Batcher runs (pooling, transcriptions): their first event, and their end.
WHOLE_ENDS = (PoolingFinished, TranscriptionFinished)
WHOLE_EVENTS = (PoolingRequested, TranscriptionRequested, *WHOLE_ENDS)


class ModelMetrics:
    """One model's fold of its requests' and its engine's events."""

    def __init__(self) -> None:
        self.num_running = 0
        self.num_waiting = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.success = Counter[str]()
        self.kv_cache_usage = 0.0
        self.num_preemptions = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.prefix_cache_disk_hits = 0
        self.kv_disk_bytes_read = 0
        self.kv_disk_bytes_written = 0
        self.kv_disk_failures = 0
        self.num_drafts = 0  # steps that verified drafts, one a choice
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = Counter[int]()  # draft position → times accepted
        self.lora_running = Counter[str]()  # LoRA adapter → its requests in the batch
        self.lora_waiting = Counter[str]()  # LoRA adapter → its requests queued
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self._requests: dict[str, RequestUsage] = {}  # until the request ends
        # a running request of no Batcher's (pooling, transcription): its arrival time
        self._pooling: dict[str, float] = {}

    def apply(self, envelope: Envelope, lora: str | None = None) -> None:
        """Fold one event; `lora`: the adapter the request's event is of."""
        event = envelope.event
        if type(event) is TokensSampled:  # the hot one (a sequence a step): straight there
            self.on_tokens(envelope, event)
            return
        if lora is not None:
            self._count_lora(event, lora)
        if isinstance(event, EngineStepped):
            self._on_step(event)
        elif isinstance(event, EngineIdle):
            self.kv_cache_usage = event.kv_cache_usage
        elif isinstance(event, WHOLE_EVENTS) or (
            isinstance(event, RequestEvent) and event.request_id in self._pooling
        ):
            self._on_pooling_event(envelope, event)
        elif isinstance(event, RequestEvent):
            self._on_request_event(envelope, event)

    def _on_step(self, event: EngineStepped) -> None:
        self.kv_cache_usage = event.kv_cache_usage
        self.num_preemptions += event.num_preemptions
        self.prefix_cache_queries += event.prefix_cache_queries
        self.prefix_cache_hits += event.prefix_cache_hits
        self.prefix_cache_disk_hits += event.prefix_cache_disk_hits
        self.kv_disk_bytes_read += event.kv_disk_bytes_read
        self.kv_disk_bytes_written += event.kv_disk_bytes_written
        self.kv_disk_failures += event.kv_disk_failures

    def _on_pooling_event(self, envelope: Envelope, event: Event) -> None:
        """A pooling request or a transcription runs from its arrival to its outputs
        (or error)."""
        if isinstance(event, PoolingRequested | TranscriptionRequested):
            self._pooling[event.request_id] = envelope.at
            self.num_running += 1
            if isinstance(event, PoolingRequested):
                self.prompt_tokens += event.num_prompt_tokens
            return
        assert isinstance(event, RequestEvent)
        arrived = self._pooling.pop(event.request_id, None)
        if arrived is None:
            return
        self.num_running -= 1
        if isinstance(event, PoolingFinished | TranscriptionFinished):
            self.success["stop"] += 1
            self.e2e.observe(envelope.at - arrived)

    def on_tokens(self, envelope: Envelope, event: TokensSampled) -> None:
        """A step's tokens of one sequence: counted, and its latencies observed."""
        self._observe(envelope, event.request_id)
        self.generation_tokens += len(event.token_ids)
        if event.drafts is not None:
            self._on_drafts(event.drafts)

    def _observe(self, envelope: Envelope, request_id: str) -> RequestUsage | None:
        """The latencies the event reveals of its request (its first token, a gap); the
        request's usage fold, while it runs."""
        usage = self._requests.get(request_id)
        if usage is not None:
            latencies = usage.apply(envelope)
            if latencies.ttft_s is not None:
                self.ttft.observe(latencies.ttft_s)
            if latencies.inter_token_s is not None:
                self.itl.observe(latencies.inter_token_s)
        return usage

    def _on_request_event(self, envelope: Envelope, event: RequestEvent) -> None:
        rid = event.request_id
        usage = self._observe(envelope, rid)
        if isinstance(event, RequestReceived):
            self._requests[rid] = RequestUsage(envelope)
        elif isinstance(event, RequestAccepted):
            self.num_waiting += 1
            self.prompt_tokens += sum(map(len, event.prompts))
        elif isinstance(event, RequestScheduled):
            self.num_waiting -= 1
            self.num_running += 1
        elif isinstance(event, ChoiceFinished):
            self.success[event.finish_reason.value] += 1
        elif isinstance(event, RequestReleased) and event.was_scheduled:
            self.num_running -= 1
        elif isinstance(event, RequestReleased):
            self.num_waiting -= 1
        elif isinstance(event, RequestCompleted) and usage is not None:
            self.e2e.observe(envelope.at - usage.received_at)
        if isinstance(event, RequestCompleted | RequestFailed | RequestAborted):
            self._requests.pop(rid, None)

    def _count_lora(self, event: Event, lora: str) -> None:
        """vLLM's lora_requests_info: which adapters have requests waiting and running."""
        if isinstance(event, RequestAccepted):
            self.lora_waiting[lora] += 1
        elif isinstance(event, RequestScheduled):
            self.lora_waiting[lora] -= 1
            self.lora_running[lora] += 1
        elif isinstance(event, RequestReleased):
            (self.lora_running if event.was_scheduled else self.lora_waiting)[lora] -= 1

    def _on_drafts(self, drafts: DraftsVerified) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += drafts.num_draft_tokens
        self.num_accepted_tokens += drafts.num_accepted_tokens
        self.accepted_per_pos.update(range(drafts.num_accepted_tokens))

    def snapshot(self) -> dict[str, float]:
        """The gauges and counters now, for the web page's engine view (which turns the
        counters into rates between two snapshots)."""
        values = {family: value(self) for family, _, value in _FAMILIES}
        values["time_to_first_token_seconds_sum"] = self.ttft.total
        values["time_to_first_token_seconds_count"] = self.ttft.num
        return values

    def histogram(self, family: str) -> Histogram:
        return {
            "time_to_first_token_seconds": self.ttft,
            "inter_token_latency_seconds": self.itl,
            "e2e_request_latency_seconds": self.e2e,
        }[family]


# What the metrics fold reads (Engine subscribes it to these only): never a token's
# text, reasoning or tool-call events.
METRIC_EVENTS: tuple[type[Event], ...] = (
    EngineStepped, EngineIdle, LoraLoaded, LoraUnloaded, *WHOLE_EVENTS, RequestReceived,
    RequestAccepted, RequestScheduled, TokensSampled, ChoiceFinished, RequestReleased,
    RequestCompleted, RequestFailed, RequestAborted,
)  # fmt: skip


class Metrics:
    """Folds envelopes (a bus subscriber) into one ModelMetrics per served model: a
    request's events go to the model its RequestReceived (or PoolingRequested) named,
    an engine's to the model its events carry. `render` gives the Prometheus text."""

    def __init__(self) -> None:
        self.models: dict[str, ModelMetrics] = {}
        self._routes: dict[str, _Route] = {}  # by request id, while its events may come
        self._bases: dict[str, str] = {}  # a served LoRA adapter → its base model

    @classmethod
    def on(cls, subscribe: Callable[..., None], kinds: tuple[type, ...]) -> Metrics:
        """A Metrics fed by `subscribe` (the bus's) with the events of `kinds`."""
        metrics = cls()
        subscribe(metrics.apply, kinds)
        return metrics

    def model(self, name: str) -> ModelMetrics:
        found = self.models.get(name)  # (not setdefault: it would build a fold every event)
        return found if found is not None else self.models.setdefault(name, ModelMetrics())

    def apply(self, envelope: Envelope) -> None:
        event = envelope.event
        if type(event) is TokensSampled:  # the hot one: no adapter or end to note
            route = self._routes.get(event.request_id)
            if route is not None:
                self.model(route.model).on_tokens(envelope, event)
            return
        if isinstance(event, EngineStepped | EngineIdle):
            self.model(event.model).apply(envelope)
            return
        if isinstance(event, LoraLoaded | LoraUnloaded):
            self._bases.pop(event.lora, None)
            if isinstance(event, LoraLoaded):
                self._bases[event.lora] = event.model
            return
        if not isinstance(event, RequestEvent):
            return
        if isinstance(event, RequestReceived | PoolingRequested | TranscriptionRequested):
            # A request to an adapter counts for its base model (as vLLM's model_name).
            base = self._bases.get(event.model)
            lora = None if base is None else event.model
            self._routes[event.request_id] = _Route(base or event.model, lora=lora)
        route = self._routes.get(event.request_id)
        if route is None:
            return
        self.model(route.model).apply(envelope, route.lora)
        if route.follow(event):
            del self._routes[event.request_id]

    def render(
        self,
        names: list[str],
        *,
        request_log_failures: int | None = None,
        max_loras: int | None = None,
        now: float = 0.0,
    ) -> str:
        """Every metric family once, a sample per model (`model_name`, as vLLM labels);
        with `max_loras` (--enable-lora), vLLM's lora_requests_info at time `now`."""
        folds = [(f'model_name="{label_value(name)}"', self.model(name)) for name in names]
        lines: list[str] = []
        for family, kind, value in _FAMILIES:
            lines.extend(_head(family, kind))
            lines.extend(f"atom:{family}{{{labels}}} {value(m)}" for labels, m in folds)
        lines.extend(_head("request_success_total", "counter"))
        for labels, m in folds:
            for reason in ("stop", "length", *sorted(set(m.success) - {"stop", "length"})):
                lines.append(
                    f'atom:request_success_total{{{labels},finished_reason="{reason}"}} '
                    f"{m.success[reason]}"
                )
        for family in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                       "e2e_request_latency_seconds"):  # fmt: skip
            lines.extend(_head(family, "histogram"))
            for labels, m in folds:
                lines.extend(m.histogram(family).lines(f"atom:{family}", labels))
        lines.extend(_head("spec_decode_num_accepted_tokens_per_pos_total", "counter"))
        for labels, m in folds:
            for pos in sorted(m.accepted_per_pos):
                lines.append(
                    f"atom:spec_decode_num_accepted_tokens_per_pos_total"
                    f'{{{labels},position="{pos}"}} {m.accepted_per_pos[pos]}'
                )
        if max_loras is not None:
            lines.extend(_lora_info(folds, max_loras, now))
        if request_log_failures is not None:
            lines.extend(_head("request_log_failures_total", "counter"))
            lines.append(f"atom:request_log_failures_total {request_log_failures}")
        return "\n".join(lines) + "\n"


@dataclass(slots=True)
class _Route:
    """Where a request's events go, until its last one: the request's own end (completed,
    failed, aborted, pooled) and, once a Batcher accepted it, the Batcher's release —
    in either order."""

    model: str
    lora: str | None = None  # the adapter the request named
    is_accepted: bool = False
    is_released: bool = False
    has_ended: bool = False

    def follow(self, event: Event) -> bool:
        """Note `event`; True when no event of the request can follow it."""
        if isinstance(event, RequestAccepted):
            self.is_accepted = True
        elif isinstance(event, RequestReleased):
            self.is_released = True
        elif isinstance(event, (RequestCompleted, RequestFailed, RequestAborted, *WHOLE_ENDS)):
            self.has_ended = True
        return self.has_ended and (self.is_released or not self.is_accepted)


_FAMILIES: tuple[tuple[str, str, Callable[[ModelMetrics], float]], ...] = (
    ("num_requests_running", "gauge", lambda m: m.num_running),
    ("num_requests_waiting", "gauge", lambda m: m.num_waiting),
    ("prompt_tokens_total", "counter", lambda m: m.prompt_tokens),
    ("generation_tokens_total", "counter", lambda m: m.generation_tokens),
    ("kv_cache_usage_perc", "gauge", lambda m: m.kv_cache_usage),
    ("num_preemptions_total", "counter", lambda m: m.num_preemptions),
    ("prefix_cache_queries_total", "counter", lambda m: m.prefix_cache_queries),
    ("prefix_cache_hits_total", "counter", lambda m: m.prefix_cache_hits),
    ("prefix_cache_disk_hits_total", "counter", lambda m: m.prefix_cache_disk_hits),
    ("kv_disk_bytes_read_total", "counter", lambda m: m.kv_disk_bytes_read),
    ("kv_disk_bytes_written_total", "counter", lambda m: m.kv_disk_bytes_written),
    ("kv_disk_failures_total", "counter", lambda m: m.kv_disk_failures),
    ("spec_decode_num_drafts_total", "counter", lambda m: m.num_drafts),
    ("spec_decode_num_draft_tokens_total", "counter", lambda m: m.num_draft_tokens),
    ("spec_decode_num_accepted_tokens_total", "counter", lambda m: m.num_accepted_tokens),
)


_HELP = {
    "num_requests_running": "Requests whose sequences are in the running batch.",
    "num_requests_waiting": "Requests accepted and waiting in the queue.",
    "prompt_tokens_total": "Prompt tokens of accepted requests.",
    "generation_tokens_total": "Tokens generated.",
    "kv_cache_usage_perc": "Fraction of KV-cache blocks in use (1 means full).",
    "num_preemptions_total": "Sequences preempted to free KV-cache blocks.",
    "prefix_cache_queries_total": "Prompt tokens looked up in the prefix cache.",
    "prefix_cache_hits_total": "Prompt tokens found in the prefix cache (memory or disk).",
    "prefix_cache_disk_hits_total": "Prompt tokens read from the prefix cache's disk tier.",
    "kv_disk_bytes_read_total": "Bytes of KV blocks read from the disk tier.",
    "kv_disk_bytes_written_total": "Bytes of KV blocks written to the disk tier.",
    "kv_disk_failures_total": "Disk-tier block files that failed their check, and failed writes.",
    "spec_decode_num_drafts_total": "Speculative steps: a choice's drafts verified once.",
    "spec_decode_num_draft_tokens_total": "Draft tokens proposed.",
    "spec_decode_num_accepted_tokens_total": "Draft tokens the model accepted.",
    "spec_decode_num_accepted_tokens_per_pos_total": "Draft tokens accepted, by position "
    "in the draft (0 is the first).",
    "request_success_total": "Choices finished, by finish reason.",
    "time_to_first_token_seconds": "Seconds from receiving a request to its first token.",
    "inter_token_latency_seconds": "Seconds between consecutive tokens of a choice.",
    "e2e_request_latency_seconds": "Seconds from receiving a request to its last byte.",
    "lora_requests_info": "LoRA adapters with running and waiting requests (labels).",
    "request_log_failures_total": "Request-log records that could not be written.",
}


def _lora_info(folds: list[tuple[str, ModelMetrics]], max_loras: int, now: float) -> list[str]:
    """vLLM's gauge: the adapters with running and waiting requests, in labels; the
    value is when it was read (Unix seconds)."""
    lines = _head("lora_requests_info", "gauge")
    for labels, m in folds:
        running = label_value(",".join(sorted(a for a, n in m.lora_running.items() if n > 0)))
        waiting = label_value(",".join(sorted(a for a, n in m.lora_waiting.items() if n > 0)))
        lines.append(
            f'atom:lora_requests_info{{{labels},max_lora="{max_loras}",'
            f'running_lora_adapters="{running}",waiting_lora_adapters="{waiting}"}} {now!r}'
        )
    return lines


def label_value(text: str) -> str:
    """`text` as a label value of Prometheus's text format: a backslash, a double quote
    and a line feed escaped, so no name can end its label or start a series."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _head(name: str, kind: str) -> list[str]:
    return [f"# HELP atom:{name} {_HELP[name]}", f"# TYPE atom:{name} {kind}"]
