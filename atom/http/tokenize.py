"""vLLM-style /tokenize and /detokenize."""

from __future__ import annotations

import json

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.errors import InvalidRequest
from atom.http.errors import parse
from atom.http.generation import check_model, ready_core
from atom.http.schemas import DetokenizeRequest, TokenizeRequest
from atom.text.prompt import encode_text, render_chat
from atom.wire import dumps


def register(app: QuartTrio, engine: Engine) -> None:
    @app.post("/tokenize")
    async def tokenize() -> Response:
        body = parse(TokenizeRequest, await _json())
        core = ready_core(engine)
        check_model(engine, body.model)
        if body.messages is not None:
            try:
                ids = render_chat(core.tokenizer, [m.as_template_message() for m in body.messages])
            except ValueError as exc:
                raise InvalidRequest(str(exc), param="messages") from None
        elif body.prompt is not None:
            ids = encode_text(
                core.tokenizer, body.prompt, add_special_tokens=body.add_special_tokens
            )
        else:
            raise InvalidRequest("give either `prompt` or `messages`", param="prompt")
        result = {"tokens": list(ids), "count": len(ids), "max_model_len": core.max_model_len}
        return Response(dumps(result), content_type="application/json")

    @app.post("/detokenize")
    async def detokenize() -> Response:
        body = parse(DetokenizeRequest, await _json())
        core = ready_core(engine)
        check_model(engine, body.model)
        vocab = len(core.tokenizer)
        if any(t < 0 or t >= vocab for t in body.tokens):
            raise InvalidRequest(f"token ids must be in [0, {vocab})", param="tokens")
        text = core.tokenizer.decode(body.tokens)
        return Response(dumps({"prompt": text}), content_type="application/json")


async def _json() -> object:
    data = await request.get_data()
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
