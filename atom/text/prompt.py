"""Prompt rendering: chat messages through the model's chat template, or plain text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

IMAGE_PART = {"type": "image"}  # an image's place in a template message's content list
VIDEO_PART = {"type": "video"}  # and a video's
AUDIO_PART = {"type": "audio"}  # and an audio clip's


@dataclass(frozen=True, slots=True, kw_only=True)
class TemplateControls:
    """How a request asks its conversation to be rendered (vLLM's chat fields)."""

    add_generation_prompt: bool = True
    continue_final_message: bool = False  # the last (assistant) message is continued
    chat_template: str | None = None  # the request's own Jinja template
    documents: tuple[dict[str, Any], ...] | None = None  # for templates that cite them


def render_chat(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
    controls: TemplateControls = TemplateControls(),
) -> tuple[int, ...]:
    """Token ids of `messages` rendered by the chat template (the request's own, if
    `controls` has one), with the generation prompt unless `controls` say otherwise;
    `tools`, `documents` and `template_kwargs` (e.g. enable_thinking) are passed to it.

    Raises ValueError when the template rejects the conversation.
    """
    if not (controls.chat_template or getattr(tokenizer, "chat_template", None)):
        raise ValueError("this model has no chat template; use /v1/completions")
    try:
        ids = tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            documents=list(controls.documents) if controls.documents else None,
            chat_template=controls.chat_template,
            add_generation_prompt=controls.add_generation_prompt,
            continue_final_message=controls.continue_final_message,
            tokenize=True,
            return_dict=False,
            **(template_kwargs or {}),
        )
    except Exception as exc:  # jinja raises its own TemplateError types
        raise ValueError(f"the chat template rejected the messages: {exc}") from exc
    return tuple(int(i) for i in ids)


def encode_text(tokenizer: Any, text: str, *, add_special_tokens: bool = True) -> tuple[int, ...]:
    return tuple(int(i) for i in tokenizer.encode(text, add_special_tokens=add_special_tokens))


def max_token_chars(tokenizer: Any) -> int:
    """The most characters of text one token can stand for: its longest vocabulary entry.

    A byte-level token's string has one character per byte it covers, a SentencePiece
    token's one per character (byte-fallback pieces cover one byte), so a text of C
    characters is at least C / max_token_chars tokens, a bound that needs no tokenizing."""
    return max(len(token) for token in tokenizer.get_vocab())
