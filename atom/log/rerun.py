"""Re-run replay: send the generation requests of a request log to a live server again and
compare its answers with the recorded ones (`atom replay LOG --rerun URL`).

The recorded side is a fold of the log's events, each choice's text, reasoning, tool
calls and finish reason; the live side is the same read from a whole-body answer (each
request is re-sent with `stream: false`). Greedy requests must agree exactly; sampled
ones with a seed by shape: finish reasons, tool-call names, and JSON where the request
asked for JSON. Sampled ones without a seed are not comparable beyond the status (the
re-sent body leaves the server to draw another seed). Chat and completions are compared
choice by choice; Messages and Responses requests by status only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import trio

from atom.log.legacy import plan_of
from atom.vocabulary.events import (
    ChoiceFinished,
    Envelope,
    ReasoningDelta,
    RequestAborted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
)
from atom.vocabulary.plan import GENERATION_PATHS, Endpoint

BY_CHOICE = frozenset({Endpoint.CHAT, Endpoint.COMPLETIONS})


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    text: str = ""
    reasoning: str = ""
    calls: tuple[tuple[str, str], ...] = ()  # (name, arguments)
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """One logged generation request and how it ended."""

    request_id: str
    endpoint: Endpoint
    body: dict[str, Any]
    at: float
    status: int
    is_greedy: bool
    is_seeded: bool  # the body (which the rerun re-sends) pins the seed
    wants_json: bool  # structured output: the answer must parse as JSON
    by_choice: bool  # compared choice by choice (else by status)
    choices: tuple[Choice, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    request_id: str
    agreed: bool
    compared: str  # "greedy", "shape", "status" or "unseeded"
    divergence: str | None = None  # where the answers first differ
    comparable: bool = True  # false: sampled without a seed, so no answer can agree


NOT_COMPARABLE = "not comparable (sampled without a seed)"


def recorded_requests(envelopes: Iterable[Envelope]) -> list[Recorded]:
    """Every generation request of the log that ended with an answer (aborted ones and
    those whose start is not in the log are left out), in arrival order."""
    started: dict[str, tuple[RequestReceived, float]] = {}
    choices: dict[str, dict[int, dict[str, Any]]] = {}
    ended: dict[str, int] = {}
    for envelope in envelopes:
        event = envelope.event
        if isinstance(event, RequestReceived) and event.endpoint in GENERATION_PATHS:
            started[event.request_id] = (event, envelope.at)
            choices[event.request_id] = {}
        elif getattr(event, "request_id", None) in started:
            _fold(choices[event.request_id], ended, event)  # type: ignore[attr-defined]
    return [
        _recorded(received, at, ended[rid], choices[rid])
        for rid, (received, at) in started.items()
        if rid in ended
    ]


def _fold(choices: dict[int, dict[str, Any]], ended: dict[str, int], event: Any) -> None:
    if isinstance(event, RequestCompleted):
        ended[event.request_id] = 200
    elif isinstance(event, RequestFailed):
        ended[event.request_id] = event.status
    elif isinstance(event, RequestAborted):
        ended.pop(event.request_id, None)
    idx = getattr(event, "choice_idx", None)
    if idx is None:
        return
    choice = choices.setdefault(idx, {"text": "", "reasoning": "", "calls": []})
    if isinstance(event, TextDelta):
        choice["text"] += event.text
    elif isinstance(event, ReasoningDelta):
        choice["reasoning"] += event.text
    elif isinstance(event, ToolCallStarted):
        choice["calls"].append([event.name, ""])
    elif isinstance(event, ToolArgumentsDelta):
        choice["calls"][event.index][1] += event.text
    elif isinstance(event, ChoiceFinished):
        choice["finish_reason"] = event.finish_reason.value


def _recorded(
    received: RequestReceived, at: float, status: int, choices: dict[int, dict[str, Any]]
) -> Recorded:
    plan = plan_of(received)
    comparable = plan.shape.best_of == plan.shape.n and not plan.text.echo_texts
    return Recorded(
        request_id=received.request_id,
        endpoint=received.endpoint,
        body=received.body,
        at=at,
        status=status,
        is_greedy=plan.params.is_greedy,
        is_seeded=received.body.get("seed") is not None,
        wants_json=_wants_json(received.body),
        by_choice=received.endpoint in BY_CHOICE and comparable,
        choices=tuple(_choice(choices[i]) for i in sorted(choices)),
    )


def _choice(folded: dict[str, Any]) -> Choice:
    calls = tuple((name, arguments) for name, arguments in folded["calls"])
    return Choice(
        text=folded["text"],
        reasoning=folded["reasoning"],
        calls=calls,
        finish_reason=folded.get("finish_reason"),
    )


def _wants_json(body: dict[str, Any]) -> bool:
    response_format = body.get("response_format") or {}
    structured = body.get("structured_outputs") or {}
    return response_format.get("type") in {"json_object", "json_schema"} or bool(
        structured.get("json") or structured.get("json_object")
    )


def answered_choices(endpoint: Endpoint, answer: dict[str, Any]) -> tuple[Choice, ...]:
    """The choices of a whole-body chat or completions answer."""
    choices = sorted(answer.get("choices", []), key=lambda c: c["index"])
    if endpoint is Endpoint.COMPLETIONS:
        return tuple(Choice(text=c["text"], finish_reason=c["finish_reason"]) for c in choices)
    return tuple(_chat_choice(c) for c in choices)


def _chat_choice(choice: dict[str, Any]) -> Choice:
    message = choice["message"]
    calls = tuple(
        (call["function"]["name"], call["function"]["arguments"])
        for call in message.get("tool_calls") or ()
    )
    return Choice(
        text=message.get("content") or "",
        reasoning=message.get("reasoning_content") or "",
        calls=calls,
        finish_reason=choice["finish_reason"],
    )


def compare(recorded: Recorded, status: int, answer: Any) -> Verdict:
    verdict = Verdict(request_id=recorded.request_id, agreed=True, compared="status")
    if status != recorded.status:
        return replace(verdict, agreed=False, divergence=f"status {recorded.status} → {status}")
    if not recorded.by_choice or status != 200:
        return verdict
    live = answered_choices(recorded.endpoint, answer)
    if len(live) != len(recorded.choices):
        count = f"{len(recorded.choices)} → {len(live)} choices"
        return replace(verdict, agreed=False, divergence=count)
    if not (recorded.is_greedy or recorded.is_seeded):
        return replace(
            verdict, agreed=False, comparable=False, compared="unseeded", divergence=NOT_COMPARABLE
        )
    how = "greedy" if recorded.is_greedy else "shape"
    for idx, (was, now) in enumerate(zip(recorded.choices, live, strict=True)):
        divergence = _diverges(was, now, is_greedy=recorded.is_greedy, json=recorded.wants_json)
        if divergence is not None:
            return Verdict(
                request_id=recorded.request_id,
                agreed=False,
                compared=how,
                divergence=f"choice {idx}: {divergence}",
            )
    return replace(verdict, compared=how)


def _diverges(was: Choice, now: Choice, *, is_greedy: bool, json: bool) -> str | None:
    if was.finish_reason != now.finish_reason:
        return f"finish_reason {was.finish_reason} → {now.finish_reason}"
    if [name for name, _ in was.calls] != [name for name, _ in now.calls]:
        return "tool-call names differ"
    if json and now.finish_reason == "stop" and not now.calls and not _is_json(now.text):
        return "the answer is no JSON"  # (one cut by max_tokens cannot be)
    if not is_greedy:
        return None
    for part in ("reasoning", "text"):
        a, b = getattr(was, part), getattr(now, part)
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            return f"{part} differs at character {min(len(a), len(b)) if at is None else at}"
    if was.calls != now.calls:
        return "tool-call arguments differ"
    return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass(slots=True, kw_only=True)
class Rerun:
    """Sends the recorded requests to `url` and compares the answers."""

    url: str
    concurrency: int = 8
    as_recorded: bool = True  # keep the recorded arrival times (else: as fast as possible)
    headers: dict[str, str] = field(default_factory=dict)

    async def run(self, recorded: list[Recorded]) -> list[Verdict]:
        verdicts: dict[str, Verdict] = {}
        limiter = trio.CapacityLimiter(self.concurrency)
        start = trio.current_time()
        first_at = recorded[0].at if recorded else 0.0
        client = httpx.AsyncClient(base_url=self.url, timeout=600)
        async with client, trio.open_nursery() as nursery:
            for item in recorded:
                if self.as_recorded:
                    await trio.sleep_until(start + item.at - first_at)
                await limiter.acquire_on_behalf_of(item.request_id)
                nursery.start_soon(self._one, client, limiter, item, verdicts)
        return [verdicts[item.request_id] for item in recorded]

    async def _one(
        self,
        client: httpx.AsyncClient,
        limiter: trio.CapacityLimiter,
        item: Recorded,
        verdicts: dict[str, Verdict],
    ) -> None:
        try:
            body = {**item.body, "stream": False}
            body.pop("stream_options", None)
            path = GENERATION_PATHS[item.endpoint]
            response = await client.post(path, json=body, headers=self.headers)
            answer = response.json() if response.status_code == 200 else None
            verdicts[item.request_id] = compare(item, response.status_code, answer)
        finally:
            limiter.release_on_behalf_of(item.request_id)


def summarize(verdicts: list[Verdict]) -> dict[str, Any]:
    """How many comparable requests agreed, in all and by how they were compared, and
    how many were not comparable (the agreement share leaves those out)."""
    by: dict[str, list[int]] = {}
    comparable = [v for v in verdicts if v.comparable]
    for verdict in comparable:
        counts = by.setdefault(verdict.compared, [0, 0])
        counts[0] += verdict.agreed
        counts[1] += 1
    num_agreed = sum(v.agreed for v in comparable)
    return {
        "requests": len(verdicts),
        "agreed": num_agreed,
        "not_comparable": len(verdicts) - len(comparable),
        "agreement": num_agreed / len(comparable) if comparable else 1.0,
        "by": {how: {"agreed": a, "requests": n} for how, (a, n) in sorted(by.items())},
    }
