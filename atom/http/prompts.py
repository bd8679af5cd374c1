"""Request prompts to token ids: chat messages through the template, or the completions
forms (a string, token ids, a list of strings, a list of token-id lists)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atom.errors import ContextTooLong, InvalidRequest
from atom.http.chat_setup import ChatSetup
from atom.http.schemas import ChatCompletionRequest, ChatMessage, TokenizeRequest, _SamplingBody
from atom.text.prompt import encode_text, render_chat


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    ids: tuple[int, ...]
    text: str  # what `echo` shows: the client's string, or the ids decoded


def check_prompt_size(body: _SamplingBody | TokenizeRequest, max_chars: int) -> None:
    """Refuse, before any tokenizing, a prompt whose text alone must exceed the context:
    `max_chars` is the context length times the most characters one token covers.
    With truncate_prompt_tokens a long prompt is legal (the body limit bounds it)."""
    if getattr(body, "truncate_prompt_tokens", None) is not None:
        return
    messages: list[ChatMessage] | None = getattr(body, "messages", None)
    if messages is not None:
        param = "messages"
        num_chars = sum(len(m.as_template_message()["content"]) for m in messages)
    else:
        raw = getattr(body, "prompt", None) or ""
        texts = [raw] if isinstance(raw, str) else [x for x in raw if isinstance(x, str)]
        param, num_chars = "prompt", max(map(len, texts), default=0)
    if num_chars > max_chars:
        raise ContextTooLong(
            f"the prompt has {num_chars} characters, more than this model's context can hold "
            f"({max_chars} characters at most); it was refused without tokenizing",
            param=param,
        )


def render_prompts(
    tokenizer: Any, body: _SamplingBody, chat: ChatSetup | None = None
) -> list[Prompt]:
    """One Prompt per prompt of the request (chat: exactly one). Raises InvalidRequest."""
    if isinstance(body, ChatCompletionRequest):
        _refuse_images(body)
        messages = [m.as_template_message() for m in body.messages]
        try:
            ids = render_chat(
                tokenizer,
                messages,
                tools=chat.template_tools if chat else None,
                template_kwargs=chat.template_kwargs if chat else None,
            )
        except ValueError as exc:
            raise InvalidRequest(str(exc), param="messages") from None
        return [_truncated(tokenizer, body, ids, None)]
    raw = body.prompt  # type: ignore[attr-defined]
    if isinstance(raw, str) or (raw and all(isinstance(x, int) for x in raw)):
        raw = [raw]
    if not raw:
        raise InvalidRequest("prompt must not be empty", param="prompt")
    prompts = []
    for item in raw:
        if isinstance(item, str):
            ids = encode_text(tokenizer, item)
            prompts.append(_truncated(tokenizer, body, ids, item))
        else:
            prompts.append(_truncated(tokenizer, body, _checked_ids(tokenizer, item), None))
    return prompts


def _refuse_images(body: ChatCompletionRequest) -> None:
    for m_idx, message in enumerate(body.messages):
        part_idx = message.image_part_idx()
        if part_idx is not None:
            param = f"messages.{m_idx}.content.{part_idx}"
            raise InvalidRequest(
                f"{param}: this model takes text only; image_url parts need a vision model",
                param=param,
            )


def _truncated(
    tokenizer: Any, body: _SamplingBody, ids: tuple[int, ...], text: str | None
) -> Prompt:
    if body.truncate_prompt_tokens is not None and len(ids) > body.truncate_prompt_tokens:
        ids, text = ids[-body.truncate_prompt_tokens :], None
    if not ids:
        raise InvalidRequest("the prompt has no tokens", param="prompt")
    return Prompt(ids=ids, text=text if text is not None else tokenizer.decode(list(ids)))


def _checked_ids(tokenizer: Any, ids: list[int]) -> tuple[int, ...]:
    vocab = len(tokenizer)
    if any(i < 0 or i >= vocab for i in ids):
        raise InvalidRequest(f"prompt token ids must be in [0, {vocab})", param="prompt")
    return tuple(ids)
