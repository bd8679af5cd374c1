"""A loaded Whisper: the model in its slots, its feature extractor and special tokens,
and what one window's work is on the device (its features, its start, a step)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    GenerationConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperTokenizer,
)

from atom.model.whisper.batch import WindowBatch
from atom.model.whisper.decoding import WhisperTokens, WindowDecode, whisper_tokens
from atom.model.whisper.slots import WhisperSlots


@dataclass(frozen=True, slots=True)
class WhisperRuntime:
    batch: WindowBatch
    extractor: WhisperFeatureExtractor
    tokenizer: WhisperTokenizer
    tokens: WhisperTokens

    @property
    def sample_rate(self) -> int:
        """The audio's samples a second that the model hears (16 kHz for Whisper)."""
        return int(self.extractor.sampling_rate)

    @property
    def max_tokens(self) -> int:
        return self.batch.slots.max_tokens

    def start(self, windows: list[WindowDecode], audio: list[np.ndarray]) -> None:
        """Encode windows of audio (16 kHz mono, at most 30 s each) into free slots."""
        found = self.extractor(audio, sampling_rate=self.sample_rate, return_tensors="pt")
        self.batch.start(windows, found.input_features)

    def decode(self, windows: list[WindowDecode], audio: list[np.ndarray]) -> None:
        """Start windows and step until every window has ended: in process, alone (the
        Transcriber steps its batch itself)."""
        self.start(windows, audio)
        while self.batch.num_active:
            self.batch.step()


def load_whisper(folder: Path, *, num_slots: int, device: str = "cpu") -> WhisperRuntime:
    """A transformers Whisper folder (atom/model/whisper/package.py makes one), float32
    on CPU, float16 on CUDA."""
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    model: Any = WhisperForConditionalGeneration.from_pretrained(folder, dtype=dtype)
    model = model.to(device)  # (transformers types `to` for other callers)
    tokenizer = WhisperTokenizer.from_pretrained(folder)
    tokens = whisper_tokens(tokenizer, GenerationConfig.from_pretrained(folder))
    return WhisperRuntime(
        batch=WindowBatch(WhisperSlots(model, num_slots=num_slots)),
        extractor=WhisperFeatureExtractor.from_pretrained(folder),
        tokenizer=tokenizer,
        tokens=tokens,
    )
