"""Protocol-neutral error codes.

Every service raises :class:`ConchError` with one of these codes; the gateway maps a code to an
HTTP status and to a gRPC status, in one place each (``gateway/errors.py``). The codes follow
Triton's ``TRITONSERVER_Error_Code`` so that clients see the statuses Triton would give them,
plus five that Triton has no code for (deadlines, authentication, permission, rate limiting, a
request larger than the gateway accepts).
"""

from __future__ import annotations

import enum


class ErrorCode(enum.StrEnum):
    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"


class ConchError(Exception):
    """An error with a code and a message that names what was wrong and what was expected."""

    def __init__(self, code: ErrorCode, message: str, *, retry_after_s: float | None = None):
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.retry_after_s = retry_after_s

    def __repr__(self) -> str:
        return f"ConchError({self.code.value}, {self.message!r})"


def invalid(message: str) -> ConchError:
    return ConchError(ErrorCode.INVALID_ARG, message)


def not_found(message: str) -> ConchError:
    return ConchError(ErrorCode.NOT_FOUND, message)


def unavailable(message: str) -> ConchError:
    return ConchError(ErrorCode.UNAVAILABLE, message)


def internal(message: str) -> ConchError:
    return ConchError(ErrorCode.INTERNAL, message)
