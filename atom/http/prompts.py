"""Prompt pieces both endpoints use: the size refusal before tokenizing, truncation
(`truncate_prompt_tokens`) and token-id checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atom.vocabulary.errors import ContextTooLong, InvalidRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    ids: tuple[int, ...]
    text: str  # what `echo` shows: the client's string, or the ids decoded


def check_prompt_size(num_chars: int, max_chars: int, *, param: str) -> None:
    """Refuse, before any tokenizing, a prompt whose text alone must exceed the context:
    `max_chars` is the context length times the most characters one token covers.
    (With truncate_prompt_tokens a long prompt is legal: callers skip this.)"""
    if num_chars > max_chars:
        raise ContextTooLong(
            f"the prompt has {num_chars} characters, more than this model's context can hold "
            f"({max_chars} characters at most); it was refused without tokenizing",
            param=param,
        )


def truncated(
    tokenizer: Any, keep_last: int | None, ids: tuple[int, ...], text: str | None
) -> Prompt:
    """The prompt cut to its last `keep_last` tokens (truncate_prompt_tokens), if set."""
    if keep_last is not None and len(ids) > keep_last:
        ids, text = ids[-keep_last:], None
    if not ids:
        raise InvalidRequest("the prompt has no tokens", param="prompt")
    return Prompt(ids=ids, text=text if text is not None else tokenizer.decode(list(ids)))


def checked_ids(tokenizer: Any, ids: list[int]) -> tuple[int, ...]:
    vocab = len(tokenizer)
    if any(i < 0 or i >= vocab for i in ids):
        raise InvalidRequest(f"prompt token ids must be in [0, {vocab})", param="prompt")
    return tuple(ids)
