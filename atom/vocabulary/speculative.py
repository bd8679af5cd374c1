"""`--speculative-config`: vLLM's JSON object, read once at start-up into a frozen record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from atom.vocabulary.choices import Quantization, json_object, word

METHODS = ("ngram", "suffix", "draft_model")  # vLLM's spellings; "[ngram]": its older alias
DEFAULT_DISABLE_BY_BATCH_SIZE = 8  # ATOM's (vLLM never turns drafts off by default)
KEYS = {
    "ngram": {"prompt_lookup_min", "prompt_lookup_max"},
    "suffix": {
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
    },
    "draft_model": {"model", "quantization"},
}
COMMON = {"method", "num_speculative_tokens", "disable_by_batch_size"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeConfig:
    """How many tokens to propose a step at most, and how.

    n-gram: the continuation of the longest suffix of the sequence (between
    `prompt_lookup_min` and `prompt_lookup_max` tokens) that occurred before in its
    prompt or output. Suffix decoding: the most frequent continuation of the sequence's
    longest matching suffix (up to `max_tree_depth` tokens) over its own tokens and
    the last `max_cached_requests` responses, token by token while a token's share of
    the matches stays at `min_token_prob` or more, at most `max_spec_factor` times the
    match's length. Draft model: the greedy continuation of `model` (a smaller model
    with the same tokenizer: a folder or a GGUF). Above `disable_by_batch_size`
    running sequences (decoding or in their prompts) nothing is proposed (the batch
    already fills the machine)."""

    method: str
    num_speculative_tokens: int
    disable_by_batch_size: int = DEFAULT_DISABLE_BY_BATCH_SIZE
    prompt_lookup_min: int = 5
    prompt_lookup_max: int = 5
    max_tree_depth: int = 24
    max_cached_requests: int = 1000
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1
    model: str | None = None  # the draft model's path (draft_model only)
    quantization: Quantization | None = None  # the draft's (None: the served model's)


def parse_speculative_config(raw: str | None) -> SpeculativeConfig | None:
    """The record for `--speculative-config`'s JSON (None when unset); ValueError naming
    the key for anything wrong."""
    if raw is None or not raw.strip():
        return None
    value = json_object(raw)
    method = value.get("method", "draft_model" if "model" in value else "ngram")  # vLLM's rule
    method = "ngram" if method == "[ngram]" else method
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    unknown = sorted(set(value) - COMMON - KEYS[method])
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} for {method}")
    disable = _number(value, "disable_by_batch_size", int, DEFAULT_DISABLE_BY_BATCH_SIZE)
    fields = {"ngram": _ngram, "suffix": _suffix, "draft_model": _draft_model}[method](value)
    return SpeculativeConfig(method=method, disable_by_batch_size=disable, **fields)


def _ngram(value: dict[str, Any]) -> dict[str, Any]:
    low, high = _lookup(value)
    return {
        "num_speculative_tokens": _number(value, "num_speculative_tokens", int, None),
        "prompt_lookup_min": low,
        "prompt_lookup_max": high,
    }


def _draft_model(value: dict[str, Any]) -> dict[str, Any]:
    model, quantization = value.get("model"), value.get("quantization")
    if not isinstance(model, str) or not model.strip():
        raise ValueError("draft_model needs `model`, the draft's path")
    if quantization is not None:
        if not isinstance(quantization, str):
            raise ValueError("quantization must be a string, as --quantization")
        quantization = word(Quantization, quantization)
    return {
        "num_speculative_tokens": _number(value, "num_speculative_tokens", int, None),
        "model": model,
        "quantization": quantization,
    }


def _suffix(value: dict[str, Any]) -> dict[str, Any]:
    """vLLM's suffix keys and defaults (num_speculative_tokens: the tree depth), but 1,000
    cached responses rather than 10,000: the index lives in Python objects here."""
    depth = _number(value, "suffix_decoding_max_tree_depth", int, 24)
    probability = _number(value, "suffix_decoding_min_token_prob", float, 0.1)
    if probability > 1:
        raise ValueError("suffix_decoding_min_token_prob is above 1")
    return {
        "num_speculative_tokens": _number(value, "num_speculative_tokens", int, depth),
        "max_tree_depth": depth,
        "max_cached_requests": _number(value, "suffix_decoding_max_cached_requests", int, 1000),
        "max_spec_factor": _number(value, "suffix_decoding_max_spec_factor", float, 1.0),
        "min_token_prob": probability,
    }


def _lookup(value: dict[str, Any]) -> tuple[int, int]:
    """vLLM's rule: neither given, both 5; one given, the other takes its value."""
    low = _number(value, "prompt_lookup_min", int, 0)
    high = _number(value, "prompt_lookup_max", int, 0)
    low, high = (low or high or 5), (high or low or 5)
    if low > high:
        raise ValueError("prompt_lookup_min is above prompt_lookup_max")
    return low, high


def _number(value: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """value[key] as a positive `kind` (an int is a float too); `default` when absent
    (None: required)."""
    number = value.get(key)
    if number is None and default is not None:
        return default
    accepted = (int, float) if kind is float else (int,)
    if isinstance(number, bool) or not isinstance(number, accepted) or number <= 0:
        raise ValueError(f"{key} must be a positive {kind.__name__}")
    return kind(number)
