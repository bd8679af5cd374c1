"""Request prompts to token ids: chat messages through the template, or the completions
forms (a string, token ids, a list of strings, a list of token-id lists)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atom.errors import InvalidRequest
from atom.http.chat_setup import ChatSetup
from atom.http.schemas import ChatCompletionRequest, _SamplingBody
from atom.text.prompt import encode_text, render_chat


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    ids: tuple[int, ...]
    text: str  # what `echo` shows: the client's string, or the ids decoded


def render_prompts(
    tokenizer: Any, body: _SamplingBody, chat: ChatSetup | None = None
) -> list[Prompt]:
    """One Prompt per prompt of the request (chat: exactly one). Raises InvalidRequest."""
    if isinstance(body, ChatCompletionRequest):
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
