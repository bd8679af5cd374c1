"""ChoiceStream: the per-choice pipeline task — sampled tokens in, text events out."""

from __future__ import annotations

from collections.abc import Callable

import trio

from atom.text.pipeline import ChoicePipeline
from atom.vocabulary.events import Envelope, Event, TokensSampled


class ChoiceStream:
    """One choice of one request. Owns its ChoicePipeline; nobody else touches it."""

    def __init__(self, pipeline: ChoicePipeline, choice_idx: int) -> None:
        self._pipeline = pipeline
        self.choice_idx = choice_idx

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
                for event in self._pipeline.feed(sampled):
                    await to_writer.send(event)
                if self._pipeline.is_finished:
                    if self._pipeline.is_stopped_by_string:
                        on_stop_string(self.choice_idx)
                    return
