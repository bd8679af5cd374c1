"""The JSON schemas of ATOM's answers, for /openapi.json (atom/http/openapi.py).

The bodies themselves are rendered by the wire projections (atom/wire*.py), not by
pydantic, so their shapes are written here; the fuzz test
(tests/http/test_openapi_fuzz.py) checks every answer against them.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
OPTIONAL_STRING: Schema = {"type": ["string", "null"]}


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    """An object with these required properties (more are allowed)."""
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


def const(value: object) -> Schema:
    return {"const": value}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


ERROR = obj(
    {
        "error": obj(
            {"message": STRING, "type": STRING},
            {"param": OPTIONAL_STRING, "code": {"type": ["string", "integer", "null"]}},
        )
    }
)
ANTHROPIC_ERROR = obj({"type": const("error"), "error": obj({"type": STRING, "message": STRING})})

_USAGE = obj({"prompt_tokens": INTEGER, "completion_tokens": INTEGER, "total_tokens": INTEGER})
_CHAT_MESSAGE = obj(
    {"role": const("assistant")},
    {"content": OPTIONAL_STRING, "reasoning_content": OPTIONAL_STRING, "tool_calls": array(
        obj({"id": STRING, "type": const("function"), "function": obj(
            {"name": STRING, "arguments": STRING})})
    )},
)  # fmt: skip
_FINISH = {"type": ["string", "null"]}
_GENERATED = {"id": STRING, "created": INTEGER, "model": STRING, "usage": _USAGE}

CHAT_COMPLETION = obj(
    {
        **_GENERATED,
        "object": const("chat.completion"),
        "choices": array(
            obj({"index": INTEGER, "message": _CHAT_MESSAGE, "finish_reason": _FINISH})
        ),
    }
)
COMPLETION = obj(
    {
        **_GENERATED,
        "object": const("text_completion"),
        "choices": array(obj({"index": INTEGER, "text": STRING, "finish_reason": _FINISH})),
    }
)
RESPONSE = obj(
    {
        "id": STRING,
        "object": const("response"),
        "created_at": INTEGER,
        "status": {"enum": ["queued", "in_progress", "completed", "incomplete", "failed",
                            "cancelled"]},
        "model": STRING,
        "output": array(obj({"type": STRING})),
    }
)  # fmt: skip
ANTHROPIC_MESSAGE = obj(
    {
        "id": STRING,
        "type": const("message"),
        "role": const("assistant"),
        "model": STRING,
        "content": array(obj({"type": STRING})),
        "stop_reason": OPTIONAL_STRING,
        "usage": obj({"input_tokens": INTEGER, "output_tokens": INTEGER}),
    }
)
OLLAMA_ERROR = obj({"error": STRING})
_OLLAMA_MESSAGE = obj(
    {"role": const("assistant"), "content": STRING},
    {"thinking": STRING, "tool_calls": array(obj({"function": obj({})}))},
)
OLLAMA_CHAT = obj(
    {"model": STRING, "created_at": STRING, "message": _OLLAMA_MESSAGE, "done": BOOLEAN},
    {"done_reason": STRING, "total_duration": INTEGER, "load_duration": INTEGER,
     "prompt_eval_count": INTEGER, "prompt_eval_duration": INTEGER, "eval_count": INTEGER,
     "eval_duration": INTEGER},
)  # fmt: skip
OLLAMA_GENERATE = obj(
    {"model": STRING, "created_at": STRING, "response": STRING, "done": BOOLEAN},
    {"thinking": STRING, "done_reason": STRING, "total_duration": INTEGER,
     "load_duration": INTEGER, "prompt_eval_count": INTEGER, "prompt_eval_duration": INTEGER,
     "eval_count": INTEGER, "eval_duration": INTEGER},
)  # fmt: skip
OLLAMA_EMBED = obj(
    {"model": STRING, "embeddings": array(array(NUMBER))}, {"prompt_eval_count": INTEGER}
)
OLLAMA_EMBEDDINGS = obj({"embedding": array(NUMBER)})
OLLAMA_SHOW = obj(
    {"modified_at": STRING, "model_info": obj({}), "capabilities": array(STRING)},
    {"template": STRING},
)
OLLAMA_PS = obj(
    {"models": array(obj({"name": STRING, "model": STRING, "context_length": INTEGER}))}
)
OLLAMA_TAGS = obj({"models": array(obj({"name": STRING, "model": STRING, "modified_at": STRING}))})
_POOLED = {
    "id": STRING,
    "object": const("list"),
    "created": INTEGER,
    "model": STRING,
    "usage": obj({"prompt_tokens": INTEGER, "total_tokens": INTEGER}),
}
_VECTOR = {"oneOf": [array(NUMBER), STRING]}  # floats, or base64 with encoding_format
EMBEDDINGS = obj(
    {**_POOLED, "data": array(obj({"index": INTEGER, "object": STRING, "embedding": _VECTOR}))}
)
POOLING = obj(
    {**_POOLED, "data": array(obj({"index": INTEGER, "object": STRING, "data": _VECTOR}))}
)
SCORE = obj({**_POOLED, "data": array(obj({"index": INTEGER, "object": const("score"),
                                           "score": NUMBER}))})  # fmt: skip
CLASSIFY = obj({**_POOLED, "data": array(obj({"index": INTEGER, "label": STRING,
                                              "probs": array(NUMBER)}))})  # fmt: skip
RERANK = obj(
    {
        "id": STRING,
        "model": STRING,
        "usage": obj({"total_tokens": INTEGER}),
        "results": array(obj({"index": INTEGER, "relevance_score": NUMBER})),
    }
)
MODELS = obj(
    {
        "object": const("list"),
        "data": array(obj({"id": STRING, "object": const("model"), "owned_by": STRING})),
    }
)
HEALTH = obj({"status": const("ok")}, {"model": OPTIONAL_STRING, "models": array(STRING)})
STATUS = obj({"status": STRING})
TOKENIZED = obj({"tokens": array(INTEGER), "count": INTEGER, "max_model_len": INTEGER})
DETOKENIZED = obj({"prompt": STRING})
COUNTED = obj({"input_tokens": INTEGER})
VERSION = obj({"version": STRING})
SERVER_INFO = obj({"version": STRING, "settings": {"type": "object"}, "models": array(obj({}))})
_RENDERED = obj(
    {"request_id": STRING, "prompt": STRING, "token_ids": array(INTEGER),
     "sampling_params": {"type": "object"}}
)  # fmt: skip
RENDERED_CHAT = _RENDERED
RENDERED_PROMPTS = array(_RENDERED)
MODEL_CHANGED = obj({"id": STRING, "object": const("model"), "status": STRING, "kind": STRING})
WEIGHTS_UPDATED = obj({"success": BOOLEAN, "message": STRING, "num_paused_requests": INTEGER})
SLEEPING = obj({"is_sleeping": BOOLEAN}, {"level": INTEGER})
_NUMBERS = {"type": "object", "additionalProperties": NUMBER}
ENGINE_FEED = obj({"at": NUMBER, "request_log": BOOLEAN, "models": {
    "type": "object", "additionalProperties": _NUMBERS}})  # fmt: skip
_RECENT = {"id": STRING, "model": STRING, "endpoint": STRING, "state": STRING,
           "received_at": NUMBER, "num_events": INTEGER}  # fmt: skip
RECENT_REQUESTS = obj({"request_log": BOOLEAN, "data": array(obj(_RECENT))})
RECENT_REQUEST = obj({**_RECENT, "num_dropped": INTEGER, "events": array(obj({})),
                      "response": obj({"status": {"type": ["integer", "null"]},
                                       "body": STRING})})  # fmt: skip
INPUT_ITEMS = obj(
    {"object": const("list"), "data": array(obj({"id": STRING})), "has_more": BOOLEAN}
)
DELETED = obj({"id": STRING, "object": const("response"), "deleted": const(True)})
FILE = obj({"id": STRING, "object": const("file"), "bytes": INTEGER, "created_at": INTEGER,
            "filename": STRING, "purpose": STRING})  # fmt: skip
FILES = obj({"object": const("list"), "data": array(FILE)})
FILE_DELETED = obj({"id": STRING, "object": const("file"), "deleted": const(True)})
BATCH = obj(
    {"id": STRING, "object": const("batch"), "endpoint": STRING, "input_file_id": STRING,
     "status": STRING, "created_at": INTEGER,
     "request_counts": obj({"total": INTEGER, "completed": INTEGER, "failed": INTEGER})},
    {"output_file_id": OPTIONAL_STRING, "error_file_id": OPTIONAL_STRING},
)  # fmt: skip
BATCHES = obj({"object": const("list"), "data": array(BATCH)})
UPLOAD = obj({"file": {"type": "string", "format": "binary"}, "purpose": const("batch")})
TRANSCRIPTION_FORM = obj(
    {"file": {"type": "string", "format": "binary"}},
    {"model": STRING, "language": STRING, "prompt": STRING,
     "response_format": {"enum": ["json", "text", "srt", "vtt", "verbose_json"]},
     "temperature": {"type": "number", "minimum": 0, "maximum": 1}, "stream": BOOLEAN,
     "timestamp_granularities[]": array({"enum": ["segment", "word"]}), "seed": INTEGER},
)  # fmt: skip
_SEGMENT = obj({"id": INTEGER, "seek": INTEGER, "start": NUMBER, "end": NUMBER, "text": STRING,
                "tokens": array(INTEGER), "temperature": NUMBER, "avg_logprob": NUMBER,
                "compression_ratio": NUMBER})  # fmt: skip
# json and verbose_json (text, srt and vtt are plain text)
TRANSCRIPTION = obj(
    {"text": STRING},
    {"usage": obj({"type": const("duration"), "seconds": INTEGER}), "task": STRING,
     "language": STRING, "duration": NUMBER, "segments": array(_SEGMENT),
     "words": array(obj({"word": STRING, "start": NUMBER, "end": NUMBER}))},
)  # fmt: skip


def sse_event(data: Schema) -> Schema:
    """One server-sent event: its `data` is JSON matching `data` (or an error body), or the
    `[DONE]` that ends OpenAI's streams."""
    json_data = {"contentMediaType": "application/json", "contentSchema": {"anyOf": [data, ERROR]}}
    return {
        "type": "object",
        "required": ["data"],
        "properties": {"data": STRING, "event": STRING},
        "if": {"properties": {"data": const("[DONE]")}},
        "else": {"properties": {"data": json_data}},
    }


_CHUNKED = {"id": STRING, "created": INTEGER, "model": STRING, "choices": array(obj({}))}
CHAT_CHUNK = sse_event(obj({**_CHUNKED, "object": const("chat.completion.chunk")}))
COMPLETION_CHUNK = sse_event(obj({**_CHUNKED, "object": const("text_completion")}))
RESPONSE_EVENT = sse_event(obj({"type": STRING, "sequence_number": INTEGER}))
ANTHROPIC_EVENT = sse_event(obj({"type": STRING}))
TRANSCRIPT_EVENT = sse_event(
    obj({"type": {"enum": ["transcript.text.delta", "transcript.text.done"]}})
)
