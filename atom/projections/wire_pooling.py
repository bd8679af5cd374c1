"""The pooling endpoints' JSON bodies: OpenAI's shape for /v1/embeddings, vLLM's for
/pooling, /classify and /v1/score, Jina's and Cohere's for rerank, Ollama's for
/api/embed and /api/embeddings.

A pure projection of a request's `PoolingRequested` (its plan) and `PoolingFinished`
(the model's raw output per input), fed the same events live and in `atom replay`.
"""

from __future__ import annotations

import base64
import math
from array import array
from typing import Any

from atom.projections.wire import Output, dumps, error_output
from atom.projections.wire_ollama import error_body as ollama_error_body
from atom.vocabulary.events import Event, PoolingFinished, PoolingRequested, RequestFailed
from atom.vocabulary.plan import Activation, Endpoint, PoolingPlan

OLLAMA = frozenset({Endpoint.OLLAMA_EMBED, Endpoint.OLLAMA_EMBEDDINGS})  # Ollama's errors


class PoolingRenderer:
    """The one body of a pooling response, once its outputs (or its error) are known."""

    def __init__(self, received: PoolingRequested) -> None:
        self.received = received
        self.has_started = False

    def feed(self, event: Event) -> Output | None:
        if isinstance(event, RequestFailed):
            if self.received.plan.endpoint in OLLAMA:
                body = dumps(ollama_error_body(event.message))
                return Output(
                    body=body, status=event.status, is_final=True, retry_after_s=event.retry_after_s
                )
            return error_output(event)
        if isinstance(event, PoolingFinished):
            self.has_started = True
            return Output(body=render(self.received, event), is_final=True)
        return None


def encode_output(values: array[float]) -> str:
    """A model output as the log and PoolingFinished keep it: base64 float32 bytes."""
    return base64.b64encode(values.tobytes()).decode()


def decode_output(text: str) -> array[float]:
    values = array("f")
    values.frombytes(base64.b64decode(text))
    return values


def render(received: PoolingRequested, finished: PoolingFinished) -> bytes:
    plan = received.plan
    outputs = [decode_output(o) for o in finished.outputs]
    num_tokens = received.num_prompt_tokens
    if plan.endpoint is Endpoint.OLLAMA_EMBED:
        embeddings = [_encoded(plan, out) for out in outputs]
        return dumps(
            {"model": received.model, "embeddings": embeddings, "prompt_eval_count": num_tokens}
        )
    if plan.endpoint is Endpoint.OLLAMA_EMBEDDINGS:
        return dumps({"embedding": _encoded(plan, outputs[0])})
    if plan.endpoint is Endpoint.RERANK:
        return dumps(
            {
                "id": received.request_id,
                "model": received.model,
                "usage": {"total_tokens": num_tokens},
                "results": _rerank_results(plan, scores(plan, outputs)),
            }
        )
    return dumps(
        {
            "id": received.request_id,
            "object": "list",
            "created": received.created,
            "model": received.model,
            "data": _data(plan, outputs),
            "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
        }
    )


def _data(plan: PoolingPlan, outputs: list[array[float]]) -> list[dict[str, Any]]:
    if plan.endpoint is Endpoint.SCORE:
        return [
            {"index": i, "object": "score", "score": s} for i, s in enumerate(scores(plan, outputs))
        ]
    if plan.endpoint is Endpoint.CLASSIFY:
        return [_classified(i, plan, out) for i, out in enumerate(outputs)]
    kind = "embedding" if plan.endpoint is Endpoint.EMBEDDINGS else "pooling"
    field = "embedding" if kind == "embedding" else "data"
    return [
        {"index": i, "object": kind, field: _encoded(plan, out)} for i, out in enumerate(outputs)
    ]


def _encoded(plan: PoolingPlan, values: array[float]) -> list[float] | str:
    if plan.dimensions is not None and plan.dimensions < len(values):
        values = _normalized(values[: plan.dimensions])
    if plan.encoding_format == "base64":
        return base64.b64encode(values.tobytes()).decode()
    return values.tolist()


def _normalized(values: array[float]) -> array[float]:
    norm = math.sqrt(math.fsum(v * v for v in values)) or 1.0
    return array("f", (v / norm for v in values))


def _classified(idx: int, plan: PoolingPlan, logits: array[float]) -> dict[str, Any]:
    probs = _softmax(logits)
    best = max(range(len(probs)), key=probs.__getitem__)
    return {"index": idx, "label": plan.labels[best], "probs": probs, "num_classes": len(probs)}


def scores(plan: PoolingPlan, outputs: list[array[float]]) -> list[float]:
    """One score per pair: the cosine of two embeddings, or a cross-encoder's relevance."""
    if plan.comparisons:
        return [_cosine(outputs[i], outputs[j]) for i, j in plan.comparisons]
    if plan.activation is Activation.SIGMOID:
        return [1.0 / (1.0 + math.exp(-out[0])) for out in outputs]
    return [float(out[0]) for out in outputs]


def _cosine(a: array[float], b: array[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))
    return dot / norm if norm else 0.0


def _softmax(logits: array[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = math.fsum(exps)
    return [e / total for e in exps]


def _rerank_results(plan: PoolingPlan, relevance: list[float]) -> list[dict[str, Any]]:
    ranked = sorted(range(len(relevance)), key=lambda i: -relevance[i])
    results = []
    for idx in ranked[: plan.top_n] if plan.top_n else ranked:
        result: dict[str, Any] = {"index": idx, "relevance_score": relevance[idx]}
        if plan.documents:
            result["document"] = {"text": plan.documents[idx]}
        results.append(result)
    return results
