"""What every command and event is: a frozen record with a stable snake_case wire tag,
registered so the request log can decode it (atom/log/codec.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

_REGISTRY: dict[str, type[Event]] = {}


def tagged(tag: str):  # type: ignore[no-untyped-def]
    """Class decorator: give a record its stable wire tag and register it for decoding."""

    def wrap(cls):  # type: ignore[no-untyped-def]
        cls.type = tag
        _REGISTRY[tag] = cls
        return cls

    return wrap


def event_class(tag: str) -> type[Event]:
    """The record class for a wire tag; KeyError for an unknown tag."""
    return _REGISTRY[tag]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every command and event; `type` is the stable wire tag."""

    type: ClassVar[str] = "event"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEvent(Event):
    """An event about one request."""

    request_id: str
