"""The OpenAI `logprobs` shapes, rendered from TokenText records (part of the wire projection).

Chat: `{"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}`.
Completions: `{tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}`.
A banned token's -inf is written as -9999.0, as OpenAI does, since JSON has no infinity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from atom.vocabulary.events import PromptToken, TokenText

FLOOR = -9999.0


def finite(logprob: float | None) -> float | None:
    return logprob if logprob is None or math.isfinite(logprob) else FLOOR


def _token(token: str, logprob: float | None) -> dict[str, Any]:
    return {"token": token, "logprob": finite(logprob), "bytes": list(token.encode())}


def chat(entries: Sequence[TokenText]) -> dict[str, Any]:
    content = [
        {**_token(e.token, e.logprob), "top_logprobs": [_token(t, lp) for t, lp in e.top]}
        for e in entries
    ]
    return {"content": content, "refusal": None}


def completion(entries: Sequence[TokenText], offset: int) -> dict[str, Any]:
    """Completions logprobs; `offset` is where the first token starts in the choice's text."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [finite(e.logprob) for e in entries],
        "top_logprobs": [{t: finite(lp) for t, lp in e.top} for e in entries],
        "text_offset": offsets,
    }


def prompt(entries: Sequence[PromptToken]) -> list[Any]:
    """vLLM's prompt_logprobs: None for the first token, then per token a map
    token id → {logprob, rank, decoded_token} holding the token and the top alternatives."""
    out: list[Any] = [None]
    for e in entries:
        ranked = {
            str(t): {"logprob": finite(lp), "rank": rank, "decoded_token": text}
            for t, text, lp, rank in e.top
        }
        ranked.setdefault(
            str(e.token_id),
            {"logprob": finite(e.logprob), "rank": e.rank, "decoded_token": e.token},
        )
        out.append(ranked)
    return out
