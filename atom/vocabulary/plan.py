"""The request plan: everything decided about a request when its body was validated.

An endpoint's adapter (atom/http/chat.py, atom/http/completions.py) builds one
RequestPlan; it travels whole in RequestReceived, and everything after reads it —
the Batcher's Submit (params), each choice's text pipeline (text), the wire
renderer (shape) and `atom replay` — never the raw body, which stays in the log
for audit. Plain frozen data, so the request log holds it as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Endpoint(StrEnum):
    CHAT = "chat.completions"
    COMPLETIONS = "completions"
    MESSAGES = "messages"  # Anthropic's Messages API
    RESPONSES = "responses"  # OpenAI's Responses API
    OLLAMA_CHAT = "ollama.chat"  # Ollama's /api/chat
    OLLAMA_GENERATE = "ollama.generate"  # Ollama's /api/generate
    OLLAMA_EMBED = "ollama.embed"  # Ollama's /api/embed (a pooling endpoint)
    OLLAMA_EMBEDDINGS = "ollama.embeddings"  # Ollama's older /api/embeddings
    EMBEDDINGS = "embeddings"  # the pooling endpoints (PoolingPlan)
    SCORE = "score"
    RERANK = "rerank"
    CLASSIFY = "classify"
    POOLING = "pooling"
    TRANSCRIPTIONS = "audio.transcriptions"  # speech to text (TranscriptionPlan)
    TRANSLATIONS = "audio.translations"  # speech to English text


# The route of each generation endpoint (atom/http routes them; `atom replay --rerun`
# sends recorded requests back to them).
GENERATION_PATHS = {
    Endpoint.CHAT: "/v1/chat/completions",
    Endpoint.COMPLETIONS: "/v1/completions",
    Endpoint.MESSAGES: "/v1/messages",
    Endpoint.RESPONSES: "/v1/responses",
    Endpoint.OLLAMA_CHAT: "/api/chat",
    Endpoint.OLLAMA_GENERATE: "/api/generate",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningBudget:
    """At most `max_tokens` tokens of reasoning: then the sampler forces `end_ids` (the
    reasoning parser's end marker), one a step, and the answer follows. The output is
    in the reasoning when it starts with `start_ids` (empty: the prompt opened it)."""

    max_tokens: int
    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BeamSearch:
    """vLLM's `use_beam_search`: the request's `n` beams, ranked as transformers ranks
    them (atom/model/scheduling/beam_search.py). `early_stopping`: True, False or
    "never", with transformers' meanings."""

    length_penalty: float = 1.0
    early_stopping: bool | str = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """Effective sampling settings of one request (defaults already applied)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    min_p: float = 0.0
    max_tokens: int = 16
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int = 0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None
    bad_words: tuple[tuple[int, ...], ...] = ()  # token sequences, as vLLM tokenizes them
    logprobs: int | None = None  # top alternatives per sampled token; 0 = the token only
    prompt_logprobs: int | None = None  # likewise for every prompt token after the first
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    grammar: str | None = None  # an llguidance grammar: structured output constrains sampling
    grammar_after: tuple[int, ...] = ()  # the grammar starts after these tokens (reasoning end)
    reasoning_budget: ReasoningBudget | None = None  # thinking_token_budget
    beam_search: BeamSearch | None = None  # the choices are beams, not samples

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def needs_history(self) -> bool:
        """Whether sampling looks at the tokens so far (penalties, bad words)."""
        return bool(
            self.frequency_penalty
            or self.presence_penalty
            or self.repetition_penalty != 1.0
            or self.bad_words
            or (self.grammar is not None and bool(self.grammar_after))
            or self.reasoning_budget is not None
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseShape:
    """What the response looks like on the wire, whatever the text inside it."""

    endpoint: Endpoint
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a usage chunk before [DONE]
    num_prompts: int = 1  # a batched completion has several
    n: int = 1  # choices returned per prompt
    best_of: int = 1  # choices generated per prompt; the n best are returned
    logprobs: bool = False  # each choice reports its tokens' logprobs
    return_token_ids: bool = False  # prompt and output token ids in the answer (vLLM's)
    # The Responses API's: answered whoever waits (no stream pings; cancel by id), and
    # kept for GET and previous_response_id.
    background: bool = False
    store: bool = True
    # What a Responses API object repeats of its request (instructions, tools, ...), as
    # the client sent it: echoed on the wire, never read for a decision.
    request_fields: dict[str, Any] = field(default_factory=dict)
    # The Responses API's input as items (GET input_items, previous_response_id).
    input_items: tuple[dict[str, Any], ...] = ()

    @property
    def total_choices(self) -> int:
        """Choices generated: choice `p * best_of + j` is the j-th of prompt p."""
        return self.num_prompts * self.best_of

    def prompt_index(self, choice_idx: int) -> int:
        """Which prompt a choice continues."""
        return choice_idx // self.best_of

    @staticmethod
    def upgrade_logged(raw: dict[str, Any]) -> dict[str, Any]:
        """A shape logged before `background` and `store` were fields had them only in
        `request_fields` (a stored `store: false` response must stay unstored)."""
        echoed = raw.get("request_fields") or {}
        fields = {k: echoed[k] for k in ("background", "store") if k in echoed and k not in raw}
        return {**raw, **fields}


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPlan:
    """How the choices' tool calls are found: the request offered tools and allowed them.

    `required` or `named` force calls (a grammar in the params enforces them, and the
    parser is the forced call's own); otherwise `parser` (`--tool-call-parser`, None for
    none) reads calls out of free text, at most `max_calls` of them."""

    parser: str | None = None
    schemas: dict[str, Any] = field(default_factory=dict)  # function name → parameters
    max_calls: int | None = None  # 1 without parallel_tool_calls
    required: bool = False  # tool_choice "required"
    named: str | None = None  # tool_choice naming one function


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPlan:
    """What every choice's text pipeline runs besides the detokenizer and stop strings."""

    tools: ToolPlan | None = None
    reasoning_parser: str | None = None  # `--reasoning-parser`
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. enable_thinking
    reasoning_starts_open: bool = False  # the rendered prompt left a reasoning block open
    echo_texts: tuple[str, ...] | None = None  # per prompt, when the client asked for echo
    report_prompt_logprobs: bool = False
    include_reasoning: bool = True  # false: the reasoning parser's text leaves the answer
    tokens_as_ids: bool = False  # logprobs name tokens "token_id:N" (vLLM's option)

    def with_parsers(self, tool_call_parser: str | None, reasoning_parser: str | None) -> TextPlan:
        """The same plan with other parsers (`atom replay --tool-call-parser ...`)."""
        tools = None if self.tools is None else replace(self.tools, parser=tool_call_parser)
        return replace(self, tools=tools, reasoning_parser=reasoning_parser)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestPlan:
    shape: ResponseShape
    text: TextPlan
    params: SamplingParams


class Activation(StrEnum):
    """What turns a model's raw output into the numbers a pooling endpoint reports."""

    NONE = "none"  # embeddings (normalized by the model's own modules), raw pooling
    SIGMOID = "sigmoid"  # a one-label cross-encoder's relevance
    SOFTMAX = "softmax"  # a classifier's label probabilities


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingPlan:
    """What a pooling request reports of its inputs' outputs (atom/projections/wire_pooling.py).

    Each input of the request yields one float vector from the model: an embedding, or
    a cross-encoder's or classifier's logits. `comparisons` pairs inputs by index for
    score and rerank on an embedding model (cosine similarity); a cross-encoder's
    inputs are the pairs themselves, in order."""

    endpoint: Endpoint
    activation: Activation = Activation.NONE
    encoding_format: str = "float"  # or "base64": float32 bytes, as OpenAI sends them
    dimensions: int | None = None  # keep the first n dimensions, then normalize again
    comparisons: tuple[tuple[int, int], ...] = ()
    documents: tuple[str, ...] = ()  # rerank: the documents, when they are returned
    top_n: int | None = None  # rerank: the best n, best first
    labels: tuple[str, ...] = ()  # classify: the label of each logit
