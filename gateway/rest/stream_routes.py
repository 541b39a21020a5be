"""HTTP streaming: Triton's generate extension and Conch's streaming ``/infer`` (SSE).

- ``POST /v2/models/{m}[/versions/{v}]/generate``: one flat JSON object in
  (``gateway.rest.generate_codec``), one out; a decoupled model must answer with exactly one
  response (use ``generate_stream`` otherwise).
- ``POST .../generate_stream``: the same request, each response an SSE event.
- ``POST .../infer`` with ``Accept: text/event-stream`` (beyond Triton, which refuses decoupled
  models on ``/infer``): a KServe v2 request, each response a v2 JSON response body as an SSE
  event (outputs always as JSON data). ``gateway.rest.fastpath`` leaves such requests to this route.

Refusals and an error in the first response answer with the HTTP status and Triton's
``{"error": ...}``; a later error is a last ``data: {"error": ...}`` event. A client that
disconnects cancels its request (Litestar's streaming response stops the iterator, whose close
reaches ``DataPlane.infer_stream``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, cast

import msgspec
from litestar import Request, Response, post
from litestar.response import Stream

from gateway.core.caller import ROUTE_KEY_HEADER, Caller
from gateway.core.dataplane import InferOutcome
from gateway.errors import REDIS_ERRORS, error_response, redis_unavailable
from gateway.rest import sse
from gateway.rest.codec import HEADER_LENGTH, encode_infer_response, parse_infer_request
from gateway.rest.disconnect import CancelOnDisconnect
from gateway.rest.generate_codec import generate_response, parse_generate_request
from gateway.rest.request_limits import decompress
from gateway.runtime.state import GatewayState
from shared.wire.errors import ConchError, ErrorCode

_json = msgspec.json.Encoder()
_GENERATE = [
    "/v2/models/{model:str}/generate",
    "/v2/models/{model:str}/versions/{version:str}/generate",
]
_GENERATE_STREAM = [
    "/v2/models/{model:str}/generate_stream",
    "/v2/models/{model:str}/versions/{version:str}/generate_stream",
]


def _state(request: Request[Any, Any, Any]) -> GatewayState:
    state: GatewayState = request.app.state.gateway  # app.state is untyped (Any)
    return state


def _caller(request: Request[Any, Any, Any]) -> Caller:
    return Caller(request.headers.get("authorization"), request.headers.get(ROUTE_KEY_HEADER))


@post(_GENERATE, status_code=200)
async def generate(
    request: Request[Any, Any, Any], model: str, version: str | None = None
) -> Response[Any]:
    state = _state(request)
    dataplane = state.dataplane
    dataplane.in_flight.enter(model)
    try:
        config = dataplane.table.config(model)
        parsed = parse_generate_request(config, await request.body())
        answers: list[InferOutcome] = []
        async for outcome in dataplane.infer_stream(model, version, parsed, _caller(request)):
            if outcome.reply.outputs or not outcome.reply.final:
                answers.append(outcome)
        if len(answers) != 1:
            raise ConchError(
                ErrorCode.UNSUPPORTED,
                f"generate expects exactly one response from model '{model}', it sent "
                f"{len(answers)}; use generate_stream for a model that streams responses",
            )
        outcome = answers[0]
        answer = generate_response(model, outcome.version, outcome.reply.outputs)
        return Response(content=_json.encode(answer), media_type="application/json")
    except ConchError as exc:
        return error_response(exc.code, exc.message, exc.retry_after_s)
    except REDIS_ERRORS as exc:
        status, body, media, headers = redis_unavailable(exc, f"generate {model}")
        return Response(content=body, status_code=status, media_type=media, headers=headers)
    finally:
        dataplane.in_flight.leave()


@post(_GENERATE_STREAM, status_code=200)
async def generate_stream(
    request: Request[Any, Any, Any], model: str, version: str | None = None
) -> Response[Any]:
    state = _state(request)
    dataplane = state.dataplane

    def encode(outcome: InferOutcome) -> bytes | None:
        if outcome.reply.final and not outcome.reply.outputs:
            return None  # a flags-only final: the end of the stream says it
        return _json.encode(generate_response(model, outcome.version, outcome.reply.outputs))

    async def start() -> AsyncIterator[InferOutcome]:
        config = dataplane.table.config(model)
        parsed = parse_generate_request(config, await request.body())
        return dataplane.infer_stream(model, version, parsed, _caller(request))

    return await _stream(state, request.receive, model, start, encode)


async def infer_events(
    request: Request[Any, Any, Any], model: str, version: str | None
) -> Response[Any]:
    """``/infer`` answered as server-sent events (the client accepts ``text/event-stream``)."""
    state = _state(request)
    dataplane = state.dataplane
    parsed_id = ""

    async def start() -> AsyncIterator[InferOutcome]:
        nonlocal parsed_id
        body = decompress(
            await request.body(),
            request.headers.get("content-encoding"),
            state.settings.max_request_bytes,
        )
        parsed = parse_infer_request(body, request.headers.get(HEADER_LENGTH))
        parsed_id = parsed.id
        return dataplane.infer_stream(model, version, parsed, _caller(request))

    def encode(outcome: InferOutcome) -> bytes | None:
        if outcome.reply.final and not outcome.reply.outputs:
            return None
        content, _ = encode_infer_response(
            model, outcome.version, parsed_id, outcome.reply.outputs, {}, outcome.reply.parameters
        )
        return content

    return await _stream(state, request.receive, model, start, encode)


async def _stream(
    state: GatewayState,
    receive: Any,
    model: str,
    start: Callable[[], Awaitable[AsyncIterator[InferOutcome]]],
    encode: Callable[[InferOutcome], bytes | None],
) -> Response[Any]:
    """The event stream of one request; the in-flight slot is held until it ends."""
    dataplane = state.dataplane
    dataplane.in_flight.enter(model)
    frames: AsyncIterator[InferOutcome] | None = None
    try:
        frames = await start()
        first = None
        async with CancelOnDisconnect(receive) as watch:  # the client may leave before it
            first = await sse.first_frame(frames)
        if watch.disconnected:
            # An async generator (DataPlane.infer_stream); its annotation omits aclose.
            await cast(AsyncGenerator[InferOutcome, None], frames).aclose()  # cancels it
            dataplane.in_flight.leave()
            return Response(content=b"", status_code=499)
    except ConchError as exc:
        dataplane.in_flight.leave()
        return error_response(exc.code, exc.message, exc.retry_after_s)
    except REDIS_ERRORS as exc:
        dataplane.in_flight.leave()
        status, content, media, headers = redis_unavailable(exc, f"stream {model}")
        return Response(content=content, status_code=status, media_type=media, headers=headers)
    except BaseException:
        dataplane.in_flight.leave()
        raise

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in sse.events(frames, first, encode):
                yield chunk
        finally:
            dataplane.in_flight.leave()

    return Stream(content=body(), media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


__all__ = ["generate", "generate_stream", "infer_events"]
