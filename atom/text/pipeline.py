"""ChoicePipeline: one choice's whole text path — detokenize, stop strings, reasoning
parser, tool-call parser — from TokensSampled to the choice's output events.

Pure and synchronous: the request actor runs it live, and `atom replay` runs it
again over recorded tokens (with other parsers, if asked)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from atom.text.choice_text import ChoiceText
from atom.text.detokenizer import Decoder
from atom.text.parsers import plan_formats
from atom.text.reasoning.base import ReasoningFormat, ReasoningStream
from atom.text.tools.base import (
    ArgumentsDelta,
    ContentDelta,
    ToolCallStart,
    ToolDelta,
    ToolFormat,
    ToolStream,
)
from atom.vocabulary.events import (
    ChoiceFinished,
    Event,
    FinishReason,
    PromptLogprobs,
    ReasoningDelta,
    TextDelta,
    TokensSampled,
    TokenText,
    ToolArgumentsDelta,
    ToolCallStarted,
)
from atom.vocabulary.plan import RequestPlan


@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceSetup:
    """What one choice's pipeline needs besides its tokens (see `pipeline_for`)."""

    request_id: str
    choice_idx: int
    prompt_ids: tuple[int, ...] = ()
    echo_text: str | None = None
    report_prompt_logprobs: bool = False
    tool_format: ToolFormat | None = None
    reasoning_format: ReasoningFormat | None = None
    is_named_tool_choice: bool = False
    is_streamed: bool = True  # else the tool parser gives its final scan only (strict)
    include_reasoning: bool = True  # false: reasoning is parsed out and left out
    report_token_ids: bool = False  # each step's token ids ride on a TextDelta


def pipeline_for(
    request_id: str,
    plan: RequestPlan,
    prompts: Sequence[tuple[int, ...]],
    choice_idx: int,
    decoder: Decoder,
) -> ChoicePipeline:
    """The pipeline of choice `choice_idx`, as the plan says: the live request actor and
    `atom replay` both build it here (a parser swap is a plan with other parsers)."""
    text = plan.text
    prompt_idx = plan.shape.prompt_index(choice_idx)
    tool_format, reasoning_format = plan_formats(text)
    setup = ChoiceSetup(
        request_id=request_id,
        choice_idx=choice_idx,
        prompt_ids=prompts[prompt_idx],
        echo_text=None if text.echo_texts is None else text.echo_texts[prompt_idx],
        report_prompt_logprobs=text.report_prompt_logprobs,
        tool_format=tool_format,
        reasoning_format=reasoning_format,
        is_named_tool_choice=text.tools is not None and text.tools.named is not None,
        is_streamed=plan.shape.stream,
        include_reasoning=text.include_reasoning,
        report_token_ids=plan.shape.return_token_ids,
    )
    choice_text = ChoiceText(
        decoder,
        plan.params,
        tokens_as_ids=text.tokens_as_ids,
        wants_pieces=reasoning_format is not None,  # a token counts as reasoning or not
    )
    return ChoicePipeline(setup, choice_text)


class ChoicePipeline:
    """Feed the choice's TokensSampled in order; get its events. Mutates itself only."""

    def __init__(self, setup: ChoiceSetup, text: ChoiceText) -> None:
        self._setup = setup
        self._text = text
        self._reasoning = (
            ReasoningStream(setup.reasoning_format) if setup.reasoning_format else None
        )
        self._tools = (
            ToolStream(
                setup.tool_format,
                id_seed=f"{setup.request_id}/{setup.choice_idx}",
                is_deferred=not setup.is_streamed,
            )
            if setup.tool_format
            else None
        )
        self._is_first = True
        self._num_reasoning_tokens = 0
        self._stop_string: str | None = None

    @property
    def is_stopped_by_string(self) -> bool:
        return self._stop_string is not None

    @property
    def is_finished(self) -> bool:
        return self._text.finish_reason is not None

    def feed(self, sampled: TokensSampled) -> list[Event]:
        events: list[Event] = []
        if self._is_first:
            self._is_first = False
            events += self._prompt_events(sampled)
        update = self._text.feed(sampled.token_ids, sampled.finish_reason, sampled.logprobs)
        taken = sampled.token_ids[: update.num_tokens]
        token_ids = taken if self._setup.report_token_ids else ()
        events += self._split(
            update.text,
            update.logprobs,
            token_ids,
            is_last=update.finish_reason is not None,
            pieces=update.pieces,
        )
        if update.finish_reason is not None:
            self._stop_string = update.stop_string
            events.append(self._finished(update.finish_reason))
        return events

    def _split(
        self,
        text: str,
        logprobs: tuple[TokenText, ...] | None,
        token_ids: tuple[int, ...],
        *,
        is_last: bool,
        pieces: tuple[str, ...] = (),
    ) -> list[Event]:
        """Text → reasoning and content → content and tool calls, as events. `pieces`:
        each token's part of `text`, fed to the reasoning parser one by one, so a token
        counts as reasoning however the steps' tokens were gathered into feeds (no pieces:
        text no token gave, such as the detokenizer's last bytes, counted as no token)."""
        events: list[Event] = []
        content = text
        if self._reasoning is not None:
            reasoning, content = self._reasoned(pieces) if pieces else self._reasoning.feed(text)
            if is_last:
                more_reasoning, more_content = self._reasoning.flush()
                reasoning, content = reasoning + more_reasoning, content + more_content
            if reasoning and self._setup.include_reasoning:
                events.append(self._event(ReasoningDelta, text=reasoning))
        deltas: list[ToolDelta] = [ContentDelta(text=content)] if content else []
        if self._tools is not None:
            deltas = self._tools.feed(content) + (self._tools.flush() if is_last else [])
        texts = [d.text for d in deltas if isinstance(d, ContentDelta)]
        if texts or logprobs or token_ids:
            delta = self._event(
                TextDelta, text="".join(texts), logprobs=logprobs, token_ids=token_ids
            )
            events.append(delta)
        events += [self._tool_event(d) for d in deltas if not isinstance(d, ContentDelta)]
        return events

    def _reasoned(self, pieces: tuple[str, ...]) -> tuple[str, str]:
        """Each token's text through the reasoning parser: the reasoning and the content
        they give; a token counts as reasoning when the text before it ends inside the
        reasoning section."""
        assert self._reasoning is not None
        reasoning, content = "", ""
        for piece in pieces:
            if self._reasoning.is_reasoning:
                self._num_reasoning_tokens += 1
            more_reasoning, more_content = self._reasoning.feed(piece)
            reasoning, content = reasoning + more_reasoning, content + more_content
        return reasoning, content

    def _tool_event(self, delta: ToolDelta) -> Event:
        if isinstance(delta, ToolCallStart):
            return self._event(ToolCallStarted, index=delta.index, id=delta.id, name=delta.name)
        assert isinstance(delta, ArgumentsDelta)
        return self._event(ToolArgumentsDelta, index=delta.index, text=delta.text)

    def _finished(self, reason: FinishReason) -> ChoiceFinished:
        has_calls = self._tools is not None and self._tools.num_calls > 0
        if reason is FinishReason.STOP and has_calls and not self._setup.is_named_tool_choice:
            reason = FinishReason.TOOL_CALLS
        return ChoiceFinished(
            request_id=self._setup.request_id,
            choice_idx=self._setup.choice_idx,
            finish_reason=reason,
            num_tokens=self._text.num_tokens,
            num_reasoning_tokens=self._num_reasoning_tokens if self._reasoning else None,
            stop_string=self._stop_string,
        )

    def _prompt_events(self, first: TokensSampled) -> list[Event]:
        """vLLM's prompt_logprobs and the echoed prompt, both before the first token's text."""
        setup, events = self._setup, []  # type: ignore[var-annotated]
        entries = first.prompt_logprobs
        if setup.report_prompt_logprobs and entries is not None:
            tokens = self._text.prompt_tokens(setup.prompt_ids, entries)
            events.append(self._event(PromptLogprobs, entries=tokens))
        if setup.echo_text is not None:
            echoed = None
            if self._text.wants_logprobs and entries is not None:
                echoed = self._text.echo_logprobs(setup.prompt_ids, entries)
            events.append(self._event(TextDelta, text=setup.echo_text, logprobs=echoed))
        return events

    def _event(self, cls: type, **fields: object) -> Event:
        return cls(request_id=self._setup.request_id, choice_idx=self._setup.choice_idx, **fields)  # type: ignore[no-any-return]
