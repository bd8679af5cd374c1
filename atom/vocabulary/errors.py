"""Error conditions, each with its HTTP status and OpenAI error type, and the one body shape."""

from __future__ import annotations

from typing import Any


class AtomError(Exception):
    """Base error; `status`, `error_type` and `code` map it onto the OpenAI error body."""

    status = 500
    error_type = "server_error"
    code: str | None = None
    retry_after_s: int | None = None  # sent as Retry-After: when trying again may succeed

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, param=self.param, code=self.code)


class InvalidRequest(AtomError):
    status = 400
    error_type = "invalid_request_error"


class ContextTooLong(InvalidRequest):
    code = "context_length_exceeded"


class PayloadTooLarge(InvalidRequest):
    status = 413
    code = "payload_too_large"


class RequestTimeout(InvalidRequest):
    status = 408
    code = "request_timeout"


class ModelNotFound(AtomError):
    status = 404
    error_type = "invalid_request_error"
    code = "model_not_found"


class RouteNotFound(AtomError):
    status = 404
    error_type = "invalid_request_error"
    code = "not_found"


class Unauthorized(AtomError):
    status = 401
    error_type = "invalid_request_error"
    code = "invalid_api_key"


class Forbidden(AtomError):
    status = 403
    error_type = "invalid_request_error"
    code = "forbidden"


class Conflict(AtomError):
    status = 409
    error_type = "invalid_request_error"
    code = "conflict"


class ResponseNotFound(AtomError):
    status = 404
    error_type = "invalid_request_error"


class MethodNotAllowed(AtomError):
    status = 405
    error_type = "invalid_request_error"
    code = "method_not_allowed"


class Overloaded(AtomError):
    status = 429
    error_type = "rate_limit_error"
    code = "server_overloaded"
    retry_after_s = 1


class QueueTimeout(AtomError):
    """The request waited in the queue longer than --max-queue-wait."""

    status = 503
    error_type = "service_unavailable"
    code = "queue_timeout"
    retry_after_s = 1


class EngineNotReady(AtomError):
    status = 503
    error_type = "service_unavailable"
    code = "model_loading"
    retry_after_s = 5


class ServerDraining(AtomError):
    """A signal asked the server to stop: running requests finish, new ones go elsewhere."""

    status = 503
    error_type = "service_unavailable"
    code = "server_draining"
    retry_after_s = 1


class ModelAsleep(AtomError):
    """POST /sleep freed the model (ATOM_WHILE_ASLEEP=reject): POST /wake_up brings it back."""

    status = 503
    error_type = "service_unavailable"
    code = "model_asleep"
    retry_after_s = 5


class EngineFailed(AtomError):
    status = 500
    error_type = "server_error"
    code = "engine_failed"


def error_body(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error body: `{"error": {message, type, param, code}}`."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
