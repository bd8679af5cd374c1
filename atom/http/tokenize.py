"""Token counting routes: vLLM-style /tokenize and /detokenize, and Anthropic's
/v1/messages/count_tokens."""

from __future__ import annotations

from quart import Response
from quart_trio import QuartTrio

from atom.actors.cores import EngineCore
from atom.actors.engine import Engine
from atom.http import messages
from atom.http.anthropic_schemas import CountTokensRequest
from atom.http.body import request_json
from atom.http.chat import conversation_prompt
from atom.http.errors import parse
from atom.http.fetch import plan_off_loop
from atom.http.prompts import check_prompt_size
from atom.http.schemas import DetokenizeRequest, TokenizeRequest
from atom.projections.wire import dumps
from atom.text.prompt import TemplateControls, encode_text
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest


def register(app: QuartTrio, engine: Engine) -> None:
    @app.post("/tokenize")
    async def tokenize() -> Response:
        body = parse(TokenizeRequest, await request_json())
        core = engine.generation(body.model, "/tokenize")
        # Templates and tokenizers run off the event loop, as for generation.
        ids = await plan_off_loop(engine.settings, _token_ids, engine.settings, core, body)
        result = {"tokens": list(ids), "count": len(ids), "max_model_len": core.max_model_len}
        return Response(dumps(result), content_type="application/json")

    @app.post("/v1/messages/count_tokens")
    async def count_tokens() -> Response:
        body = parse(CountTokensRequest, await request_json())
        core = engine.generation(body.model, "/v1/messages/count_tokens")
        ids = await plan_off_loop(engine.settings, messages.prompt_ids, engine.settings, core, body)
        return Response(dumps({"input_tokens": len(ids)}), content_type="application/json")

    @app.post("/detokenize")
    async def detokenize() -> Response:
        body = parse(DetokenizeRequest, await request_json())
        core = engine.generation(body.model, "/detokenize")
        vocab = len(core.tokenizer)
        if any(t < 0 or t >= vocab for t in body.tokens):
            raise InvalidRequest(f"token ids must be in [0, {vocab})", param="tokens")
        text = core.tokenizer.decode(body.tokens)
        return Response(dumps({"prompt": text}), content_type="application/json")


def _token_ids(settings: Settings, core: EngineCore, body: TokenizeRequest) -> tuple[int, ...]:
    """The prompt's ids, or the messages' as /v1/chat/completions renders them (with the
    request's tools and template kwargs over `--default-chat-template-kwargs`)."""
    if body.messages is not None:
        num_chars = sum(len(m.as_template_message()["content"]) for m in body.messages)
        check_prompt_size(num_chars, core.max_prompt_chars, param="messages")
        tools = [t.model_dump(exclude_none=True, by_alias=True) for t in body.tools or []]
        kwargs = {**settings.chat_template_kwargs, **(body.chat_template_kwargs or {})}
        ids, _ = conversation_prompt(
            settings,
            core,
            body.messages,
            tools=tools or None,
            template_kwargs=kwargs,
            controls=TemplateControls(),
        )
        return ids
    if body.prompt is not None:
        check_prompt_size(len(body.prompt), core.max_prompt_chars, param="prompt")
        return encode_text(core.tokenizer, body.prompt, add_special_tokens=body.add_special_tokens)
    raise InvalidRequest("give either `prompt` or `messages`", param="prompt")
