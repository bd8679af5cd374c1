"""Windows of audio decoding together: each holds a slot of one `WhisperSlots` from its
encoding to its end, and every step feeds all of them in one forward. Windows start
between steps as slots free up, so a transcription that arrives while others decode
joins their batch at the next step (the Transcriber actor drives it). A window that
fails OpenAI's thresholds starts over in its own slot, one temperature step higher
(decoding.py's `finish`), its audio encoded once."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from atom.model.whisper.alignment import Aligner
from atom.model.whisper.decoding import WindowDecode
from atom.model.whisper.slots import WhisperSlots


class WindowBatch:
    def __init__(
        self,
        slots: WhisperSlots,
        decode: Callable[[Sequence[int]], str],
        aligner: Aligner | None = None,
    ) -> None:
        """`decode`: text tokens to text (a window's is judged by it). `aligner`: the
        model's alignment heads, for windows that ask their words' times (None: the
        model names none)."""
        self.slots = slots
        self.aligner = aligner
        self._decode = decode
        self._free = list(range(slots.num_slots))
        self._feeds: dict[int, tuple[WindowDecode, list[int]]] = {}  # slot → (window, next feed)

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_active(self) -> int:
        return len(self._feeds)

    def start(self, windows: list[WindowDecode], features: torch.Tensor) -> None:
        """Encode windows (features [len(windows), mel bins, 3000]) into free slots."""
        if len(windows) > len(self._free):
            raise ValueError(f"{len(windows)} windows, {len(self._free)} free slots")
        taken = [self._free.pop() for _ in windows]
        self.slots.encode(taken, features)
        for slot, window in zip(taken, windows, strict=True):
            self._feeds[slot] = (window, window.first_feed())

    def drop(self, window: WindowDecode) -> None:
        """Stop a window before its end (its caller left); its slot is free again."""
        for slot, (held, _) in list(self._feeds.items()):
            if held is window:
                del self._feeds[slot]
                self._free.append(slot)

    def step(self) -> list[WindowDecode]:
        """One forward of every active window; returns those that ended (their slots free)."""
        if not self._feeds:
            return []
        slots = list(self._feeds)
        logits = self.slots.step(slots, [self._feeds[s][1] for s in slots])
        done = []
        for slot, row in zip(slots, logits, strict=True):
            window = self._feeds[slot][0]
            feed = window.take(row)
            if feed is None and window.finish(self._text(window)):
                self.slots.restart(slot)
                feed = window.first_feed()
            if feed is None:
                if window.task.words and self.aligner is not None:
                    window.words = self.aligner.words(self.slots, slot, window)
                del self._feeds[slot]
                self._free.append(slot)
                done.append(window)
            else:
                self._feeds[slot] = (window, feed)
        return done

    def _text(self, window: WindowDecode) -> str:
        return self._decode([t for t in window.generated if t < window.tokens.end_of_text])
