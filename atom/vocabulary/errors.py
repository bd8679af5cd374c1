"""Error conditions, each declared by its `Kind` (HTTP status, OpenAI error type, code,
Retry-After), and the one body shape."""

# ruff: noqa: E701  (one line per error class below: the table is the declaration)

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CLIENT = "invalid_request_error"
UNAVAILABLE = "service_unavailable"


@dataclass(frozen=True, slots=True)
class Kind:
    """How an error class maps onto HTTP and the OpenAI error body."""

    status: int
    error_type: str
    code: str | None = None
    retry_after_s: int | None = None  # sent as Retry-After: when trying again may succeed


class AtomError(Exception):
    """Base error: its class's `kind` says the status, type and code; `code` may be
    given for one error (a more precise reason than the class's)."""

    kind: Kind = Kind(500, "server_error")  # an error of no declared class may set its own

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code if code is not None else self.kind.code

    @property
    def status(self) -> int:
        return self.kind.status

    @property
    def error_type(self) -> str:
        return self.kind.error_type

    @property
    def retry_after_s(self) -> int | None:
        return self.kind.retry_after_s

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, param=self.param, code=self.code)


# fmt: off
class InvalidRequest(AtomError): kind = Kind(400, CLIENT)
class ContextTooLong(InvalidRequest): kind = Kind(400, CLIENT, "context_length_exceeded")
class PayloadTooLarge(InvalidRequest): kind = Kind(413, CLIENT, "payload_too_large")
class RequestTimeout(InvalidRequest): kind = Kind(408, CLIENT, "request_timeout")
class Unauthorized(AtomError): kind = Kind(401, CLIENT, "invalid_api_key")
class Forbidden(AtomError): kind = Kind(403, CLIENT, "forbidden")
class ModelNotFound(AtomError): kind = Kind(404, CLIENT, "model_not_found")
class RouteNotFound(AtomError): kind = Kind(404, CLIENT, "not_found")
class ResponseNotFound(AtomError): kind = Kind(404, CLIENT)
class NoSuchFile(AtomError): kind = Kind(404, CLIENT)  # the Files API
class NoSuchBatch(AtomError): kind = Kind(404, CLIENT)  # the Batch API
class MethodNotAllowed(AtomError): kind = Kind(405, CLIENT, "method_not_allowed")
class Conflict(AtomError): kind = Kind(409, CLIENT, "conflict")
class Overloaded(AtomError): kind = Kind(429, "rate_limit_error", "server_overloaded", 1)
# waited in the queue longer than --max-queue-wait
class QueueTimeout(AtomError): kind = Kind(503, UNAVAILABLE, "queue_timeout", 1)
class EngineNotReady(AtomError): kind = Kind(503, UNAVAILABLE, "model_loading", 5)
# a signal asked the server to stop: running requests finish, new ones go elsewhere
class ServerDraining(AtomError): kind = Kind(503, UNAVAILABLE, "server_draining", 1)
# POST /sleep freed the model (--while-asleep reject): POST /wake_up brings it back
class ModelAsleep(AtomError): kind = Kind(503, UNAVAILABLE, "model_asleep", 5)
class EngineFailed(AtomError): kind = Kind(500, "server_error", "engine_failed")
# fmt: on


def error_body(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error body: `{"error": {message, type, param, code}}`."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
