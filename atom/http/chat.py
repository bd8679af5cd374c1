"""/v1/chat/completions: the validated body → the request's plan and its one prompt.

The template gets the messages, the tools and the template kwargs; the choices' text
plan gets the tool-call and reasoning parsers (`--tool-call-parser`,
`--reasoning-parser`); tool_choice "required" or a named function is enforced by a
grammar over the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atom.actors.cores import EngineCore
from atom.http.adapter import (
    Planned,
    check_shape,
    planned,
    reasoning_budget,
    reasoning_end_ids,
    reasoning_opened,
)
from atom.http.images import ImageSource, image_prompt
from atom.http.media import MediaPolicy
from atom.http.prompts import check_prompt_size, truncated
from atom.http.sampling import Asked, sampling_params
from atom.http.schemas import ChatCompletionRequest, ChatMessage, NamedToolChoice
from atom.http.structured import constraint_of
from atom.text import constraints
from atom.text.parsers import SPECIAL_TOKEN_PARSERS
from atom.text.prompt import TemplateControls, render_chat
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.images import PromptImage
from atom.vocabulary.plan import (
    Endpoint,
    RequestPlan,
    ResponseShape,
    SamplingParams,
    TextPlan,
    ToolPlan,
)

ID_PREFIX = "chatcmpl-"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tools:
    """The request's tools as the template sees them and as the choices parse them."""

    for_template: list[dict[str, Any]] | None
    template_kwargs: dict[str, Any]
    plan: ToolPlan | None
    grammar: str | None = None  # enforces tool_choice "required" or a named function


def plan(settings: Settings, core: EngineCore, body: ChatCompletionRequest) -> Planned:
    """Raises AtomError (a 4xx naming the field) for anything the body cannot mean."""
    if body.truncate_prompt_tokens is None:
        num_chars = sum(len(m.as_template_message()["content"]) for m in body.messages)
        check_prompt_size(num_chars, core.max_prompt_chars, param="messages")
    shape = ResponseShape(
        endpoint=Endpoint.CHAT,
        stream=body.stream,
        include_usage=body.stream_options is not None and body.stream_options.include_usage,
        n=body.n,
        best_of=body.n,
        logprobs=body.logprobs,
        return_token_ids=body.return_token_ids,
    )
    check_shape(settings, shape, body)
    check_controls(settings, body)
    tools = _tools(settings, body)
    prompt, images = _render(settings, core, body, tools)
    constraint = tools.grammar or constraint_of(body)
    if body.top_logprobs and not body.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs set to true", param="top_logprobs")
    asked = Asked(
        longest_prompt=len(prompt.ids),
        prompt_field="messages",
        max_tokens=body.max_completion_tokens or body.max_tokens,
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        prompt_logprobs=body.prompt_logprobs,
    )
    starts_open = reasoning_opened(
        core.tokenizer, settings.reasoning_parser, tools.template_kwargs, prompt.ids
    )
    params = _params(settings, core, body, asked, tools, constraint, starts_open)
    text = _text_plan(settings, body, tools, starts_open)
    request_plan = RequestPlan(shape=shape, text=text, params=params)
    return planned(settings, body, request_plan, (prompt.ids,), images=images)


def _params(
    settings: Settings,
    core: EngineCore,
    body: ChatCompletionRequest,
    asked: Asked,
    tools: _Tools,
    constraint: str | None,
    starts_open: bool,
) -> SamplingParams:
    """The sampling settings, with what the reasoning parser adds: a constraint starts
    after the reasoning, and a thinking budget forces its end."""
    tokenizer, kwargs, parser = core.tokenizer, tools.template_kwargs, settings.reasoning_parser
    after = reasoning_end_ids(tokenizer, parser, kwargs) if constraint else ()
    limit = (
        settings.reasoning_budget
        if body.thinking_token_budget is None
        else body.thinking_token_budget
    )
    budget = reasoning_budget(tokenizer, parser, limit, kwargs, starts_open)
    tool_parser = tools.plan.parser if tools.plan else None
    return sampling_params(
        tokenizer,
        core.max_model_len,
        body,
        asked,
        grammar=constraint,
        grammar_after=after,
        reasoning_budget=budget,
        keep_special_tokens=bool({parser, tool_parser} & SPECIAL_TOKEN_PARSERS),
    )


def _text_plan(
    settings: Settings, body: ChatCompletionRequest, tools: _Tools, starts_open: bool
) -> TextPlan:
    """What the choices' text pipelines run: parsers, template kwargs, reporting."""
    return TextPlan(
        tools=tools.plan,
        reasoning_parser=settings.reasoning_parser,
        template_kwargs=tools.template_kwargs,
        reasoning_starts_open=starts_open,
        report_prompt_logprobs=body.prompt_logprobs is not None,
        include_reasoning=body.include_reasoning,
        tokens_as_ids=body.return_tokens_as_token_ids,
    )


def prompt_ids(
    settings: Settings, core: EngineCore, body: ChatCompletionRequest
) -> tuple[int, ...]:
    """The prompt the template renders for this body, tools included (count_tokens)."""
    prompt, _ = _render(settings, core, body, _tools(settings, body))
    ids: tuple[int, ...] = prompt.ids
    return ids


def _render(
    settings: Settings, core: EngineCore, body: ChatCompletionRequest, tools: _Tools
) -> Any:
    """The prompt (truncated as asked) and its images."""
    ids, images = conversation_prompt(
        settings,
        core,
        body.messages,
        tools=tools.for_template,
        template_kwargs=tools.template_kwargs,
        controls=_controls(body),
    )
    if images and body.truncate_prompt_tokens is not None:
        raise InvalidRequest(
            "truncate_prompt_tokens cannot cut a prompt that holds images",
            param="truncate_prompt_tokens",
        )
    return truncated(core.tokenizer, body.truncate_prompt_tokens, ids, None), images


def conversation_prompt(
    settings: Settings,
    core: EngineCore,
    messages: list[ChatMessage],
    *,
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any],
    controls: TemplateControls,
) -> tuple[tuple[int, ...], tuple[PromptImage, ...]]:
    """Chat messages rendered by the template (a vision model's processor template, its
    images read and expanded: atom/http/images.py); 400s name the field."""
    sources = [
        ImageSource(url=url, param=f"messages.{m_idx}.content.{p_idx}", kind=kind)
        for m_idx, message in enumerate(messages)
        for p_idx, url, kind in message.media_urls()
    ]
    vision = core.images is not None
    rendered = [m.as_template_message(parts=vision) for m in messages]
    if vision or sources:
        return image_prompt(
            core,
            MediaPolicy.of(settings),
            rendered,
            sources,
            tools=tools,
            template_kwargs=template_kwargs,
            controls=controls,
        )
    try:
        ids = render_chat(
            core.tokenizer,
            rendered,
            tools=tools,
            template_kwargs=template_kwargs,
            controls=controls,
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="messages") from None
    return ids, ()


def check_controls(settings: Settings, body: ChatCompletionRequest) -> None:
    """The template controls a request may set: 400s naming the field."""
    if body.chat_template is not None and not settings.trust_request_chat_template:
        raise InvalidRequest(
            "chat_template in a request needs --trust-request-chat-template", param="chat_template"
        )
    if body.continue_final_message and body.add_generation_prompt:
        raise InvalidRequest(
            "continue_final_message needs add_generation_prompt false",
            param="continue_final_message",
        )
    if body.continue_final_message and body.messages[-1].role != "assistant":
        raise InvalidRequest(
            "continue_final_message needs the last message to be the assistant's",
            param="continue_final_message",
        )


def _controls(body: ChatCompletionRequest) -> TemplateControls:
    return TemplateControls(
        add_generation_prompt=body.add_generation_prompt,
        continue_final_message=body.continue_final_message,
        chat_template=body.chat_template,
        documents=None if body.documents is None else tuple(body.documents),
    )


def _tools(settings: Settings, body: ChatCompletionRequest) -> _Tools:
    choice = body.tool_choice
    tools = [t.model_dump(exclude_none=True, by_alias=True) for t in body.tools or []]
    effort = {"reasoning_effort": body.reasoning_effort} if body.reasoning_effort else {}
    kwargs = {**settings.chat_template_kwargs, **effort, **(body.chat_template_kwargs or {})}
    if choice is not None and choice not in ("none", "auto"):
        return _forced(body, tools, kwargs)
    if choice == "none" or not tools:
        exclude = not tools or settings.exclude_tools_when_tool_choice_none
        return _Tools(for_template=None if exclude else tools, template_kwargs=kwargs, plan=None)
    tool_plan = ToolPlan(
        parser=settings.tool_call_parser,
        schemas=_schemas(tools),
        max_calls=None if body.parallel_tool_calls else 1,
    )
    return _Tools(for_template=tools, template_kwargs=kwargs, plan=tool_plan)


def _forced(
    body: ChatCompletionRequest, tools: list[dict[str, Any]], kwargs: dict[str, Any]
) -> _Tools:
    """tool_choice "required" or a named function, enforced by a grammar over the output."""
    if not tools:
        raise InvalidRequest("tool_choice needs tools", param="tool_choice")
    if body.response_format is not None or body.structured_outputs is not None:
        raise InvalidRequest(
            "tool_choice required/named cannot be combined with another structured-output "
            "constraint",
            param="tool_choice",
        )
    choice = body.tool_choice
    schemas = _schemas(tools)
    max_calls = None if body.parallel_tool_calls else 1
    try:
        if choice == "required":
            constraint = constraints.tool_call_list(tools, max_calls=max_calls)
            tool_plan = ToolPlan(schemas=schemas, max_calls=max_calls, required=True)
        else:
            assert isinstance(choice, NamedToolChoice)
            name = choice.function.name
            constraint = constraints.tool_arguments(_parameters(tools, name))
            tool_plan = ToolPlan(schemas=schemas, named=name)
    except constraints.GrammarError as exc:
        raise InvalidRequest(f"tools: {exc}", param="tools") from None
    return _Tools(for_template=tools, template_kwargs=kwargs, plan=tool_plan, grammar=constraint)


def _schemas(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Function name → its parameters schema ({} when the tool gives none)."""
    return {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}


def _parameters(tools: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The parameters schema of the function `tool_choice` names."""
    for tool in tools:
        if tool["function"]["name"] == name:
            parameters: dict[str, Any] | None = tool["function"].get("parameters")
            return parameters
    raise InvalidRequest(f"tool_choice names {name!r}, which is not in tools", param="tool_choice")
