"""The values settings take beyond numbers and text: words as enums (a `StrEnum` equals
its word, so `settings.quantization == "auto"` reads as before), and the records that
JSON-valued settings are parsed into. `Settings` (config.py) checks every one of them
when it is made; a ValueError from here says what is wrong, and Settings adds which
flag and variable it came from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

E = TypeVar("E", bound=StrEnum)


class Quantization(StrEnum):
    """CPU weights: `auto` keeps a GGUF's quantized tensors on the integer kernels."""

    AUTO = "auto"
    OFF = "off"
    INT8 = "int8"
    INT4 = "int4"


class KVCacheDtype(StrEnum):
    AUTO = "auto"
    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    INT8 = "int8"  # per token and kv head scales (atom/model/paged_cache.py)


class CpuKernels(StrEnum):
    AUTO = "auto"
    ON = "on"
    OFF = "off"


class ModelImpl(StrEnum):
    AUTO = "auto"
    ATOM = "atom"
    TRANSFORMERS = "transformers"


class SchedulingPolicy(StrEnum):
    FCFS = "fcfs"
    PRIORITY = "priority"


class RouterPolicy(StrEnum):
    """How sglang-router picks a replica (`--data-parallel-size` above 1)."""

    CACHE_AWARE = "cache_aware"
    ROUND_ROBIN = "round_robin"
    POWER_OF_TWO = "power_of_two"
    RANDOM = "random"


class WhileAsleep(StrEnum):
    REJECT = "reject"
    WAIT = "wait"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


class LogFormat(StrEnum):
    JSON = "json"
    CONSOLE = "console"


class ToolCallParser(StrEnum):
    """vLLM's names (docs/parsers.md); atom/text/parsers.py has one format for each."""

    HERMES = "hermes"
    QWEN = "qwen"
    QWEN25 = "qwen25"
    QWEN3_CODER = "qwen3_coder"
    LLAMA3_JSON = "llama3_json"
    PYTHONIC = "pythonic"
    LLAMA4_PYTHONIC = "llama4_pythonic"
    MISTRAL = "mistral"
    DEEPSEEK_V3 = "deepseek_v3"
    KIMI_K2 = "kimi_k2"
    GRANITE = "granite"
    OPENAI = "openai"
    GPT_OSS = "gpt_oss"


class ReasoningParser(StrEnum):
    DEEPSEEK_R1 = "deepseek_r1"
    QWEN3 = "qwen3"
    GRANITE = "granite"
    OPENAI = "openai"
    GPT_OSS = "gpt_oss"


def word(kind: type[E], value: str) -> E:
    """`value` as one of `kind`'s words; ValueError listing them otherwise."""
    try:
        return kind(value)
    except ValueError:
        words = [member.value for member in kind]
        expected = ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]
        raise ValueError(f"expected {expected}, got {value!r}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraModule:
    """One `--lora-modules` entry: `name=path`, or vLLM's JSON object form."""

    name: str
    path: str
    base_model_name: str | None = None  # None: the first generation model


def lora_modules(entries: tuple[str, ...]) -> tuple[LoraModule, ...]:
    """The `--lora-modules` entries; ValueError naming a malformed one."""
    modules = []
    for entry in entries:
        if entry.lstrip().startswith("{"):
            raw = json_object(entry)
            if not isinstance(raw.get("name"), str) or not isinstance(raw.get("path"), str):
                raise ValueError(f"{entry!r} needs a `name` and a `path`")
            base = raw.get("base_model_name")
            modules.append(LoraModule(name=raw["name"], path=raw["path"], base_model_name=base))
        else:
            name, equals, path = entry.partition("=")
            if not equals or not name.strip() or not path.strip():
                raise ValueError(f"expected name=path, got {entry!r}")
            modules.append(LoraModule(name=name.strip(), path=path.strip()))
    return tuple(modules)


IMAGES_PER_PROMPT = 8  # --limit-mm-per-prompt's defaults
VIDEOS_PER_PROMPT = 1
AUDIOS_PER_PROMPT = 4


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """Images, videos and audio clips one prompt may hold (`--limit-mm-per-prompt`)."""

    image: int = IMAGES_PER_PROMPT
    video: int = VIDEOS_PER_PROMPT
    audio: int = AUDIOS_PER_PROMPT


def media_per_prompt(raw: str | None) -> MediaLimits:
    """`--limit-mm-per-prompt` (vLLM's JSON object, e.g. `{"image": 4, "video": 1}`)."""
    value = json_object(raw)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values()):
        raise ValueError('expected a JSON object of counts such as {"image": 4, "video": 1}')
    unknown = set(value) - {"image", "video", "audio"}
    if unknown:
        raise ValueError(f"only images, videos and audio are served, not {sorted(unknown)}")
    return MediaLimits(**value)


@dataclass(frozen=True, slots=True)
class VideoSampling:
    """The frames a video part gives a model (`--media-io-kwargs`'s "video"): `fps` a
    second, at most `num_frames`, spread evenly over a longer video."""

    fps: float = 2.0
    num_frames: int = 32


def video_sampling(raw: str | None) -> VideoSampling:
    """`--media-io-kwargs` (vLLM's JSON object, e.g. `{"video": {"num_frames": 16}}`)."""
    value = json_object(raw)
    unknown = set(value) - {"video"}
    if unknown:
        raise ValueError(f"only video options are read, not {sorted(unknown)}")
    video = value.get("video", {})
    if not isinstance(video, dict) or set(video) - {"fps", "num_frames"}:
        raise ValueError('expected {"video": {"fps": 2, "num_frames": 32}}')
    sampling = VideoSampling(**video)
    fps, frames = sampling.fps, sampling.num_frames
    if not isinstance(fps, int | float) or isinstance(fps, bool) or not 0 < fps <= 60:
        raise ValueError(f"video fps must be a number in (0, 60], got {fps!r}")
    if not isinstance(frames, int) or isinstance(frames, bool) or not 1 <= frames <= 1024:
        raise ValueError(f"video num_frames must be an integer in 1..1024, got {frames!r}")
    return sampling


def json_object(raw: str | None) -> dict[str, Any]:
    """A JSON object's text as a dict (None or blank: empty); ValueError otherwise."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value
