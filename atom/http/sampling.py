"""From a validated request body to the effective SamplingParams: defaults, the context
limit, token-id ranges and the request's own cross-field rules."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from atom.http.schemas import SamplingBody
from atom.text.prompt import encode_text
from atom.vocabulary.errors import ContextTooLong, InvalidRequest
from atom.vocabulary.events import SamplingParams
from atom.vocabulary.plan import BeamSearch, ReasoningBudget


@dataclass(frozen=True, slots=True, kw_only=True)
class Asked:
    """What the endpoint's own fields ask of sampling, as its adapter resolved them."""

    longest_prompt: int  # tokens
    prompt_field: str  # "messages" or "prompt", for a too-long prompt's error
    max_tokens: int | None = None
    logprobs: int | None = None  # top alternatives per token; 0 = the token only
    prompt_logprobs: int | None = None


def sampling_params(
    tokenizer: Any,
    max_model_len: int,
    body: SamplingBody,
    asked: Asked,
    *,
    grammar: str | None = None,
    grammar_after: tuple[int, ...] = (),
    reasoning_budget: ReasoningBudget | None = None,
    keep_special_tokens: bool = False,
) -> SamplingParams:
    """Raises ContextTooLong or InvalidRequest (naming the field) on a bad combination."""
    max_tokens = _max_tokens(asked, max_model_len)
    if body.min_tokens > max_tokens:
        raise InvalidRequest(
            f"min_tokens ({body.min_tokens}) must not exceed max_tokens ({max_tokens})",
            param="min_tokens",
        )
    vocab = len(tokenizer)
    beam_search = _beam_search(body, grammar=grammar, reasoning_budget=reasoning_budget)
    return SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k if body.top_k and 0 < body.top_k < vocab else None,  # else: all
        min_p=body.min_p or 0.0,
        max_tokens=max_tokens,
        min_tokens=body.min_tokens,
        stop=body.stop_strings(),
        stop_token_ids=_ids("stop_token_ids", body.stop_token_ids or (), vocab),
        ignore_eos=body.ignore_eos,
        seed=random.getrandbits(63) if body.seed is None else body.seed,
        frequency_penalty=body.frequency_penalty or 0.0,
        presence_penalty=body.presence_penalty or 0.0,
        repetition_penalty=body.repetition_penalty or 1.0,
        logit_bias=_logit_bias(body.logit_bias or {}, vocab),
        allowed_token_ids=_allowed(body.allowed_token_ids, vocab),
        bad_words=_bad_words(tokenizer, body.bad_words or ()),
        logprobs=asked.logprobs,
        prompt_logprobs=asked.prompt_logprobs,
        include_stop_str_in_output=body.include_stop_str_in_output,
        skip_special_tokens=body.skip_special_tokens and not keep_special_tokens,
        spaces_between_special_tokens=body.spaces_between_special_tokens,
        grammar=grammar,
        grammar_after=grammar_after,
        reasoning_budget=reasoning_budget,
        beam_search=beam_search,
    )


def _beam_search(
    body: SamplingBody, *, grammar: str | None, reasoning_budget: ReasoningBudget | None
) -> BeamSearch | None:
    """The beam search asked for, or None; a 400 for what beams cannot carry (a beam
    ends on a token, so stop strings, and a per-sequence grammar or forced end)."""
    if not body.use_beam_search:
        return None
    if body.stop_strings():
        raise InvalidRequest(
            "use_beam_search does not take stop strings (stop_token_ids end a beam)",
            param="stop",
        )
    if grammar is not None:
        raise InvalidRequest(
            "use_beam_search does not combine with structured output or required tools",
            param="use_beam_search",
        )
    if reasoning_budget is not None:
        raise InvalidRequest(
            "use_beam_search does not combine with a reasoning budget",
            param="thinking_token_budget",
        )
    return BeamSearch(length_penalty=body.length_penalty, early_stopping=body.early_stopping)


def _max_tokens(asked: Asked, limit: int) -> int:
    requested, num_prompt = asked.max_tokens, asked.longest_prompt
    if num_prompt >= limit or (requested is not None and num_prompt + requested > limit):
        raise ContextTooLong(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{num_prompt + (requested or 0)} tokens ({num_prompt} in the prompt, "
            f"{requested or 0} for the completion). Please reduce the length of the prompt "
            "or the completion.",
            param="max_tokens" if num_prompt < limit else asked.prompt_field,
        )
    return requested or limit - num_prompt


def _ids(field: str, ids: Iterable[int], vocab: int) -> tuple[int, ...]:
    out = tuple(ids)
    if any(i < 0 or i >= vocab for i in out):
        raise InvalidRequest(f"{field}: token ids must be in [0, {vocab})", param=field)
    return out


def _allowed(ids: list[int] | None, vocab: int) -> tuple[int, ...] | None:
    return None if ids is None else _ids("allowed_token_ids", ids, vocab)


_TOKEN_ID = re.compile(r"-?[0-9]+")


def _logit_bias(bias: dict[str, float], vocab: int) -> tuple[tuple[int, float], ...]:
    out = []
    for key, value in bias.items():
        if not _TOKEN_ID.fullmatch(key):  # ASCII digits: int() also takes "١٢" and " 5"
            raise InvalidRequest(
                f"logit_bias keys must be token ids, got {key!r}", param="logit_bias"
            )
        if not -100.0 <= value <= 100.0:
            raise InvalidRequest("logit_bias values must be in [-100, 100]", param="logit_bias")
        out.append((int(key), float(value)))
    _ids("logit_bias", (token for token, _ in out), vocab)
    return tuple(sorted(out))


def _bad_words(tokenizer: Any, words: Iterable[str]) -> tuple[tuple[int, ...], ...]:
    """Each word as tokenized alone and after a space (vLLM): both spellings are banned."""
    sequences: list[tuple[int, ...]] = []
    for word in words:
        for text in (word, " " + word.lstrip()):
            ids = encode_text(tokenizer, text, add_special_tokens=False)
            if ids and ids not in sequences:
                sequences.append(ids)
    return tuple(sequences)
