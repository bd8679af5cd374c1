"""`--kv-events-config`: vLLM's JSON for publishing KV-cache events (blocks stored and
removed, with their prefix hashes) to a KV-aware router (atom/actors/kv_events.py)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from atom.vocabulary.choices import json_object

PUBLISHERS = ("null", "zmq")


@dataclass(frozen=True, slots=True, kw_only=True)
class KVEventsConfig:
    """vLLM's fields and defaults (a PUB socket; `*` in the endpoint binds, else it
    connects). Each data-parallel replica adds its rank to the endpoints' ports."""

    enable_kv_cache_events: bool = False
    publisher: str = "null"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None  # a ROUTER socket that resends kept batches
    buffer_steps: int = 10_000  # batches kept for replay
    hwm: int = 100_000  # the PUB socket's high-water mark
    max_queue_size: int = 100_000  # events waiting for the publisher thread
    topic: str = ""


def parse_kv_events_config(raw: str | None) -> KVEventsConfig | None:
    """The config, or None when events are off (absent, not enabled, publisher null)."""
    value = json_object(raw)
    known = {f.name: f for f in fields(KVEventsConfig)}
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(f"unknown fields {unknown}; known: {sorted(known)}")
    config = KVEventsConfig(**{k: _checked(k, v) for k, v in value.items()})
    if config.publisher not in PUBLISHERS:
        raise ValueError(f"publisher must be one of {list(PUBLISHERS)}, got {config.publisher!r}")
    if not config.enable_kv_cache_events or config.publisher == "null":
        return None
    return config


def _checked(name: str, value: Any) -> Any:
    expected = {"enable_kv_cache_events": bool, "buffer_steps": int, "hwm": int,
                "max_queue_size": int}.get(name, str)  # fmt: skip
    if value is None and name == "replay_endpoint":
        return None
    if type(value) is not expected:
        raise ValueError(f"{name} must be a {expected.__name__}, got {value!r}")
    return value
