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
        text = tokenizer.apply_chat_template(
            list(messages),
            tools=list(tools) if tools else None,
            documents=list(controls.documents) if controls.documents else None,
            chat_template=controls.chat_template,
            add_generation_prompt=controls.add_generation_prompt,
            continue_final_message=controls.continue_final_message,
            tokenize=False,
            **(template_kwargs or {}),
        )
    except Exception as exc:  # jinja raises its own TemplateError types
        raise ValueError(f"the chat template rejected the messages: {exc}") from exc
    # (as apply_chat_template tokenizes it: the template writes the special tokens)
    return encode_text(tokenizer, text, add_special_tokens=False)


def encode_text(tokenizer: Any, text: str, *, add_special_tokens: bool = True) -> tuple[int, ...]:
    """`tokenizer.encode(text)`, straight from the Rust tokenizer where that gives the
    same ids: transformers' wrapper costs several times the encoding of a short text."""
    backend = _plain_backend(tokenizer)
    if backend is not None and backend.truncation is None and backend.padding is None:
        return tuple(backend.encode(text, add_special_tokens=add_special_tokens).ids)
    return tuple(int(i) for i in tokenizer.encode(text, add_special_tokens=add_special_tokens))


def _plain_backend(tokenizer: Any) -> Any:
    """The Rust tokenizer of a transformers fast tokenizer whose encoding adds nothing to
    the backend's (no Python override, special tokens kept whole); else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "split_special_tokens", False):
        return None
    if backend.encode_special_tokens or not _encodes_plainly(type(tokenizer)):
        return None
    return backend


def _encodes_plainly(cls: type) -> bool:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    return (
        getattr(cls, "_encode_plus", None) is TokenizersBackend._encode_plus
        and getattr(cls, "encode", None) is PreTrainedTokenizerBase.encode
    )


def max_token_chars(tokenizer: Any) -> int:
    """The most characters of text one token can stand for: its longest vocabulary entry.

    A byte-level token's string has one character per byte it covers, a SentencePiece
    token's one per character (byte-fallback pieces cover one byte), so a text of C
    characters is at least C / max_token_chars tokens, a bound that needs no tokenizing."""
    return max(len(token) for token in tokenizer.get_vocab())
