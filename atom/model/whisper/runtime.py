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

from atom.model.catalog import EMBEDDED, ModelSpec
from atom.model.whisper.alignment import Aligner
from atom.model.whisper.batch import WindowBatch
from atom.model.whisper.decoding import WhisperTokens, WindowDecode, whisper_tokens
from atom.model.whisper.package import transformers_folder
from atom.model.whisper.slots import WhisperSlots
from atom.progress import quiet_library_bars
from atom.vocabulary.config import Settings

# Windows a loaded Whisper decodes at once: each slot holds its window's keys and
# values (about 48 MB for Whisper base in float32), so at most this many, fewer when
# --max-num-seqs is lower.
MAX_SLOTS = 8


@dataclass(frozen=True, slots=True)
class WhisperRuntime:
    batch: WindowBatch
    extractor: WhisperFeatureExtractor
    tokenizer: WhisperTokenizer
    tokens: WhisperTokens
    description: dict[str, str]  # what loading chose (/v1/models, the start-up log)

    @property
    def sample_rate(self) -> int:
        """The audio's samples a second that the model hears (16 kHz for Whisper)."""
        return int(self.extractor.sampling_rate)

    @property
    def max_tokens(self) -> int:
        return self.batch.slots.max_tokens

    @property
    def times_words(self) -> bool:
        """The model names alignment heads: its windows can find their words' times."""
        return self.batch.aligner is not None

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


def load_speech(settings: Settings, spec: ModelSpec) -> WhisperRuntime:
    """A served speech model: the packaged Whisper base (converted on first use, under
    --cache-dir), or a transformers Whisper folder given with --model."""
    quiet_library_bars()
    packaged = spec.source in EMBEDDED
    folder = transformers_folder(settings.cache_dir) if packaged else Path(spec.source)
    device = settings.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return load_whisper(folder, num_slots=min(settings.max_num_seqs, MAX_SLOTS), device=device)


def load_whisper(folder: Path, *, num_slots: int, device: str = "cpu") -> WhisperRuntime:
    """A transformers Whisper folder (atom/model/whisper/package.py makes one), float32
    on CPU, float16 on CUDA."""
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    model: Any = WhisperForConditionalGeneration.from_pretrained(folder, dtype=dtype)
    return whisper_runtime(model.to(device), folder, num_slots=num_slots)


def whisper_runtime(
    model: WhisperForConditionalGeneration, folder: Path, *, num_slots: int
) -> WhisperRuntime:
    """`model` in `num_slots` slots, with the tokenizer, special tokens and feature
    extractor of `folder`."""
    tokenizer = WhisperTokenizer.from_pretrained(folder)
    generation = GenerationConfig.from_pretrained(folder)
    tokens = whisper_tokens(tokenizer, generation)
    heads = getattr(generation, "alignment_heads", None)
    aligner = (
        Aligner(tuple((int(layer), int(head)) for layer, head in heads), tokenizer.decode)
        if heads
        else None
    )
    weight = model.model.decoder.embed_tokens.weight
    return WhisperRuntime(
        batch=WindowBatch(WhisperSlots(model, num_slots=num_slots), tokenizer.decode, aligner),
        extractor=WhisperFeatureExtractor.from_pretrained(folder),
        tokenizer=tokenizer,
        tokens=tokens,
        description={
            "device": str(weight.device),
            "dtype": str(weight.dtype).removeprefix("torch."),
            "windows_at_once": str(num_slots),
        },
    )
