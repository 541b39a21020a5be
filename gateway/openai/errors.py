"""OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP
status of the same Conch error code on Triton's paths (``gateway.errors.HTTP_STATUS``)."""

from __future__ import annotations

from typing import Any

from gateway.errors import HTTP_STATUS
from shared.wire.errors import ConchError, ErrorCode

# OpenAI's ``type`` (and ``code``) for each Conch code.
_TYPES: dict[ErrorCode, tuple[str, str | None]] = {
    ErrorCode.INVALID_ARG: ("invalid_request_error", None),
    ErrorCode.NOT_FOUND: ("invalid_request_error", "model_not_found"),
    ErrorCode.UNAUTHENTICATED: ("invalid_request_error", "invalid_api_key"),
    ErrorCode.PERMISSION_DENIED: ("invalid_request_error", "permission_denied"),
    ErrorCode.RESOURCE_EXHAUSTED: ("rate_limit_error", "rate_limit_exceeded"),
    ErrorCode.PAYLOAD_TOO_LARGE: ("invalid_request_error", "request_too_large"),
    ErrorCode.UNSUPPORTED: ("invalid_request_error", "unsupported"),
    ErrorCode.CANCELLED: ("invalid_request_error", "cancelled"),
    ErrorCode.DEADLINE_EXCEEDED: ("server_error", "timeout"),
    ErrorCode.UNAVAILABLE: ("server_error", "unavailable"),
}


class OpenAIError(Exception):
    """A refusal of the OpenAI layer itself, naming the request field (``param``)."""

    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.message, self.param, self.status = message, param, status


def error_body(message: str, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def from_openai(exc: OpenAIError) -> tuple[int, dict[str, Any]]:
    return exc.status, error_body(exc.message, "invalid_request_error", exc.param, None)


def from_conch(exc: ConchError) -> tuple[int, dict[str, Any]]:
    kind, code = _TYPES.get(exc.code, ("server_error", None))
    param = "model" if exc.code == ErrorCode.NOT_FOUND else None
    return HTTP_STATUS.get(exc.code, 500), error_body(exc.message, kind, param, code)
