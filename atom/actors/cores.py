"""What routes and request actors hold of a loaded model: its core, one frozen record a
model (a generation model's, a pooling model's or a speech model's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from atom.actors.batcher import Batcher
from atom.actors.bus import Clock, EventBus
from atom.actors.pooler import Pooler
from atom.actors.transcriber import Transcriber
from atom.model.catalog import ModelKind
from atom.model.lora.adapter import LoraAdapter
from atom.model.pooling import PoolingRuntime
from atom.model.runner import Runtime
from atom.model.vision.prompter import MediaPrompter
from atom.model.whisper.runtime import WhisperRuntime
from atom.projections.responses_store import ResponsesStore
from atom.vocabulary.tenant import EVERYONE, Tenant


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCore:
    """What request actors and routes use of a loaded generation model."""

    name: str  # the served model name
    bus: EventBus
    batcher: Batcher
    tokenizer: Any
    clock: Clock
    max_model_len: int
    max_prompt_chars: int  # a longer prompt text cannot fit: refused before tokenizing
    precompile: Callable[[str], object] | None = None
    load_weights: Callable[[str], Any] | None = None  # new weights from a path (Runtime's)
    responses: ResponsesStore | None = None  # the Responses API's store
    sse_ping_interval_s: float = 0.0  # an idle stream's keep-alive period (0: none)
    stream_interval: int = 1  # tokens a stream gathers before it sends
    stream_stall_timeout_s: float = 0.0  # a send the client does not take for this long aborts
    description: Mapping[str, str] = field(default_factory=dict)  # what loading chose
    # A PEFT folder read for this model (Runtime.read_lora); None: it cannot apply adapters.
    read_lora: Callable[[str, str], LoraAdapter] | None = None
    lora: str | None = None  # set on the core a request naming an adapter gets (Registry.core)
    tenant: Tenant = EVERYONE  # set on the core a request gets: whose stored state it reads
    images: MediaPrompter | None = None  # a vision-language model's (Runtime's); None: text


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolingCore:
    """What the pooling routes use of a loaded embedding, score or classify model."""

    name: str
    kind: ModelKind
    bus: EventBus
    pooler: Pooler
    tokenizer: Any
    clock: Clock
    max_model_len: int
    num_dimensions: int
    labels: tuple[str, ...] = ()
    is_matryoshka: bool = False
    description: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptionCore:
    """What the audio routes use of a loaded speech model (Whisper)."""

    name: str
    kind: ModelKind
    bus: EventBus
    transcriber: Transcriber
    runtime: WhisperRuntime  # its tokenizer and special tokens (the model is the actor's)
    clock: Clock
    max_model_len: int  # the decoder's context a window (448 for Whisper)
    max_audio_seconds: float  # longer audio is refused (--max-audio-seconds)
    log_audio: bool = False  # the request log keeps the file (--request-log-audio)
    description: Mapping[str, str] = field(default_factory=dict)


Core = EngineCore | PoolingCore | TranscriptionCore
Loaded = Runtime | PoolingRuntime | WhisperRuntime
