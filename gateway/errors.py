"""The maps from protocol-neutral error codes to HTTP statuses (Triton's HttpCodeFromError)
and to gRPC status codes: one place for each protocol."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.types import ExceptionHandlersMap
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.core.json_depth import MAX_JSON_DEPTH
from shared.runtime.ids import new_id
from shared.runtime.logs import request_id_var
from shared.wire.errors import ConchError, ErrorCode

log = logging.getLogger(__name__)

HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.UNKNOWN: 400,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 503,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.RESOURCE_EXHAUSTED: 429,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
}

# The same codes for gRPC clients (Triton's status mapping for its gRPC endpoint).
GRPC_STATUS: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
    ErrorCode.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
    ErrorCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.PAYLOAD_TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
}

_json = msgspec.json.Encoder()


def error_parts(
    code: ErrorCode, message: str, retry_after_s: float | None = None
) -> tuple[int, bytes, str, dict[str, str]]:
    """Status, body, content type and headers of Triton's error answer for a code."""
    headers = {}
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, int(retry_after_s + 0.999)))
    return HTTP_STATUS.get(code, 500), _json.encode({"error": message}), "application/json", headers


def error_response(
    code: ErrorCode, message: str, retry_after_s: float | None = None
) -> Response[Any]:
    status, body, media_type, headers = error_parts(code, message, retry_after_s)
    return Response(content=body, status_code=status, media_type=media_type, headers=headers)


def conch_error_handler(_: Request[Any, Any, Any], exc: ConchError) -> Response[Any]:
    return error_response(exc.code, exc.message, exc.retry_after_s)


def http_error_handler(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    return Response(
        content=_json.encode({"error": exc.detail}),
        status_code=exc.status_code,
        media_type="application/json",
        headers=exc.headers,
    )


REDIS_ERRORS = (RedisConnectionError, RedisTimeoutError)


def redis_unavailable(exc: Exception, where: str) -> tuple[int, bytes, str, dict[str, str]]:
    """A Redis outage answers 503 with Retry-After, whichever path met it."""
    log.error("redis unreachable", extra={"where": where, "error": str(exc)})
    return error_parts(
        ErrorCode.UNAVAILABLE,
        f"the mesh's Redis is unreachable ({type(exc).__name__}); retry shortly",
        retry_after_s=1,
    )


def redis_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    status, body, media_type, headers = redis_unavailable(exc, request.url.path)
    return Response(content=body, status_code=status, media_type=media_type, headers=headers)


def internal_error(exc: BaseException, where: str) -> tuple[int, bytes, str, dict[str, str]]:
    """A bug's 500: the exception goes to the log with the request id, the caller gets the id
    only (exception text can carry paths, keys, other callers' data)."""
    request_id = request_id_var.get() or new_id()
    request_id_var.set(request_id)
    log.error("unhandled error, request id %s", request_id, exc_info=exc, extra={"where": where})
    status, body, media_type, headers = error_parts(
        ErrorCode.INTERNAL,
        f"internal error (request id {request_id}); the gateway's log has the details",
    )
    return status, body, media_type, {**headers, "X-Request-ID": request_id}


def unexpected_error_handler(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    status, body, media_type, headers = internal_error(exc, request.url.path)
    return Response(content=body, status_code=status, media_type=media_type, headers=headers)


def too_deep_handler(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    """A body Litestar decoded for a route (admin, repository, extensions) nested past the
    decoder's recursion bound: the client's input, so a 400 naming the bound (the inference
    bodies are checked before decoding: ``gateway.core.json_depth``)."""
    log.warning("request body too deeply nested", extra={"where": request.url.path})
    return error_response(
        ErrorCode.INVALID_ARG,
        f"the request body is nested too deeply to decode; expected at most {MAX_JSON_DEPTH} "
        "levels of arrays and objects",
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    ConchError: conch_error_handler,
    HTTPException: http_error_handler,
    RedisConnectionError: redis_error_handler,
    RedisTimeoutError: redis_error_handler,
    RecursionError: too_deep_handler,
    Exception: unexpected_error_handler,
}
