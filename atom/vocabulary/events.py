"""The vocabulary: frozen commands and events, each with a stable snake_case type tag.

Commands are imperative (the Batcher is asked to do something); events are past
tense (something happened). The request log is the event stream as JSONL, so
every field here is plain data: ints, floats, strings, tuples and dicts. The engine's
own events (steps, weights, sleep) are in atom/vocabulary/engine_events.py, re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from atom.vocabulary.audio_events import TranscriptionFinished as TranscriptionFinished
from atom.vocabulary.audio_events import TranscriptionRequested as TranscriptionRequested
from atom.vocabulary.audio_events import WindowTranscribed as WindowTranscribed
from atom.vocabulary.engine_events import EngineIdle as EngineIdle
from atom.vocabulary.engine_events import EngineStepped as EngineStepped
from atom.vocabulary.engine_events import LoraLoaded as LoraLoaded
from atom.vocabulary.engine_events import LoraUnloaded as LoraUnloaded
from atom.vocabulary.engine_events import ModelSlept as ModelSlept
from atom.vocabulary.engine_events import ModelWoke as ModelWoke
from atom.vocabulary.engine_events import PrefixCacheReset as PrefixCacheReset
from atom.vocabulary.engine_events import WeightsUpdated as WeightsUpdated
from atom.vocabulary.event_base import Event as Event
from atom.vocabulary.event_base import RequestEvent
from atom.vocabulary.event_base import event_class as event_class
from atom.vocabulary.event_base import tagged as _tagged
from atom.vocabulary.images import ImageRef, PromptImage
from atom.vocabulary.plan import Endpoint, PoolingPlan, RequestPlan, SamplingParams


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenLogprobs:
    """The sampled token's log-probability and the `top` alternatives (id, logprob),
    most likely first, from the processed distribution (see docs/user-guide.md)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    rank: int | None = None  # 1 = the most likely token; set for prompt tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenText:
    """A token as text with its logprob (None for a prompt's first token, which has no
    context) and the top alternatives (text, logprob)."""

    token: str
    logprob: float | None
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptToken:
    """vLLM's prompt_logprobs entry: the prompt token and the top alternatives, each as
    (token id, text, logprob, rank)."""

    token_id: int
    token: str
    logprob: float
    rank: int
    top: tuple[tuple[int, str, float, int], ...] = ()


# --- commands to the Batcher ------------------------------------------------


@_tagged("submit")
@dataclass(frozen=True, slots=True, kw_only=True)
class Submit(RequestEvent):
    """Ask the Batcher to generate `choices_per_prompt` sequences from each prompt (the
    first is `prompt_ids`; a batched completion adds `more_prompt_ids`). Choice
    `p * choices_per_prompt + j` is the j-th sequence of prompt p."""

    prompt_ids: tuple[int, ...]
    params: SamplingParams
    choices_per_prompt: int = 1
    cache_salt: str | None = None
    more_prompt_ids: tuple[tuple[int, ...], ...] = ()
    priority: int = 0  # lower is admitted first and preempted last (policy "priority")
    lora: str | None = None  # the LoRA adapter that answers (None: the base model)
    # The first prompt's images, with their pixels: the one field of a command that is
    # not plain data. Submit is never logged; RequestAccepted logs their ImageRefs.
    images: tuple[PromptImage, ...] = ()

    @property
    def prompts(self) -> tuple[tuple[int, ...], ...]:
        return (self.prompt_ids, *self.more_prompt_ids)

    @property
    def total_choices(self) -> int:
        return len(self.prompts) * self.choices_per_prompt


@_tagged("abort")
@dataclass(frozen=True, slots=True, kw_only=True)
class Abort(RequestEvent):
    """Ask the Batcher to drop a request, or only one choice of it (`choice_idx`)."""

    choice_idx: int | None = None
    reason: str = "aborted"


# --- events of the request actor --------------------------------------------


@_tagged("request_received")
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestReceived(RequestEvent):
    """A generation request passed validation. `body` is the client's JSON body, kept
    for audit; `plan` is what was decided from it (None in logs written before plans:
    atom/log/legacy.py derives it)."""

    endpoint: Endpoint
    model: str
    created: int
    body: dict[str, Any] = field(default_factory=dict)
    plan: RequestPlan | None = None
    owner: str | None = None  # the API key's fingerprint (atom/vocabulary/tenant.py); None: no keys


@_tagged("request_accepted")
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAccepted(RequestEvent):
    """The Batcher's inbox took the request's rendered prompts; `num_choices` counts
    every choice of every prompt. `params` only in logs written before plans."""

    prompt_ids: tuple[int, ...]
    num_choices: int
    more_prompt_ids: tuple[tuple[int, ...], ...] = ()
    params: SamplingParams | None = None
    images: tuple[ImageRef, ...] = ()  # the first prompt's images: hashes, sizes, tokens

    @property
    def prompts(self) -> tuple[tuple[int, ...], ...]:
        return (self.prompt_ids, *self.more_prompt_ids)


@_tagged("text_delta")
@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(RequestEvent):
    """New output text of one choice, after detokenization and stop-string hold-back."""

    choice_idx: int
    text: str
    logprobs: tuple[TokenText, ...] | None = None  # the tokens this delta covers, if asked
    token_ids: tuple[int, ...] = ()  # the tokens sampled since the last delta, if asked


@_tagged("prompt_logprobs")
@dataclass(frozen=True, slots=True, kw_only=True)
class PromptLogprobs(RequestEvent):
    """vLLM's prompt_logprobs of the prompt behind one choice (first token has none)."""

    choice_idx: int
    entries: tuple[PromptToken, ...]


@_tagged("reasoning_delta")
@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta(RequestEvent):
    """New reasoning text of one choice (the reasoning parser's share of the output)."""

    choice_idx: int
    text: str


@_tagged("tool_call_started")
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStarted(RequestEvent):
    """A tool call of one choice began: its index in the choice, id and function name."""

    choice_idx: int
    index: int
    id: str
    name: str


@_tagged("tool_arguments_delta")
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolArgumentsDelta(RequestEvent):
    """A fragment of a tool call's arguments (JSON text)."""

    choice_idx: int
    index: int
    text: str


@_tagged("choice_finished")
@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceFinished(RequestEvent):
    """One choice ended; `num_tokens` counts the completion tokens it used."""

    choice_idx: int
    finish_reason: FinishReason
    num_tokens: int
    num_reasoning_tokens: int | None = None  # with a reasoning parser
    stop_string: str | None = None  # the stop string that ended it (Anthropic's stop_sequence)


@_tagged("request_completed")
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCompleted(RequestEvent):
    """Every choice ended and the response was sent; usage and latency figures."""

    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    tpot_s: float
    latency_s: float
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None  # with a reasoning parser


@_tagged("client_disconnected")
@dataclass(frozen=True, slots=True, kw_only=True)
class ClientDisconnected(RequestEvent):
    """The client closed the connection before the response was complete."""


@_tagged("request_aborted")
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestAborted(RequestEvent):
    """The request ended without a complete response (disconnect, shutdown)."""

    reason: str


@_tagged("request_failed")
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFailed(RequestEvent):
    """The request ended with an error; the fields are the OpenAI error body."""

    status: int
    message: str
    error_type: str
    param: str | None = None
    code: str | None = None
    retry_after_s: int | None = None


@_tagged("keep_alive_sent")
@dataclass(frozen=True, slots=True, kw_only=True)
class KeepAliveSent(RequestEvent):
    """A stream had nothing to send for `--sse-ping-interval` seconds (queued, a long
    prefill): the API's keep-alive went out (an SSE comment, Anthropic's `ping`)."""


@_tagged("response_deleted")
@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseDeleted(RequestEvent):
    """A client deleted a stored Responses API response (DELETE /v1/responses/{id})."""


@_tagged("response_cancel_asked")
@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseCancelAsked(RequestEvent):
    """A client asked to cancel a background response that another replica runs
    (POST /v1/responses/{id}/cancel); that replica reads it from the shared store
    (atom/log/shared_responses.py) and cancels it."""


# --- pooling requests (embeddings, score, rerank, classify, pooling) ----------


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingInput:
    """One input as the model sees it; a cross-encoder's pair carries its segment ids."""

    token_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...] | None = None


@_tagged("pooling_requested")
@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingRequested(RequestEvent):
    """A pooling request passed validation: its inputs, tokenized, and its plan (`body`
    is kept for audit only)."""

    endpoint: Endpoint
    model: str
    created: int
    inputs: tuple[PoolingInput, ...]
    plan: PoolingPlan
    body: dict[str, Any] = field(default_factory=dict)
    owner: str | None = None  # the API key's fingerprint (atom/vocabulary/tenant.py); None: no keys

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(i.token_ids) for i in self.inputs)


@_tagged("pooling_finished")
@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingFinished(RequestEvent):
    """Every input was pooled: the model's output for each, as base64 float32 bytes
    (exact, and a quarter of the size of JSON numbers)."""

    outputs: tuple[str, ...]


# --- events of the Batcher --------------------------------------------------


@_tagged("request_scheduled")
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestScheduled(RequestEvent):
    """The Batcher admitted the request's sequences into the running batch."""

    num_running: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftsVerified:
    """Speculative decoding in one step of one choice: the draft tokens proposed, and
    how many of them, from the first, the model agreed with (each accepted draft is one
    of the step's tokens; the token after them is the model's own)."""

    num_draft_tokens: int
    num_accepted_tokens: int


@_tagged("tokens_sampled")
@dataclass(frozen=True, slots=True, kw_only=True)
class TokensSampled(RequestEvent):
    """One step's sampled tokens for one choice; `finish_reason` when the sequence ended.
    Several tokens when the step verified drafts (`drafts`)."""

    choice_idx: int
    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None = None
    num_cached_tokens: int | None = None  # on a choice's first token: its prefix-cache hit
    logprobs: tuple[TokenLogprobs, ...] | None = None  # one per token, when asked for
    prompt_logprobs: tuple[TokenLogprobs, ...] | None = None  # first token: prompt tokens 1..
    drafts: DraftsVerified | None = None  # None: no drafts this step


@_tagged("prompt_chunk_computed")
@dataclass(frozen=True, slots=True, kw_only=True)
class PromptChunkComputed(RequestEvent):
    """A step computed part of a choice's prompt without reaching its end (chunked
    prefill): `num_computed` of `num_prompt_tokens` positions are in the cache. The
    chunk that reaches the end samples the first token, a `tokens_sampled` instead."""

    choice_idx: int
    num_tokens: int
    num_computed: int
    num_prompt_tokens: int


@_tagged("request_released")
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestReleased(RequestEvent):
    """The Batcher holds nothing of the request any more (finished or aborted)."""

    was_scheduled: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """An event as published: its position in the stream and the injected clock's time."""

    seq: int
    at: float
    event: Event
