"""A transcription's events: the request (its audio by hash and size, never the bytes),
one event per 30-second window as it is decoded, and its end.

`atom replay` renders the same bytes from them as the live route did
(atom/projections/wire_audio.py): each window's event carries its text and segments,
so no tokenizer and no audio are needed to replay one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from atom.vocabulary.event_base import RequestEvent
from atom.vocabulary.event_base import tagged as _tagged
from atom.vocabulary.plan import Endpoint


class TranscriptFormat(StrEnum):
    """OpenAI's `response_format` of the audio routes."""

    JSON = "json"
    TEXT = "text"
    SRT = "srt"
    VTT = "vtt"
    VERBOSE_JSON = "verbose_json"


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptionPlan:
    """What a transcription or translation asks, validated once from its form."""

    endpoint: Endpoint  # TRANSCRIPTIONS or TRANSLATIONS
    response_format: TranscriptFormat = TranscriptFormat.JSON
    stream: bool = False
    language: str | None = None  # an ISO-639-1 code Whisper knows; None: detected
    temperature: float = 0.0
    seed: int | None = None
    segments: bool = False  # timestamps are decoded (srt, vtt, verbose_json)
    words: bool = False  # each word's time is found (timestamp_granularities[]=word)
    prompt_ids: tuple[int, ...] = ()  # the prompt's text tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioRef:
    """The uploaded file as the log keeps it: its content hash, size and name, and its
    bytes as base64 only with --request-log-audio."""

    sha256: str
    num_bytes: int
    filename: str = ""
    data: str | None = None


@_tagged("transcription_requested")
@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptionRequested(RequestEvent):
    """A transcription or translation passed validation (its first window decoded);
    `body` is the form's fields but the file, kept for audit only."""

    endpoint: Endpoint
    model: str
    created: int
    audio: AudioRef
    plan: TranscriptionPlan
    body: dict[str, Any] = field(default_factory=dict)
    owner: str | None = None  # the API key's fingerprint (atom/vocabulary/tenant.py); None: no keys


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedText:
    """One segment: from `start` to `end` seconds of the whole audio, its text and the
    tokens that said it."""

    start: float
    end: float
    text: str
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedWord:
    """A word, from `start` to `end` seconds of the whole audio."""

    word: str
    start: float
    end: float


@_tagged("window_transcribed")
@dataclass(frozen=True, slots=True, kw_only=True)
class WindowTranscribed(RequestEvent):
    """One window decoded: where it starts and how long it is (seconds of the audio),
    the language it was decoded in, its text, its segments (one when no timestamps were
    decoded), the tokens it chose and their mean log-probability, the temperature of the
    try kept, its text's compression ratio and the chance it holds no speech (a window
    judged silent has no text: atom/model/whisper/decoding.py)."""

    index: int
    start: float
    seconds: float
    language: str
    text: str
    segments: tuple[TimedText, ...]
    num_tokens: int
    avg_logprob: float
    temperature: float
    compression_ratio: float
    no_speech_prob: float
    words: tuple[TimedWord, ...] = ()  # when the plan asks them


@_tagged("transcription_finished")
@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptionFinished(RequestEvent):
    """Every window was decoded: the audio's length, its language (the first window's,
    by name: "english"), and the time it took."""

    seconds: float
    language: str
    latency_s: float
