"""`hypercorn -k trio -w 0 bench.host_bare_app:app`: hypercorn alone, for `python -m
bench.host --bare`. Every POST streams the same ~400 SSE chunks of a chat completion
(one token's delta each) and a usage chunk, with no other work: what one process of
hypercorn's trio worker can write, the ceiling of a server that sends a chunk a token.
`HOST_BARE_CHUNKS=2` (`--atom-env`) answers with two chunks: the floor of the bench's
time to first token at a burst, its client's and hypercorn's own cost."""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping
from typing import Any

NUM_CHUNKS = int(os.environ.get("HOST_BARE_CHUNKS", "400"))
CHUNK = (
    b'data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk",'
    b'"created":1765000000,"model":"SmolLM2-135M-Instruct","choices":[{"index":0,'
    b'"delta":{"content":" fox"},"logprobs":null,"finish_reason":null}]}\n\n'
)
LAST = b'data: {"usage":{"completion_tokens":%d}}\n\ndata: [DONE]\n\n' % NUM_CHUNKS
SSE = [(b"content-type", b"text/event-stream")]


async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["method"] == "GET":  # /health, /bench/steps: no steps, no runner
        body = json.dumps({"steps": 0, "step_s": 0.0}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": SSE})
    for _ in range(NUM_CHUNKS):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
    await send({"type": "http.response.body", "body": LAST})
