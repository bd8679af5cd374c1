"""Stop strings with hold-back: text that could be the start of a stop string waits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class StopResult:
    text: str  # safe to emit now
    is_stopped: bool  # a stop string was found; nothing after it is ever emitted
    stop: str | None = None  # the stop string found


class StopMatcher:
    """Feed text pieces; emits what cannot be part of a stop string. The stop string itself
    never appears in the output."""

    def __init__(self, stop: Sequence[str], *, include_stop: bool = False) -> None:
        self._stop = tuple(s for s in stop if s)
        self._include_stop = include_stop
        self._held = ""
        self.is_stopped = False

    def push(self, text: str) -> StopResult:
        if self.is_stopped:
            return StopResult(text="", is_stopped=True)
        buffer = self._held + text
        hit = self._first_hit(buffer)
        if hit is not None:
            self.is_stopped = True
            self._held = ""
            start, end = hit
            kept = buffer[: end if self._include_stop else start]
            return StopResult(text=kept, is_stopped=True, stop=buffer[start:end])
        keep = self._partial_suffix_len(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return StopResult(text=buffer[: len(buffer) - keep], is_stopped=False)

    @property
    def has_stops(self) -> bool:
        return bool(self._stop)

    def flush(self) -> str:
        """The held-back tail, at the end of the choice (no stop string completed)."""
        held, self._held = self._held, ""
        return held

    def _first_hit(self, buffer: str) -> tuple[int, int] | None:
        """(start, end) of the stop string that completes first (ends earliest)."""
        hits = [(i + len(s), i) for s in self._stop if (i := buffer.find(s)) >= 0]
        if not hits:
            return None
        end, start = min(hits)
        return start, end

    def _partial_suffix_len(self, buffer: str) -> int:
        """Length of the longest suffix of `buffer` that is a proper prefix of a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(buffer)), best, -1):
                if buffer.endswith(s[:n]):
                    best = n
                    break
        return best
