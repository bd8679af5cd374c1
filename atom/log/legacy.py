"""Plans for request logs written before RequestReceived carried one.

Such a log holds the client's body and, in RequestAccepted, the sampling params.
The plan is derived here the way the server of that day read the body, so old logs
keep replaying byte-identical; nothing else in ATOM plans from a logged body
(`atom replay --rerun`, atom/log/rerun.py, re-sends bodies as they were recorded).
"""

from __future__ import annotations

from typing import Any

from atom.vocabulary.events import RequestAccepted, RequestReceived
from atom.vocabulary.plan import (
    Endpoint,
    RequestPlan,
    ResponseShape,
    SamplingParams,
    TextPlan,
    ToolPlan,
)


def plan_of(received: RequestReceived) -> RequestPlan:
    """The request's plan: the one it carries, or one derived from its body."""
    if received.plan is not None:
        return received.plan
    return RequestPlan(shape=_shape(received), text=_text(received.body), params=SamplingParams())


def with_params(
    plan: RequestPlan, received: RequestReceived, accepted: RequestAccepted
) -> RequestPlan:
    """An old log's params are in its RequestAccepted; a new log's plan has them already."""
    if received.plan is not None or accepted.params is None:
        return plan
    return RequestPlan(shape=plan.shape, text=plan.text, params=accepted.params)


def _shape(received: RequestReceived) -> ResponseShape:
    body = received.body
    n = int(body.get("n") or 1)
    logprobs = body.get("logprobs")
    if received.endpoint is Endpoint.CHAT:
        asked, num_prompts = logprobs is True, 1
    else:
        asked = isinstance(logprobs, int) and not isinstance(logprobs, bool)
        num_prompts = _num_prompts(body.get("prompt"))
    return ResponseShape(
        endpoint=received.endpoint,
        stream=bool(body.get("stream")),
        include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
        num_prompts=num_prompts,
        n=n,
        best_of=max(n, int(body.get("best_of") or n)),
        logprobs=asked,
    )


def _num_prompts(prompt: Any) -> int:
    """A string or one list of token ids is one prompt; a list of either is several."""
    if isinstance(prompt, list) and prompt and not all(isinstance(x, int) for x in prompt):
        return len(prompt)
    return 1


def _text(body: dict[str, Any]) -> TextPlan:
    """What replay derived before plans: the tools offered (no forced choice, no echo)."""
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    if not tools or body.get("tool_choice") == "none":
        return TextPlan(template_kwargs=body.get("chat_template_kwargs") or {})
    schemas = {
        t["function"]["name"]: t["function"].get("parameters") or {}
        for t in tools
        if isinstance(t.get("function"), dict)
    }
    max_calls = None if body.get("parallel_tool_calls", True) is not False else 1
    return TextPlan(
        tools=ToolPlan(schemas=schemas, max_calls=max_calls),
        template_kwargs=body.get("chat_template_kwargs") or {},
    )
