"""How a loaded model becomes its actor and its core: a generation model's Batcher (over a
Scheduler and KV bookkeeping sized to the runner's cache) and EngineCore, a pooling
model's Pooler and PoolingCore, a speech model's Transcriber and TranscriptionCore.
Models (atom/actors/models.py) serves what this makes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import structlog

from atom.actors.batcher import Batcher
from atom.actors.bus import Clock, EventBus
from atom.actors.cores import Core, EngineCore, Loaded, PoolingCore, TranscriptionCore
from atom.actors.device import DeviceThread
from atom.actors.pooler import Pooler
from atom.actors.profiler import Phases
from atom.actors.transcriber import Transcriber
from atom.model.catalog import ModelKind, ModelSpec
from atom.model.pooling import PoolingRuntime
from atom.model.runner import Runtime
from atom.model.scheduling.kv_cache import KVCacheManager, KVChange
from atom.model.scheduling.scheduler import Scheduler
from atom.model.whisper.runtime import WhisperRuntime
from atom.projections.responses_store import ResponsesStore
from atom.text.prompt import max_token_chars
from atom.vocabulary.config import Settings

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorParts:
    """What every model's actor and core share."""

    settings: Settings
    bus: EventBus
    clock: Clock
    responses: ResponsesStore
    phases: Phases | None
    kv_events: Callable[[KVChange], None] | None = None  # atom/actors/kv_events.py


Actor = Batcher | Pooler | Transcriber


def make_actor(
    parts: ActorParts, spec: ModelSpec, loaded: Loaded, device: DeviceThread
) -> tuple[Actor, Core]:
    """The model's actor and the core the routes use of it."""
    if isinstance(loaded, PoolingRuntime):
        return _pooler(parts, spec, loaded, device)
    if isinstance(loaded, WhisperRuntime):
        return _transcriber(parts, spec, loaded, device)
    batcher = _batcher(parts, spec.name, loaded, device)
    core = EngineCore(
        name=spec.name,
        bus=parts.bus,
        batcher=batcher,
        tokenizer=loaded.tokenizer,
        clock=parts.clock,
        max_model_len=loaded.max_model_len,
        max_prompt_chars=loaded.max_model_len * max_token_chars(loaded.tokenizer),
        precompile=loaded.precompile,
        load_weights=loaded.load_weights,
        responses=parts.responses,
        description=loaded.description,
        sse_ping_interval_s=parts.settings.sse_ping_interval,
        stream_interval=parts.settings.stream_interval,
        stream_stall_timeout_s=parts.settings.stream_stall_timeout,
        read_lora=loaded.read_lora,
        images=loaded.images,
    )
    return batcher, core


def _pooler(
    parts: ActorParts, spec: ModelSpec, loaded: PoolingRuntime, device: DeviceThread
) -> tuple[Pooler, PoolingCore]:
    pooler = Pooler(
        loaded.runner,
        device=device,
        max_num_batched_tokens=parts.settings.max_num_batched_tokens,
        max_queued_requests=parts.settings.max_queued_requests,
    )
    core = PoolingCore(
        name=spec.name,
        kind=loaded.kind,
        bus=parts.bus,
        pooler=pooler,
        tokenizer=loaded.tokenizer,
        clock=parts.clock,
        max_model_len=loaded.max_model_len,
        num_dimensions=loaded.num_dimensions,
        labels=loaded.labels,
        is_matryoshka=loaded.is_matryoshka,
        description=loaded.description,
    )
    return pooler, core


def _transcriber(
    parts: ActorParts, spec: ModelSpec, loaded: WhisperRuntime, device: DeviceThread
) -> tuple[Transcriber, TranscriptionCore]:
    transcriber = Transcriber(
        loaded, device=device, max_queued_requests=parts.settings.max_queued_requests
    )
    core = TranscriptionCore(
        name=spec.name,
        kind=ModelKind.TRANSCRIBE,
        bus=parts.bus,
        transcriber=transcriber,
        runtime=loaded,
        clock=parts.clock,
        max_model_len=loaded.max_tokens,
        max_audio_seconds=parts.settings.max_audio_seconds,
        log_audio=parts.settings.request_log_audio,
        description=loaded.description,
    )
    return transcriber, core


def _batcher(parts: ActorParts, name: str, runtime: Runtime, device: DeviceThread) -> Batcher:
    """The Batcher over a Scheduler and KV bookkeeping sized to the runner's cache."""
    s, runner = parts.settings, runtime.runner
    max_concurrency = round(runner.num_blocks * runner.block_size / runtime.max_model_len, 2)
    log.info("engine_ready", model=name, max_model_len=runtime.max_model_len,
             max_num_seqs=s.max_num_seqs, num_kv_blocks=runner.num_blocks,
             block_size=runner.block_size, max_concurrency=max_concurrency)  # fmt: skip
    kv = KVCacheManager(
        num_blocks=runner.num_blocks,
        block_size=runner.block_size,
        enable_prefix_caching=s.enable_prefix_caching,
        on_change=parts.kv_events,
        spill=runtime.disk is not None,
    )
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=runtime.max_model_len,
        by_priority=s.scheduling_policy == "priority",
        speculation=parts.settings.speculative,
        draft=runtime.draft,
        max_loras=s.max_loras,
    )
    return Batcher(
        runner,
        scheduler,
        publish=parts.bus.publish,
        max_queued_requests=s.max_queued_requests,
        max_queue_wait_s=s.max_queue_wait,
        device=device,
        model=name,
        reject_while_asleep=s.while_asleep == "reject",
        phases=parts.phases,
        disk=runtime.disk,
        overlap=_overlaps(s, runtime),
    )


def _overlaps(settings: Settings, runtime: Runtime) -> bool:
    """Overlapped steps (--async-scheduling); unset, on where the runner steps on a CUDA
    device (a CPU's steps take the cores the event loop would work on meanwhile)."""
    if settings.async_scheduling is not None:
        return settings.async_scheduling
    return runtime.description.get("device", "").startswith("cuda")
