"""/v1/completions: the validated body → the request's plan and its prompts.

A prompt is a string, token ids, or a list of either (a batched completion: each
prompt gets best_of choices). `best_of` > n ranks candidates by their cumulative
logprob, and `echo` shows each prompt before its text (with its logprobs, if asked).
"""

from __future__ import annotations

from typing import Any

from atom.actors.cores import EngineCore
from atom.http.adapter import Planned, check_shape, planned
from atom.http.prompts import Prompt, check_prompt_size, checked_ids, truncated
from atom.http.sampling import Asked, sampling_params
from atom.http.schemas import CompletionRequest
from atom.http.structured import constraint_of
from atom.text.prompt import encode_text
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.plan import Endpoint, RequestPlan, ResponseShape, TextPlan

ID_PREFIX = "cmpl-"


def plan(settings: Settings, core: EngineCore, body: CompletionRequest) -> Planned:
    """Raises AtomError (a 4xx naming the field) for anything the body cannot mean."""
    items = _prompt_items(body)
    if body.truncate_prompt_tokens is None:
        num_chars = max((len(x) for x in items if isinstance(x, str)), default=0)
        check_prompt_size(num_chars, core.max_prompt_chars, param="prompt")
    shape = ResponseShape(
        endpoint=Endpoint.COMPLETIONS,
        stream=body.stream,
        include_usage=body.stream_options is not None and body.stream_options.include_usage,
        num_prompts=len(items),
        n=body.n,
        best_of=body.best_of or body.n,
        logprobs=body.logprobs is not None,
        return_token_ids=body.return_token_ids,
    )
    check_shape(settings, shape, body)
    prompts = [_prompt(core.tokenizer, body, item) for item in items]
    constraint = constraint_of(body)
    logprobs = body.logprobs
    if shape.best_of > shape.n and logprobs is None:
        logprobs = 0  # ranking the best_of candidates needs each token's logprob
    prompt_logprobs = body.prompt_logprobs
    if prompt_logprobs is None and body.echo and logprobs is not None:
        prompt_logprobs = logprobs  # echo with logprobs shows the prompt's logprobs too
    asked = Asked(
        longest_prompt=max(len(p.ids) for p in prompts),
        prompt_field="prompt",
        max_tokens=body.max_tokens,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
    )
    params = sampling_params(core.tokenizer, core.max_model_len, body, asked, grammar=constraint)
    text = TextPlan(
        echo_texts=tuple(p.text for p in prompts) if body.echo else None,
        report_prompt_logprobs=body.prompt_logprobs is not None,
        tokens_as_ids=body.return_tokens_as_token_ids,
    )
    request_plan = RequestPlan(shape=shape, text=text, params=params)
    return planned(settings, body, request_plan, tuple(p.ids for p in prompts))


def _prompt_items(body: CompletionRequest) -> list[str | list[int]]:
    """The prompts: a string or one list of token ids is one; a list of either, several."""
    raw: Any = body.prompt
    if isinstance(raw, str) or (raw and all(isinstance(x, int) for x in raw)):
        raw = [raw]
    if not raw:
        raise InvalidRequest("prompt must not be empty", param="prompt")
    return list(raw)


def _prompt(tokenizer: Any, body: CompletionRequest, item: str | list[int]) -> Prompt:
    if isinstance(item, str):
        return truncated(tokenizer, body.truncate_prompt_tokens, encode_text(tokenizer, item), item)
    return truncated(tokenizer, body.truncate_prompt_tokens, checked_ids(tokenizer, item), None)
