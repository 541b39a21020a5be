"""The REST inference exchange, independent of the web framework: headers + body in, status +
headers + body out. The Litestar route and the ASGI fast path (whose ``answer`` the HTTP
protocol hook calls too) share it, so they cannot drift apart.

``before_body`` is what the headers alone decide, before a byte of the body is read: the model
exists, the caller is authenticated and may use it, the announced body fits the limit, and this
process has room for one more request (``gateway.core.in_flight``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from gateway.core.caller import ROUTE_KEY_HEADER, Caller
from gateway.core.dataplane import DataPlane
from gateway.errors import REDIS_ERRORS, error_parts, redis_unavailable
from gateway.rest.codec import HEADER_LENGTH, encode_infer_response, parse_infer_request
from gateway.rest.request_limits import check_announced_length, decompress
from shared.wire.errors import ConchError

JSON = "application/json"
BINARY = "application/octet-stream"


class RestResponse:
    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers or {}


async def before_body(
    dataplane: DataPlane, model: str, headers: Mapping[str, str], max_request_bytes: int
) -> Caller:
    """Raise the answer the headers alone call for; otherwise the authenticated caller, holding
    one of this process's in-flight slots (the caller gives it back: ``in_flight.leave``).

    A model this process's table lacks gets the table's second look in Redis before the 404:
    the table is refreshed on an interval, and a model that a worker announced a moment ago is
    loading (503), not unknown. In on_demand mode a model that is indexed and not loaded goes
    on: the data plane waits for its load."""
    cold = dataplane.cold_starts
    if model not in dataplane.table.configs and not (cold and cold.loadable(model)):
        await dataplane.table.config_after_miss(model)
    caller = dataplane.authenticate(
        model, Caller(headers.get("authorization"), headers.get(ROUTE_KEY_HEADER))
    )
    check_announced_length(headers, max_request_bytes)
    dataplane.in_flight.enter(model)
    return caller


async def infer(
    dataplane: DataPlane,
    model: str,
    version: str | None,
    headers: Mapping[str, str],
    body: bytes,
    received: float | None = None,
    caller: Caller | None = None,
    max_request_bytes: int = 64 * 1024 * 1024,
) -> RestResponse:
    """Run one inference; every failure becomes Triton's ``{"error": ...}`` with its status.

    ``received`` (perf_counter) is when the request reached this process, where the server
    knows it: the request-duration metric then includes the time spent waiting for this
    process's event loop and reading the body, as a client sees it."""
    received = received or time.perf_counter()
    try:
        body = decompress(body, headers.get("content-encoding"), max_request_bytes)
        parsed = parse_infer_request(body, headers.get(HEADER_LENGTH))
        plan = await dataplane.extensions.prepare(parsed, headers)
        if caller is None:
            caller = Caller(headers.get("authorization"), headers.get(ROUTE_KEY_HEADER))
        outcome = await dataplane.infer(model, version, parsed, caller, received)
        finished = await dataplane.extensions.finish(
            plan, dataplane.table.configs.get(model), outcome.reply.outputs
        )
    except ConchError as exc:
        return RestResponse(*error_parts(exc.code, exc.message, exc.retry_after_s))
    except REDIS_ERRORS as exc:
        return RestResponse(*redis_unavailable(exc, f"infer {model}"))
    binary = {o.name: o.binary for o in outcome.request.outputs}
    if not outcome.request.outputs and parsed.binary_default:
        binary = {t.name: True for t in finished.outputs}
    content, header_length = encode_infer_response(
        model,
        outcome.version,
        parsed.id,
        finished.outputs,
        binary,
        parameters=outcome.reply.parameters,
        in_shared_memory=finished.in_shared_memory,
    )
    if header_length is None:
        return RestResponse(200, content, JSON)
    return RestResponse(
        200, content, BINARY, {"Inference-Header-Content-Length": str(header_length)}
    )
