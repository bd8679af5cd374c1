"""`--speculative-config`: vLLM's JSON object, read once at start-up into a frozen record."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

METHODS = ("ngram",)  # vLLM's spelling; "[ngram]" is its older alias
PLANNED = ("suffix", "draft_model")  # named by issue 17, not built yet
KEYS = frozenset(
    {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"}
    | {"disable_by_batch_size"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeConfig:
    """How many tokens to propose a step at most, and how.

    n-gram: the continuation of the longest suffix of the sequence (between
    `prompt_lookup_min` and `prompt_lookup_max` tokens) that occurred before in its
    prompt or output. Above `disable_by_batch_size` decoding sequences nothing is
    proposed (the batch already fills the machine)."""

    method: str
    num_speculative_tokens: int
    prompt_lookup_min: int
    prompt_lookup_max: int
    disable_by_batch_size: int | None = None


def parse_speculative_config(raw: str | None) -> SpeculativeConfig | None:
    """The record for `--speculative-config`'s JSON (None when unset); ValueError naming
    the key for anything wrong."""
    if raw is None or not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--speculative-config: not JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ValueError("--speculative-config: expected a JSON object")
    unknown = sorted(set(value) - KEYS)
    if unknown:
        raise ValueError(f"--speculative-config: unknown key {unknown[0]!r}")
    method = value.get("method", "ngram")
    method = "ngram" if method == "[ngram]" else method
    if method in PLANNED:
        raise ValueError(f"--speculative-config: method {method!r} is not available yet")
    if method not in METHODS:
        raise ValueError(f"--speculative-config: method must be one of {METHODS}, got {method!r}")
    low, high = _lookup(value)
    return SpeculativeConfig(
        method=method,
        num_speculative_tokens=_positive(value, "num_speculative_tokens"),
        prompt_lookup_min=low,
        prompt_lookup_max=high,
        disable_by_batch_size=_positive(value, "disable_by_batch_size", required=False),
    )


def _lookup(value: dict[str, Any]) -> tuple[int, int]:
    """vLLM's rule: neither given, both 5; one given, the other takes its value."""
    low = _positive(value, "prompt_lookup_min", required=False)
    high = _positive(value, "prompt_lookup_max", required=False)
    low, high = (low or high or 5), (high or low or 5)
    if low > high:
        raise ValueError("--speculative-config: prompt_lookup_min is above prompt_lookup_max")
    return low, high


def _positive(value: dict[str, Any], key: str, *, required: bool = True) -> Any:
    number = value.get(key)
    if number is None and not required:
        return None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError(f"--speculative-config: {key} must be a positive integer")
    return number
