"""ChoiceStream: the per-choice pipeline task — sampled tokens in, text events out."""

from __future__ import annotations

from collections.abc import Callable

import trio

from atom.events import (
    ChoiceFinished,
    Envelope,
    Event,
    PromptLogprobs,
    TextDelta,
    TokensSampled,
    TokenText,
)
from atom.text.choice import ChoiceText


class ChoiceStream:
    """One choice of one request. Owns its ChoiceText; nobody else touches it."""

    def __init__(
        self,
        *,
        request_id: str,
        choice_idx: int,
        text: ChoiceText,
        prompt_ids: tuple[int, ...] = (),
        echo_text: str | None = None,
        report_prompt_logprobs: bool = False,
    ) -> None:
        self.request_id = request_id
        self.choice_idx = choice_idx
        self._text = text
        self._prompt_ids = prompt_ids
        self._echo_text = echo_text
        self._report_prompt_logprobs = report_prompt_logprobs

    async def run(
        self,
        inbox: trio.MemoryReceiveChannel[Envelope],
        to_writer: trio.MemorySendChannel[Event],
        *,
        on_stop_string: Callable[[int], None],
    ) -> None:
        """Consume until the choice finishes; `on_stop_string` frees the sequence early."""
        async with inbox, to_writer:
            is_first = True
            async for envelope in inbox:
                sampled = envelope.event
                assert isinstance(sampled, TokensSampled)
                if is_first:
                    is_first = False
                    for event in self._prompt_events(sampled):
                        await to_writer.send(event)
                update = self._text.feed(sampled.token_ids, sampled.finish_reason, sampled.logprobs)
                if update.text or update.logprobs:
                    await to_writer.send(self._delta(update.text, update.logprobs))
                if update.finish_reason is not None:
                    if update.is_stopped_by_string:
                        on_stop_string(self.choice_idx)
                    await to_writer.send(
                        ChoiceFinished(
                            request_id=self.request_id,
                            choice_idx=self.choice_idx,
                            finish_reason=update.finish_reason,
                            num_tokens=self._text.num_tokens,
                        )
                    )
                    return

    def _prompt_events(self, first: TokensSampled) -> list[Event]:
        """vLLM's prompt_logprobs and the echoed prompt, both before the first token's text."""
        events: list[Event] = []
        entries = first.prompt_logprobs
        if self._report_prompt_logprobs and entries is not None:
            tokens = self._text.prompt_tokens(self._prompt_ids, entries)
            events.append(
                PromptLogprobs(
                    request_id=self.request_id, choice_idx=self.choice_idx, entries=tokens
                )
            )
        if self._echo_text is not None:
            echoed = None
            if self._text.wants_logprobs and entries is not None:
                echoed = self._text.echo_logprobs(self._prompt_ids, entries)
            events.append(self._delta(self._echo_text, echoed))
        return events

    def _delta(self, text: str, logprobs: tuple[TokenText, ...] | None) -> TextDelta:
        return TextDelta(
            request_id=self.request_id, choice_idx=self.choice_idx, text=text, logprobs=logprobs
        )
