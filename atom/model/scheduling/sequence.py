"""The Scheduler's records: a `Sequence` (one choice of one request), what a step gave
it (`SeqOutput`), and what one `schedule()` did (`StepStats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from atom.model.runner import Sampled, SeqChunk
from atom.vocabulary.events import (
    DraftsVerified,
    FinishReason,
    SamplingParams,
    Submit,
    TokenLogprobs,
    TokensSampled,
)
from atom.vocabulary.images import PromptImage

if TYPE_CHECKING:
    from atom.model.scheduling.beam_search import BeamGroup

PLACEHOLDER = -1  # in a chunk planned ahead: the token the step before samples


@dataclass(slots=True, kw_only=True)
class Sequence:
    """One choice of one request: prompt plus output so far. Owned by the Scheduler."""

    seq_id: str
    request_id: str
    choice_idx: int
    first_sibling_idx: int  # the first choice of the same prompt
    params: SamplingParams
    seed: int
    cache_salt: str | None
    token_ids: list[int]
    num_prompt_tokens: int
    num_computed: int = 0
    num_cached_tokens: int | None = None  # prefix-cache hit at first admission
    has_blocks: bool = False
    priority: int = 0  # with by_priority, lower is served first and preempted last
    num_draft_tokens: int | None = None  # how many to propose next: follows acceptance
    lora: str | None = None  # the LoRA adapter it runs with (None: the base model)
    images: tuple[PromptImage, ...] = ()  # the prompt's images (atom/vocabulary/images.py)
    group: BeamGroup | None = None  # the beam search it is a beam of (use_beam_search)
    is_disk_checked: bool = False  # its prefix was looked up in the disk tier

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    def room(self, max_model_len: int) -> int:
        """How many tokens it may still take: its max_tokens, or the context limit."""
        return min(self.params.max_tokens - self.num_output, max_model_len - len(self.token_ids))

    @property
    def prefix_salt(self) -> tuple[str | None, str | None]:
        """What keeps its cached prefixes apart from others': the adapter (a hit never
        crosses adapters) and the request's cache salt."""
        return self.lora, self.cache_salt

    @property
    def is_decoding(self) -> bool:
        return self.has_blocks and self.num_computed == len(self.token_ids) - 1

    def chunk(
        self,
        start: int,
        end: int,
        block_ids: tuple[int, ...],
        drafts: tuple[int, ...] = (),
        *,
        ahead: bool = False,
    ) -> SeqChunk:
        """Positions `start`..`end` of it, then a placeholder (`ahead`: for the token
        the step before samples, atom/model/scheduling/ahead.py), then `drafts`."""
        needs_sample = end == len(self.token_ids)
        history = needs_sample and self.params.needs_history
        num_prompt = self.num_prompt_tokens
        return SeqChunk(
            seq_id=self.seq_id,
            token_ids=(*self.token_ids[start:end], *((PLACEHOLDER,) if ahead else ()), *drafts),
            num_draft_tokens=len(drafts),
            start_pos=start,
            block_ids=block_ids,
            params=self.params,
            seed=self.seed,
            needs_sample=needs_sample,
            num_prompt_tokens=num_prompt,
            prompt_ids=tuple(self.token_ids[:num_prompt]) if history else (),
            output_ids=tuple(self.token_ids[num_prompt:]) if history else (),
            lora=self.lora,
            images=tuple(i for i in self.images if i.positions[0] < end) if self.images else (),
        )


def sequence_of(submit: Submit, p_idx: int, choice_idx: int, params: SamplingParams) -> Sequence:
    """Choice `choice_idx` of prompt `p_idx` of `submit`, sampled with `params` (its blocks
    come when it is scheduled); the prompt's images go with its first prompt only."""
    prompt = submit.prompts[p_idx]
    return Sequence(
        seq_id=f"{submit.request_id}/{choice_idx}",
        request_id=submit.request_id,
        choice_idx=choice_idx,
        first_sibling_idx=p_idx * submit.choices_per_prompt,
        params=params,
        seed=choice_seed(submit.params.seed, choice_idx),
        cache_salt=submit.cache_salt,
        token_ids=list(prompt),
        num_prompt_tokens=len(prompt),
        priority=submit.priority,
        lora=submit.lora,
        images=submit.images if p_idx == 0 else (),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqOutput:
    """The tokens `seq` took this step (one, or with drafts up to one more than were
    accepted, cut where the sequence ended); `finish_reason` when it just ended."""

    seq: Sequence
    tokens: tuple[Sampled, ...]
    prompt_logprobs: tuple[TokenLogprobs, ...] | None
    finish_reason: FinishReason | None
    is_first: bool
    drafts: DraftsVerified | None = None  # the step verified drafts for `seq`

    @property
    def token_ids(self) -> tuple[int, ...]:
        tokens = self.tokens
        if len(tokens) == 1:
            return (tokens[0].token_id,)
        return tuple(t.token_id for t in tokens)

    def event(self) -> TokensSampled:
        """What the request's actor and the log are told of it."""
        seq, tokens = self.seq, self.tokens
        logprobs = None
        if len(tokens) != 1 or tokens[0].logprobs is not None:
            logprobs = tuple(t.logprobs for t in tokens if t.logprobs) or None
        return TokensSampled(
            request_id=seq.request_id,
            choice_idx=seq.choice_idx,
            token_ids=self.token_ids,
            finish_reason=self.finish_reason,
            num_cached_tokens=seq.num_cached_tokens if self.is_first else None,
            logprobs=logprobs,
            prompt_logprobs=self.prompt_logprobs,
            drafts=self.drafts,
        )


@dataclass(slots=True)
class StepStats:
    """What one `schedule()` did, for the engine's metrics."""

    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0  # in memory or on disk
    prefix_cache_disk_hits: int = 0


def is_stop_token(token_id: int, params: SamplingParams, eos_token_ids: frozenset[int]) -> bool:
    """Whether a sequence sampled with `params` ends with `token_id` (its stop reason)."""
    is_eos = token_id in eos_token_ids and not params.ignore_eos
    return is_eos or token_id in params.stop_token_ids


def choice_seed(seed: int, choice_idx: int) -> int:
    """Each choice of a seeded request gets its own stream of randomness."""
    return (seed * 1_000_003 + choice_idx) % (1 << 63)
