"""Error mapping: every failure becomes an AtomError, and an AtomError one OpenAI-shaped body."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from atom.http.schemas import IGNORED_FIELDS, LEGACY_GUIDED, NEUTRAL_VALUES
from atom.projections.wire import dumps
from atom.projections.wire_anthropic import error_body as anthropic_error_body
from atom.projections.wire_ollama import error_body as ollama_error_body
from atom.vocabulary.errors import AtomError, InvalidRequest, PayloadTooLarge, RequestTimeout

M = TypeVar("M", bound=BaseModel)


def from_validation(exc: ValidationError) -> InvalidRequest:
    """A 400 naming the offending field. Of a union's alternatives the deepest error is
    the one that says what is wrong; alternatives failing at the same field are joined."""
    errors = [(_field_path(e["loc"]), e["msg"]) for e in exc.errors()]
    depth = max(len(path) for path, _ in errors)
    deepest = [(path, msg) for path, msg in errors if len(path) == depth]
    param = ".".join(deepest[0][0])
    messages = list(dict.fromkeys(msg for path, msg in deepest if ".".join(path) == param))
    message = ", or: ".join(messages)
    return InvalidRequest(f"{param}: {message}" if param else message, param=param or None)


def _field_path(loc: tuple[int | str, ...]) -> list[str]:
    """pydantic's error location without the labels it adds for union alternatives
    (`str`, `list[...]`, class names, a tagged union's tag before the same name)."""
    path: list[str] = []
    for part in map(str, loc):
        is_label = part in _TYPE_LABELS or "[" in part or part[:1].isupper()
        if is_label or part.startswith("function-") or (path and path[-1] == part):
            continue
        path.append(part)
    return path


_TYPE_LABELS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


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


def error_bytes(error: AtomError, path: str) -> tuple[int, bytes]:
    """The error body in the shape of the API `path` belongs to: Anthropic's under
    /v1/messages, Ollama's under /api/, OpenAI's everywhere else."""
    if path.startswith("/v1/messages"):
        return error.status, dumps(anthropic_error_body(error.status, error.message))
    if path.startswith("/api/"):
        return error.status, dumps(ollama_error_body(error.message))
    return error.status, dumps(error.body())


def error_headers(error: AtomError) -> dict[str, str]:
    """The headers of an error answer: JSON, Retry-After when waiting may help, and a
    closed connection after a body that was cut short (its unread rest is no request)."""
    headers = {"content-type": "application/json"}
    if error.retry_after_s is not None:
        headers["retry-after"] = str(error.retry_after_s)
    if isinstance(error, PayloadTooLarge | RequestTimeout):
        headers["connection"] = "close"
    return headers


def parse(model: type[M], payload: dict[str, Any]) -> M:
    """Validate a decoded body (atom.http.body) as `model`; raises InvalidRequest."""
    try:
        body = model.model_validate(payload)
    except ValidationError as exc:
        raise from_validation(exc) from None
    check_extras(body)
    return body
