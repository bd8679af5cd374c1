"""What every endpoint adapter gives the generation route, and the checks they share.

An adapter (atom/http/chat.py, atom/http/completions.py) turns its validated body
into a RequestPlan and the prompts' token ids; nothing after it reads the body.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from atom.http.schemas import SamplingBody
from atom.text.parsers import opens_reasoning, reasoning_format
from atom.text.prompt import encode_text
from atom.vocabulary.config import Settings
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.images import PromptImage
from atom.vocabulary.plan import ReasoningBudget, RequestPlan, ResponseShape


@dataclass(frozen=True, slots=True, kw_only=True)
class Planned:
    plan: RequestPlan
    prompts: tuple[tuple[int, ...], ...]  # token ids, one entry per prompt
    cache_salt: str | None = None
    priority: int = 0  # lower is admitted first (--scheduling-policy priority)
    images: tuple[PromptImage, ...] = ()  # the first prompt's images (a vision model's)

    def reshaped(self, **changes: Any) -> Planned:
        """The same plan with other response-shape fields (an API planned as chat)."""
        shape = replace(self.plan.shape, **changes)
        return replace(self, plan=replace(self.plan, shape=shape))


def planned(
    settings: Settings,
    body: SamplingBody,
    plan: RequestPlan,
    prompts: tuple[tuple[int, ...], ...],
    images: tuple[PromptImage, ...] = (),
) -> Planned:
    """The plan with its prompts and the body's scheduling hints (cache salt, priority);
    a priority other than 0 needs `--scheduling-policy priority` (a 400, as vLLM)."""
    if body.priority != 0 and settings.scheduling_policy != "priority":
        raise InvalidRequest(
            "priority needs the server started with --scheduling-policy priority",
            param="priority",
        )
    return Planned(
        plan=plan,
        prompts=prompts,
        cache_salt=body.cache_salt,
        priority=body.priority,
        images=images,
    )


def check_shape(settings: Settings, shape: ResponseShape, body: SamplingBody) -> None:
    """n and best_of within the server's limits, and what cannot be streamed."""
    if shape.n > settings.max_n:
        what = "the beam width n" if body.use_beam_search else "n"
        raise InvalidRequest(f"{what} must be at most {settings.max_n} (--max-n)", param="n")
    if body.use_beam_search and shape.best_of != shape.n:
        raise InvalidRequest(
            "use_beam_search returns the n best beams: best_of must be n or left out",
            param="best_of",
        )
    if shape.best_of < shape.n:
        raise InvalidRequest(
            f"best_of ({shape.best_of}) must be at least n ({shape.n})", param="best_of"
        )
    if shape.best_of > settings.max_n:
        raise InvalidRequest(f"best_of must be at most {settings.max_n}", param="best_of")
    if shape.best_of > shape.n and shape.stream:
        raise InvalidRequest("best_of > n cannot be streamed", param="best_of")
    if body.prompt_logprobs is not None and shape.stream:
        raise InvalidRequest("prompt_logprobs cannot be streamed yet", param="prompt_logprobs")
    if shape.total_choices > settings.max_num_seqs:
        raise InvalidRequest(
            f"{shape.num_prompts} prompts x {shape.best_of} choices exceeds --max-num-seqs "
            f"{settings.max_num_seqs}",
            param="n",
        )


def reasoning_end_ids(
    tokenizer: Any, reasoning_parser: str | None, template_kwargs: dict[str, Any]
) -> tuple[int, ...]:
    """With a reasoning parser, a constraint starts once the reasoning section ends."""
    if not reasoning_parser:
        return ()
    marker = reasoning_format(reasoning_parser, template_kwargs).end_marker
    return encode_text(tokenizer, marker, add_special_tokens=False) if marker else ()


def reasoning_budget(
    tokenizer: Any,
    reasoning_parser: str | None,
    limit: int | None,
    template_kwargs: dict[str, Any],
    starts_open: bool,
) -> ReasoningBudget | None:
    """The thinking budget (`thinking_token_budget`, else `--reasoning-budget`) as token
    ids the sampler can force; None without a limit or with thinking switched off."""
    if limit is None:
        return None
    if not reasoning_parser:
        raise InvalidRequest(
            "thinking_token_budget needs --reasoning-parser", param="thinking_token_budget"
        )
    fmt = reasoning_format(reasoning_parser, template_kwargs, starts_open=starts_open)
    if not fmt.end_marker:
        return None
    start = (
        () if starts_open else encode_text(tokenizer, fmt.start_marker, add_special_tokens=False)
    )
    end = reasoning_end_ids(tokenizer, reasoning_parser, template_kwargs)
    return ReasoningBudget(max_tokens=limit, start_ids=start, end_ids=end)


def reasoning_opened(
    tokenizer: Any,
    reasoning_parser: str | None,
    template_kwargs: dict[str, Any],
    prompt_ids: tuple[int, ...],
) -> bool:
    """Whether the rendered prompt ends inside an open reasoning block (a template that
    writes `<think>` itself), so the output starts in the reasoning: decided from the
    prompt, not guessed from the output."""
    if not reasoning_parser:
        return False
    fmt = reasoning_format(reasoning_parser, template_kwargs)
    return opens_reasoning(fmt, tokenizer.decode(prompt_ids[-64:]))
