"""Settings: one frozen record; `atom serve --flag` and `ATOM_FLAG` map onto the same fields."""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from atom.vocabulary.choices import (
    CpuKernels,
    KVCacheDtype,
    LogFormat,
    LogLevel,
    LoraModule,
    MediaLimits,
    ModelImpl,
    Quantization,
    ReasoningParser,
    RouterPolicy,
    SchedulingPolicy,
    ToolCallParser,
    VideoSampling,
    WhileAsleep,
    json_object,
    lora_modules,
    media_per_prompt,
    video_sampling,
    word,
)
from atom.vocabulary.kv_events import KVEventsConfig, parse_kv_events_config
from atom.vocabulary.speculative import SpeculativeConfig, parse_speculative_config


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Server settings. `model` is repeatable: one server serves several models
    (atom/model/catalog.py); empty, it serves the embedded default models."""

    model: tuple[str, ...] = ()
    served_model_name: tuple[str, ...] = ()  # by position, one name per --model
    max_model_len: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    kv_cache_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False  # CUDA: no decode graphs (atom/model/forward/graphs.py)
    async_scheduling: bool | None = None  # overlapped steps; unset: on CUDA only (ahead.py)
    enable_prefix_caching: bool = True
    prefix_cache_dir: str | None = None  # a disk tier for the prefix cache (atom/model/kv_tier.py)
    prefix_cache_disk_bytes: int = 10 << 30  # its bound, least recently used out
    speculative_config: str | None = None  # a JSON object, as vLLM's: see `speculative`
    enable_lora: bool = False  # serve LoRA adapters (docs/lora.md)
    lora_modules: tuple[str, ...] = ()  # name=path, or vLLM's JSON object: see `loras`
    max_loras: int = 1  # adapters one step may mix (vLLM's default)
    max_lora_rank: int = 16  # the largest rank an adapter may have (vLLM's default)
    quantization: Quantization = Quantization.AUTO
    kv_cache_dtype: KVCacheDtype = KVCacheDtype.AUTO
    cpu_kernels: CpuKernels = CpuKernels.AUTO
    model_impl: ModelImpl = ModelImpl.AUTO
    tool_call_parser: ToolCallParser | None = None
    reasoning_parser: ReasoningParser | None = None
    reasoning_budget: int | None = None  # reasoning tokens a chat answer may spend by default
    default_chat_template_kwargs: str | None = None  # a JSON object: see `chat_template_kwargs`
    exclude_tools_when_tool_choice_none: bool = False
    trust_request_chat_template: bool = False  # a request may bring its own chat_template
    allowed_local_media_path: str | None = None  # file:// images only under this folder
    allowed_media_domains: tuple[str, ...] = ()  # hosts images may be fetched from ("*": any)
    limit_mm_per_prompt: str | None = None  # vLLM's {"image": 4, "audio": 1}: `media_limits`
    media_io_kwargs: str | None = None  # vLLM's {"video": {"num_frames": 32}}: `video`
    media_fetch_timeout: float = 5.0  # seconds an image fetch may take
    max_media_bytes: int = 20 * 1024 * 1024  # a larger image is a 400
    max_image_pixels: int = 4096 * 4096  # a larger image is a 400, refused before decoding
    max_audio_seconds: float = 3600.0  # longer audio is a 400, refused as soon as it is seen
    max_queued_requests: int = 256
    scheduling_policy: SchedulingPolicy = SchedulingPolicy.FCFS  # priority: by request
    max_queue_wait: float = 120.0  # seconds in the queue before a 503
    body_timeout: float = 30.0  # seconds for a request body to arrive before a 408
    max_request_body_bytes: int = 32 * 1024 * 1024  # a larger body is a 413
    max_n: int = 16
    shutdown_timeout: float = 30.0  # seconds running requests may finish after SIGTERM
    sse_ping_interval: float = 15.0  # an idle stream sends a keep-alive this often (0: off)
    stream_interval: int = 1  # a stream sends once this many tokens are sampled (vLLM's)
    stream_stall_timeout: float = 60.0  # a response the client stops reading is aborted (0: off)
    watchdog_timeout: float = 300.0  # a model call running longer is fatal (0: no watchdog)
    while_asleep: WhileAsleep = WhileAsleep.REJECT  # after POST /sleep: 503, or queued
    profile_dir: str | None = None  # POST /start_profile writes traces here (else 404)
    responses_store_max: int = 1000  # stored Responses API responses
    data_dir: str | None = None  # the Batch API's files and batches (a temporary one if unset)
    responses_store_dir: str | None = None  # shared by replicas (atom/log/shared_responses.py)
    models_max: int | None = None  # loaded models at once; loading more unloads the LRU
    enable_admin_routes: bool = False  # admin routes without API keys (else a 403)
    api_key: tuple[str, ...] = ()  # clients must send one of them (Bearer or x-api-key)
    api_key_file: str | None = None  # more keys, one a line
    admin_api_key: tuple[str, ...] = ()  # keys that see every key's state; admin routes
    protect_metrics: bool = False  # /metrics needs a key too
    allowed_origins: tuple[str, ...] = ("*",)  # CORS, as vLLM
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False
    ssl_certfile: str | None = None  # TLS (atom serve hands these to hypercorn)
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None  # client certificates are then required
    request_log: str | None = None
    request_log_audio: bool = False  # a transcription's file in the log too (base64)
    crash_dump_dir: str | None = None  # a fatal error writes the last minutes of events here
    no_webui: bool = False  # GET / serves no chat page
    cache_dir: str = str(Path.home() / ".cache" / "atom")
    data_parallel_size: int = 1  # replicas behind sglang-router (docs/scaling.md)
    tensor_parallel_size: int = 1  # ranks one model is split across (docs/scaling.md)
    data_parallel_rank: int = 0  # this replica's rank (the launcher sets it)
    kv_events_config: str | None = None  # vLLM's JSON: see `kv_events`
    router_policy: RouterPolicy = RouterPolicy.CACHE_AWARE  # how the router picks one
    device: str | None = None
    dtype: str | None = None
    num_threads: int | None = None
    log_level: LogLevel = LogLevel.INFO
    log_format: LogFormat = LogFormat.JSON
    # Parsed from the JSON-valued settings above when the record is made (never re-read).
    speculative: SpeculativeConfig | None = field(init=False, compare=False, default=None)
    kv_events: KVEventsConfig | None = field(init=False, compare=False, default=None)
    loras: tuple[LoraModule, ...] = field(init=False, compare=False, default=())
    chat_template_kwargs: Mapping[str, Any] = field(init=False, compare=False, default_factory=dict)
    media_limits: MediaLimits = field(init=False, compare=False, default_factory=MediaLimits)
    video: VideoSampling = field(init=False, compare=False, default_factory=VideoSampling)

    def __post_init__(self) -> None:
        """Every setting checked once, here: words become their enums, JSON its records;
        a ValueError names the flag and its variable, however the value came in."""
        for f in setting_fields():
            with naming(f.name):
                kind = _HINTS[f.name]
                value = getattr(self, f.name)
                if isinstance(kind, type) and issubclass(kind, StrEnum) and value is not None:
                    object.__setattr__(self, f.name, word(kind, value))
        parsed: dict[str, tuple[str, Callable[[Any], Any]]] = {
            "speculative": ("speculative_config", parse_speculative_config),
            "kv_events": ("kv_events_config", parse_kv_events_config),
            "loras": ("lora_modules", lora_modules),
            "chat_template_kwargs": ("default_chat_template_kwargs", _read_only_object),
            "media_limits": ("limit_mm_per_prompt", media_per_prompt),
            "video": ("media_io_kwargs", video_sampling),
        }
        for name, (source, parse) in parsed.items():
            with naming(source):
                object.__setattr__(self, name, parse(getattr(self, source)))
        _check_together(self)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read `ATOM_<FIELD>` variables; unset ones keep their defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in setting_fields():
            raw = env.get(f"ATOM_{f.name.upper()}")
            if raw is not None and raw != "":
                with naming(f.name):
                    values[f.name] = _parse(f, raw)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The `ATOM_*` variables that reproduce these settings (for hypercorn's import)."""
        return {
            f"ATOM_{f.name.upper()}": _unparse(getattr(self, f.name))
            for f in setting_fields()
            if getattr(self, f.name) is not None
        }


def setting_fields() -> tuple[dataclasses.Field[Any], ...]:
    """The settings a flag and a variable give (not the records parsed from them)."""
    return tuple(f for f in fields(Settings) if f.init)


def _without_none(hint: Any) -> Any:
    """`X | None` as `X`; any other hint as it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


_HINTS = {name: _without_none(hint) for name, hint in typing.get_type_hints(Settings).items()}


def is_switch(f: dataclasses.Field[Any]) -> bool:
    """A true/false setting (maybe unset): its flag alone means true (`--no-webui`)."""
    return _HINTS[f.name] is bool


@contextmanager
def naming(name: str) -> Iterator[None]:
    """A ValueError raised inside names the setting as a flag and as a variable."""
    try:
        yield
    except ValueError as error:
        flag = f"--{name.replace('_', '-')} (ATOM_{name.upper()})"
        raise ValueError(f"{flag}: {error}") from None


def _read_only_object(raw: str | None) -> Mapping[str, Any]:
    return MappingProxyType(json_object(raw))


def _check_together(settings: Settings) -> None:
    """Settings that only mean something with another."""
    if settings.reasoning_budget is not None and settings.reasoning_parser is None:
        raise ValueError("--reasoning-budget needs --reasoning-parser")
    if settings.loras and not settings.enable_lora:
        raise ValueError("--lora-modules needs --enable-lora")
    if settings.max_loras < 1 or settings.max_lora_rank < 1:
        raise ValueError("--max-loras and --max-lora-rank must be at least 1")
    if settings.data_parallel_size < 1:
        raise ValueError("--data-parallel-size must be at least 1")
    _check_tensor_parallel(settings)
    if settings.data_parallel_size > 1 and settings.ssl_ca_certs:
        raise ValueError("--ssl-ca-certs: the router in front of replicas checks no client "
                         "certificates; serve one process, or check them in a proxy")  # fmt: skip
    if settings.prefix_cache_dir and not settings.enable_prefix_caching:
        raise ValueError("--prefix-cache-dir needs --enable-prefix-caching")
    if settings.stream_interval < 1:
        raise ValueError("--stream-interval must be at least 1")
    if any(not key.strip() for key in [*settings.api_key, *settings.admin_api_key]):
        raise ValueError("--api-key / --admin-api-key: a key may not be empty or blank")


def _check_tensor_parallel(settings: Settings) -> None:
    """What a model split across ranks does not serve yet."""
    if settings.tensor_parallel_size < 1:
        raise ValueError("--tensor-parallel-size must be at least 1")
    if settings.tensor_parallel_size == 1:
        return
    for refused, what in (
        (settings.enable_lora, "LoRA adapters (--enable-lora)"),
        (settings.speculative_config, "speculative decoding (--speculative-config)"),
        (settings.data_parallel_size > 1, "--data-parallel-size above 1"),
        (settings.prefix_cache_dir, "a prefix cache on disk (--prefix-cache-dir)"),
    ):
        if refused:
            raise ValueError(f"--tensor-parallel-size above 1 does not serve {what} yet")


def unknown_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """`ATOM_*` variables that name no setting (a typo would otherwise be ignored)."""
    env = os.environ if environ is None else environ
    known = {f"ATOM_{f.name.upper()}" for f in setting_fields()}
    return sorted(name for name in env if name.startswith("ATOM_") and name not in known)


# One line a setting, for `atom serve --help` (docs/configuration.md has the long form).
HELP = {
    "model": "a local Hugging Face folder, a .gguf file or an embedded model's name; "
    "repeatable (default: SmolLM2-135M-Instruct and all-MiniLM-L6-v2)",
    "served_model_name": "the name clients send for the --model at the same position",
    "max_model_len": "context limit, prompt + completion (default: the model's)",
    "max_num_seqs": "sequences in the running batch",
    "max_num_batched_tokens": "token budget of one step; longer prompts are chunked",
    "block_size": "tokens per KV-cache block",
    "kv_cache_memory_bytes": "size of the paged KV cache (default: 2 GiB on CPU)",
    "gpu_memory_utilization": "CUDA: share of device memory the process may use",
    "enforce_eager": "CUDA: run every step eagerly, capturing no decode graphs (vLLM's)",
    "async_scheduling": "plan decodes while the device steps (vLLM's); unset: on for CUDA only",
    "enable_prefix_caching": "reuse KV blocks of identical prompt prefixes",
    "prefix_cache_dir": "keep evicted prefix-cache blocks in this folder, across restarts",
    "prefix_cache_disk_bytes": "the most the prefix cache's disk tier holds (default 10 GiB)",
    "speculative_config": "speculative decoding, vLLM's JSON: "
    '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}',
    "enable_lora": "serve LoRA adapters (--lora-modules, POST /v1/load_lora_adapter)",
    "lora_modules": "a LoRA adapter to serve: name=path or "
    '{"name": ..., "path": ..., "base_model_name": ...}; repeatable',
    "max_loras": "LoRA adapters one step may mix (requests of others wait)",
    "max_lora_rank": "the largest LoRA rank accepted",
    "quantization": "CPU weights: auto (a GGUF's quantized tensors on integer kernels in "
    "their own block format), off (float32), int8 or int4",
    "kv_cache_dtype": "KV cache element type: auto (float16 when layers run quantized, "
    "as llama.cpp's default; else the model's dtype), float32, float16 or bfloat16",
    "cpu_kernels": "ATOM's C++ CPU kernels: auto, on or off",
    "model_impl": "forward implementation: auto, atom or transformers",
    "tool_call_parser": "tool-call parser name (docs/parsers.md)",
    "reasoning_parser": "reasoning parser name (docs/parsers.md)",
    "reasoning_budget": "default thinking_token_budget: reasoning tokens before the end is forced",
    "default_chat_template_kwargs": "JSON object of chat-template variables",
    "exclude_tools_when_tool_choice_none": "leave tools out of the template for tool_choice none",
    "trust_request_chat_template": "accept a chat_template (Jinja) in a request",
    "allowed_local_media_path": "file:// image, video and audio URLs are read only under "
    "this folder (default: refused)",
    "allowed_media_domains": "hosts http(s) media URLs may be fetched from, a JSON list or "
    'comma-separated; ["*"] allows any (default: refused)',
    "limit_mm_per_prompt": "images, videos and audio clips one prompt may hold, vLLM's "
    'JSON: {"image": 4, "video": 1, "audio": 2} (default 8, 1 and 4)',
    "media_io_kwargs": 'how a video part is sampled, vLLM\'s JSON: {"video": {"fps": 2, '
    '"num_frames": 32}} (those are the defaults)',
    "media_fetch_timeout": "seconds a request's http(s) media may take to fetch, all told",
    "max_media_bytes": "largest image, video or audio file accepted, in bytes",
    "max_image_pixels": "largest image accepted, width x height",
    "max_audio_seconds": "longest audio a transcription (or a chat's audio part) accepts, "
    "in seconds; longer is a 400",
    "max_queued_requests": "requests that may wait for admission; then a 429",
    "scheduling_policy": "fcfs (arrival order) or priority (a request's priority, then arrival)",
    "max_queue_wait": "seconds a request may wait in the queue; then a 503",
    "while_asleep": "after POST /sleep new requests get a 503 (reject) or wait (wait)",
    "profile_dir": "enable POST /start_profile and /stop_profile; traces are written here",
    "responses_store_max": "finished /v1/responses responses kept (least recently used out)",
    "data_dir": "where the Batch API keeps its files and batches, so a batch resumes after "
    "a restart (default: a temporary folder of this process)",
    "responses_store_dir": "a folder where every replica writes its stored /v1/responses "
    "responses and reads the others' (default: each process keeps its own; "
    "--data-parallel-size makes one for its replicas)",
    "models_max": "models loaded at once (POST /models/load unloads the least recently used)",
    "enable_admin_routes": "allow admin routes (model load/unload) when no API key is set",
    "api_key": "a key clients must send (Authorization: Bearer KEY or x-api-key); repeatable",
    "api_key_file": "a file of keys, one a line",
    "admin_api_key": "a key that may read every key's stored responses and request views; "
    "once set, admin routes need it; repeatable",
    "protect_metrics": "/metrics needs a key too",
    "allowed_origins": "CORS: origins allowed, a JSON list or comma-separated",
    "allowed_methods": "CORS: methods allowed",
    "allowed_headers": "CORS: request headers allowed",
    "allow_credentials": "CORS: allow credentials",
    "ssl_certfile": "TLS certificate (PEM) for atom serve",
    "ssl_keyfile": "TLS private key (PEM) for atom serve",
    "ssl_ca_certs": "CA certificates (PEM): clients must present a certificate they sign",
    "body_timeout": "seconds for a request body to arrive whole; then a 408",
    "max_request_body_bytes": "largest request body accepted, in bytes; a larger one is a 413",
    "max_n": "largest n accepted",
    "shutdown_timeout": "seconds running requests may finish after SIGTERM (0: abort at once)",
    "sse_ping_interval": "seconds an idle stream waits before a keep-alive comment (0: off)",
    "stream_interval": "tokens a stream gathers before it sends (its deltas as one chunk); "
    "a client that reads slower gets what gathered meanwhile as one chunk too",
    "stream_stall_timeout": "seconds a response may wait on a client that stops reading; "
    "then the request is aborted (0: off)",
    "watchdog_timeout": "seconds a model step may run before the server fails loudly (0: off)",
    "request_log": "JSONL event log path (default: off); also feeds the web page's request view",
    "request_log_audio": "keep each transcription's audio file in the request log (base64), "
    "not only its hash and size",
    "no_webui": "serve no web page at / (the chat, engine and request views)",
    "crash_dump_dir": "on a fatal error, write the last 5 minutes of events here as a "
    "request log (atom replay reads it); kept in memory meanwhile (default: off)",
    "cache_dir": "where dequantized GGUF copies are kept (and built kernels, where the "
    "installation is read-only)",
    "data_parallel_size": "engine replicas, each a process with its share of the cores or "
    "its own GPU, behind sglang-router on --port (docs/scaling.md)",
    "tensor_parallel_size": "ranks one model is split across: each holds 1/N of every "
    "layer's heads and MLP (processes, gloo on CPU, NCCL on CUDA; docs/scaling.md)",
    "data_parallel_rank": "this replica's rank among --data-parallel-size replicas (the "
    "launcher sets it; it offsets the KV-events ports)",
    "kv_events_config": "publish KV-cache events for a KV-aware router, vLLM's JSON: "
    '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557"}',
    "router_policy": "how the router picks a replica: cache_aware (the one whose prompts "
    "share the longest prefix, unless the load is uneven), round_robin, power_of_two or random",
    "device": "torch device (default: cuda if available, else cpu)",
    "dtype": "weight dtype (default: bfloat16 on CUDA, float32 on CPU)",
    "num_threads": "torch intra-op threads (default: torch's)",
    "log_level": "structlog level",
    "log_format": "json (one object a line) or console",
}


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    kind = str(f.type)
    if kind.startswith("int"):
        return int(raw)
    if kind.startswith("float"):
        return float(raw)
    if kind.startswith("bool"):
        if raw.lower() not in _BOOLS:
            raise ValueError(f"expected true or false, got {raw!r}")
        return _BOOLS[raw.lower()]
    if kind.startswith("tuple"):
        return parse_list(raw)
    return raw


def parse_list(raw: str) -> tuple[str, ...]:
    """vLLM's JSON form (`'["a", "b"]'`) or a plain comma-separated list. A JSON object
    (`--lora-modules '{"name": ...}'`), alone or in the list, is one entry, kept as JSON."""
    text = raw.lstrip()
    if text.startswith("{"):
        return (raw,)
    if text.startswith("["):
        value = json.loads(raw)
        if not isinstance(value, list) or not all(isinstance(v, str | dict) for v in value):
            raise ValueError(f"expected a JSON list of strings, got {raw!r}")
        return tuple(v if isinstance(v, str) else json.dumps(v) for v in value)
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _unparse(value: Any) -> str:
    return json.dumps(list(value)) if isinstance(value, tuple) else str(value)


_BOOLS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
