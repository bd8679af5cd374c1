"""ChoiceText: one choice's text state — token ids in, output text and finish reason out.

Pure and synchronous, so the actor pipeline and projection replay run the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from atom.events import FinishReason
from atom.text.detokenizer import Decoder, IncrementalDetokenizer
from atom.text.stop import StopMatcher


@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceUpdate:
    text: str
    finish_reason: FinishReason | None
    is_stopped_by_string: bool = False


class ChoiceText:
    """Feed each step's tokens; mutates itself only. After a finish, feeding is an error."""

    def __init__(self, decoder: Decoder, *, stop: Sequence[str] = ()) -> None:
        self._detokenizer = IncrementalDetokenizer(decoder)
        self._stop = StopMatcher(stop)
        self.num_tokens = 0
        self.finish_reason: FinishReason | None = None

    def feed(self, token_ids: Sequence[int], finish_reason: FinishReason | None) -> ChoiceUpdate:
        if self.finish_reason is not None:
            raise ValueError("this choice already finished")
        self.num_tokens += len(token_ids)
        text = self._detokenizer.push(token_ids)
        if finish_reason is not None:
            text += self._detokenizer.flush()
        result = self._stop.push(text)
        if result.is_stopped:
            self.finish_reason = FinishReason.STOP
            return ChoiceUpdate(
                text=result.text, finish_reason=self.finish_reason, is_stopped_by_string=True
            )
        if finish_reason is not None:
            self.finish_reason = finish_reason
            return ChoiceUpdate(text=result.text + self._stop.flush(), finish_reason=finish_reason)
        return ChoiceUpdate(text=result.text, finish_reason=None)
