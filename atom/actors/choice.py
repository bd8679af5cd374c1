"""ChoiceStream: the per-choice pipeline task — sampled tokens in, text events out."""

from __future__ import annotations

from collections.abc import Callable

import trio

from atom.events import ChoiceFinished, Envelope, Event, TextDelta, TokensSampled, TokenText
from atom.text.choice import ChoiceText


class ChoiceStream:
    """One choice of one request. Owns its ChoiceText; nobody else touches it."""

    def __init__(self, *, request_id: str, choice_idx: int, text: ChoiceText) -> None:
        self.request_id = request_id
        self.choice_idx = choice_idx
        self._text = text

    async def run(
        self,
        inbox: trio.MemoryReceiveChannel[Envelope],
        to_writer: trio.MemorySendChannel[Event],
        *,
        on_stop_string: Callable[[int], None],
    ) -> None:
        """Consume until the choice finishes; `on_stop_string` frees the sequence early."""
        async with inbox, to_writer:
            async for envelope in inbox:
                sampled = envelope.event
                assert isinstance(sampled, TokensSampled)
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

    def _delta(self, text: str, logprobs: tuple[TokenText, ...] | None) -> TextDelta:
        return TextDelta(
            request_id=self.request_id, choice_idx=self.choice_idx, text=text, logprobs=logprobs
        )
