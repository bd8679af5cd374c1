"""The engine's own events, about a model rather than a request: its steps, its idle
moments, and the changes of its state the admin routes ask for (no `request_id`)."""

from __future__ import annotations

from dataclasses import dataclass

from atom.vocabulary.event_base import Event
from atom.vocabulary.event_base import tagged as _tagged


@_tagged("engine_stepped")
@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStepped(Event):
    """One Batcher step ran; counts are for this step, usage is after it."""

    model: str = ""  # the served model's name ("" in logs from before several models)
    num_tokens: int
    num_seqs: int
    kv_cache_usage: float
    num_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int  # prompt tokens found cached, in memory or on disk
    prefix_cache_disk_hits: int = 0  # of those, the tokens read from the disk tier
    kv_disk_bytes_read: int = 0  # the disk tier's reads since the step before
    kv_disk_bytes_written: int = 0  # and its writes (the writer thread's, done by now)
    kv_disk_failures: int = 0  # block files that failed their check, writes that failed


@_tagged("prefix_cache_reset")
@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCacheReset(Event):
    """POST /reset_prefix_cache: the model's Batcher forgot the cached prefixes no
    running sequence holds, between two steps."""

    model: str = ""
    num_blocks: int = 0  # cached blocks forgotten


@_tagged("weights_updated")
@dataclass(frozen=True, slots=True, kw_only=True)
class WeightsUpdated(Event):
    """POST /update_weights_from_disk: the model's runner took new weights between two
    steps. Tokens sampled after this event come from them (replay names the version);
    every cached prefix was forgotten."""

    model: str = ""
    source: str  # the local path the weights were read from
    weight_version: str | None = None  # the client's label for them
    num_paused_requests: int = 0  # requests running across the swap (they continue)
    num_blocks: int = 0  # cached blocks forgotten


@_tagged("model_slept")
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSlept(Event):
    """POST /sleep took effect: nothing was running; the KV cache (level 1) or the
    weights too (level 2) were freed."""

    model: str = ""
    level: int


@_tagged("model_woke")
@dataclass(frozen=True, slots=True, kw_only=True)
class ModelWoke(Event):
    """POST /wake_up took effect: the KV cache is back (and the weights, reloaded from
    `source` after a level-2 sleep); queued requests are admitted again."""

    model: str = ""
    source: str | None = None  # set when the weights were read again


@_tagged("engine_idle")
@dataclass(frozen=True, slots=True, kw_only=True)
class EngineIdle(Event):
    """The Batcher has nothing to run; usage is what aborts since its last step left."""

    model: str = ""
    kv_cache_usage: float


@_tagged("lora_loaded")
@dataclass(frozen=True, slots=True, kw_only=True)
class LoraLoaded(Event):
    """A LoRA adapter is served on `model` under the name `lora` (a request naming it
    runs with it; its RequestReceived carries that name). Replaced, when it had that
    name already (load_inplace); then every cached prefix was forgotten."""

    model: str = ""
    lora: str
    path: str
    rank: int


@_tagged("lora_unloaded")
@dataclass(frozen=True, slots=True, kw_only=True)
class LoraUnloaded(Event):
    """The adapter `lora` is no longer served on `model`; every cached prefix was
    forgotten (a later adapter of the same name must not reuse its blocks)."""

    model: str = ""
    lora: str
