"""Error mapping: every failure becomes an AtomError, and an AtomError one OpenAI-shaped body."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from atom.errors import AtomError, InvalidRequest
from atom.http.schemas import IGNORED_FIELDS, LEGACY_GUIDED, NEUTRAL_VALUES
from atom.wire import dumps


def from_validation(exc: ValidationError) -> InvalidRequest:
    """The first pydantic error as a 400 naming the offending field."""
    first = exc.errors()[0]
    param = ".".join(str(part) for part in first["loc"] if not str(part).startswith("function"))
    message = first["msg"]
    return InvalidRequest(f"{param}: {message}" if param else message, param=param or None)


def check_extras(body: BaseModel, *, prefix: str = "") -> None:
    """Unknown fields and not-yet-implemented parameters are a 400, never silently ignored."""
    for name, value in (body.model_extra or {}).items():
        if name in IGNORED_FIELDS:
            continue
        if name in LEGACY_GUIDED:
            replacement = LEGACY_GUIDED[name]
            hint = (
                f'send structured_outputs: {{"{replacement}": ...}}'
                if replacement
                else ("send structured_outputs instead")
            )
            raise InvalidRequest(f"{prefix}{name} is not supported any more: {hint}", param=name)
        neutral = NEUTRAL_VALUES.get(name)
        if neutral is None:
            raise InvalidRequest(f"unsupported parameter: {prefix}{name}", param=prefix + name)
        if value is not None and value not in neutral:
            raise InvalidRequest(
                f"parameter {prefix}{name} is not supported yet (only {neutral[0]!r} is accepted)",
                param=prefix + name,
            )


def error_bytes(error: AtomError) -> tuple[int, bytes]:
    return error.status, dumps(error.body())


def parse(model: type[BaseModel], payload: Any) -> Any:
    """Validate `payload` as `model`; raises InvalidRequest."""
    if not isinstance(payload, dict):
        raise InvalidRequest("the request body must be a JSON object")
    try:
        body = model.model_validate(payload)
    except ValidationError as exc:
        raise from_validation(exc) from None
    check_extras(body)
    return body
