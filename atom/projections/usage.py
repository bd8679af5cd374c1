"""Usage and latency of one request: a pure fold over the request's own envelopes.

The request actor folds its request's events into the figures of RequestCompleted
(which the wire renderer and `atom replay` turn into `usage`); `/metrics` folds
every request's events the same way for its TTFT and inter-token histograms.
"""

from __future__ import annotations

from dataclasses import dataclass

from atom.vocabulary.events import (
    ChoiceFinished,
    Envelope,
    RequestAccepted,
    RequestCompleted,
    RequestReceived,
    TokensSampled,
)


@dataclass(slots=True)
class _Choice:
    num_tokens: int = 0  # completion tokens, once the choice finished
    last_token_at: float | None = None


@dataclass(frozen=True, slots=True)
class Latencies:
    """What one TokensSampled revealed: the request's TTFT (its first token) and the
    gap since the choice's previous token."""

    ttft_s: float | None = None
    inter_token_s: float | None = None


class RequestUsage:
    """Feed the request's envelopes in order, starting with its RequestReceived."""

    def __init__(self, received: Envelope) -> None:
        event = received.event
        assert isinstance(event, RequestReceived)
        self.request_id = event.request_id
        self.received_at = received.at
        self._prompt_tokens = 0
        self._cached_tokens = 0
        self._first_token_at: float | None = None
        self._last_token_at = received.at
        self._choices: list[_Choice] = []
        has_reasoning = event.plan is not None and event.plan.text.reasoning_parser is not None
        self._reasoning_tokens: int | None = 0 if has_reasoning else None

    def apply(self, envelope: Envelope) -> Latencies:
        event = envelope.event
        if isinstance(event, RequestAccepted):
            self._prompt_tokens = sum(map(len, event.prompts))
            self._choices = [_Choice() for _ in range(event.num_choices)]
        elif isinstance(event, TokensSampled):
            return self._on_tokens(event, envelope.at)
        elif isinstance(event, ChoiceFinished):
            self._choices[event.choice_idx].num_tokens = event.num_tokens
            if event.num_reasoning_tokens is not None:
                self._reasoning_tokens = (self._reasoning_tokens or 0) + event.num_reasoning_tokens
        return Latencies()

    def _on_tokens(self, event: TokensSampled, at: float) -> Latencies:
        ttft = None
        if self._first_token_at is None:
            self._first_token_at = at
            ttft = at - self.received_at
        self._last_token_at = at
        if event.choice_idx == 0 and event.num_cached_tokens is not None:
            self._cached_tokens = event.num_cached_tokens
        choice = self._choices[event.choice_idx] if self._choices else _Choice()
        gap = None if choice.last_token_at is None else at - choice.last_token_at
        choice.last_token_at = at
        return Latencies(ttft_s=ttft, inter_token_s=gap)

    def completed(self, now: float) -> RequestCompleted:
        """The request's figures once every choice finished; `now` ends its latency."""
        first = self._first_token_at or self.received_at
        longest = max((c.num_tokens for c in self._choices), default=0)
        return RequestCompleted(
            request_id=self.request_id,
            prompt_tokens=self._prompt_tokens,
            completion_tokens=sum(c.num_tokens for c in self._choices),
            ttft_s=first - self.received_at,
            tpot_s=(self._last_token_at - first) / (longest - 1) if longest > 1 else 0.0,
            latency_s=now - self.received_at,
            cached_tokens=self._cached_tokens,
            reasoning_tokens=self._reasoning_tokens,
        )
