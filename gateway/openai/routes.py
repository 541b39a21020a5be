"""The OpenAI-compatible routes: ``GET /v1/models``, ``POST /v1/completions`` and
``POST /v1/chat/completions``, streamed (SSE ``data: {...}`` chunks, then ``data: [DONE]``)
or not, over :meth:`DataPlane.infer_stream` (admission, rate limits, priorities, routing and
validation exactly as ``/infer``; tenant keys as ``Authorization: Bearer``).

A client that goes away mid-stream closes the frame iterator, which cancels the generation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, cast

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.response import Stream

from gateway.core.caller import ROUTE_KEY_HEADER, Caller
from gateway.openai.errors import OpenAIError, error_body, from_conch, from_openai
from gateway.openai.requests import Generate, parse_chat, parse_completion, parsed_request
from gateway.openai.responses import ChunkWriter, Totals, read_frame, response_body
from gateway.runtime.state import GatewayState
from shared.model_config import ModelConfig
from shared.runtime.ids import new_id
from shared.wire.errors import ConchError, ErrorCode

_json = msgspec.json.Encoder()
DONE = b"data: [DONE]\n\n"


def is_generative(config: ModelConfig) -> bool:
    """Triton's vLLM-backend interface: ``text_input`` in, ``text_output`` out, decoupled."""
    decoupled = (config.json.get("model_transaction_policy") or {}).get("decoupled", False)
    has_text = config.input("text_input") is not None and config.output("text_output") is not None
    return bool(decoupled) and has_text


def _json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response[Any]:
    return Response(
        content=_json.encode(body),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _error(exc: Exception) -> Response[Any]:
    if isinstance(exc, OpenAIError):
        status, body = from_openai(exc)
        return _json_response(body, status)
    assert isinstance(exc, ConchError)
    status, body = from_conch(exc)
    headers = {"Retry-After": str(max(1, round(exc.retry_after_s)))} if exc.retry_after_s else None
    return _json_response(body, status, headers)


def _sse(data: Any) -> bytes:
    return b"data: " + _json.encode(data) + b"\n\n"


def _state(request: Request[Any, Any, Any]) -> GatewayState:
    state: GatewayState = request.app.state.gateway  # app.state is untyped (Any)
    return state


@get("/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[Any]:
    table = _state(request).table
    data = [
        {"id": name, "object": "model", "created": 0, "owned_by": "conch"}
        for name, config in sorted(table.configs.items())
        if is_generative(config)
    ]
    return _json_response({"object": "list", "data": data})


@get("/models/{model:str}")
async def retrieve_model(request: Request[Any, Any, Any], model: str) -> Response[Any]:
    config = _state(request).table.configs.get(model)
    if config is None or not is_generative(config):
        message = f"The model '{model}' does not exist or is not a generative model"
        return _json_response(
            error_body(message, "invalid_request_error", "model", "model_not_found"), 404
        )
    return _json_response({"id": model, "object": "model", "created": 0, "owned_by": "conch"})


@post("/completions", status_code=200)
async def completions(request: Request[Any, Any, Any]) -> Response[Any] | Stream:
    return await _generate(request, parse_completion, "cmpl-")


@post("/chat/completions", status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any] | Stream:
    return await _generate(request, parse_chat, "chatcmpl-")


async def _generate(
    request: Request[Any, Any, Any], parse: Callable[[bytes], Generate], prefix: str
) -> Response[Any] | Stream:
    received = time.perf_counter()
    state = _state(request)
    dataplane = state.dataplane
    try:
        generate = parse(await request.body())
        config = dataplane.table.configs.get(
            generate.model
        ) or await dataplane.table.config_after_miss(generate.model)
        if not is_generative(config):
            raise OpenAIError(
                f"model '{generate.model}' is not a generative model: it needs the inputs and "
                "outputs of Triton's vLLM backend (text_input, text_output) and "
                "model_transaction_policy { decoupled: true }",
                "model",
            )
        infer_stream = getattr(dataplane, "infer_stream", None)
        if infer_stream is None:
            raise ConchError(ErrorCode.UNSUPPORTED, "this gateway cannot stream responses yet")
        # OpenAI clients always send a key; a mesh with no keys at all serves them anonymously.
        authorization = request.headers.get("authorization")
        if dataplane.admission.tenants.keyless():
            authorization = None
        caller = Caller(authorization, request.headers.get(ROUTE_KEY_HEADER))
        dataplane.in_flight.enter(generate.model)
    except (OpenAIError, ConchError) as exc:
        return _error(exc)
    response_id = prefix + new_id()
    # An async generator: infer_stream's annotation (AsyncIterator) omits aclose.
    frames = cast(
        AsyncGenerator[Any, None],
        infer_stream(generate.model, None, parsed_request(generate), caller, received),
    )
    try:  # refusals (auth, rate limit, validation) come before the first frame: a status
        first = await anext(frames)
    except (ConchError, StopAsyncIteration) as exc:
        dataplane.in_flight.leave()
        await frames.aclose()
        if isinstance(exc, StopAsyncIteration):
            exc = ConchError(ErrorCode.INTERNAL, "the model closed the stream without a response")
        return _error(exc)
    if generate.stream:
        return Stream(
            _stream(generate, response_id, first, frames, dataplane.in_flight.leave),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    totals = Totals()
    try:
        async with contextlib.aclosing(frames):
            totals.add(read_frame(first.reply.outputs))
            async for outcome in frames:
                totals.add(read_frame(outcome.reply.outputs))
    except ConchError as exc:
        return _error(exc)
    finally:
        dataplane.in_flight.leave()
    return _json_response(response_body(generate, totals, response_id))


async def _stream(
    generate: Generate,
    response_id: str,
    first: Any,
    frames: AsyncGenerator[Any, None],
    leave: Callable[[], None],
) -> AsyncIterator[bytes]:
    """The SSE body; an error after the first frame is an ``error`` chunk, then ``[DONE]``."""
    writer, totals = ChunkWriter(generate, response_id), Totals()
    try:
        async with contextlib.aclosing(frames):  # closed early (client gone): cancels
            outcome = first
            while True:
                frame = read_frame(outcome.reply.outputs)
                totals.add(frame)
                for chunk in writer.frame(frame):
                    yield _sse(chunk)
                try:
                    outcome = await anext(frames)
                except StopAsyncIteration:
                    break
        for chunk in writer.usage(totals):
            yield _sse(chunk)
    except ConchError as exc:
        yield _sse(from_conch(exc)[1])
    finally:
        leave()
    yield DONE


def openai_router() -> Router:
    return Router(
        path="/v1",
        route_handlers=[list_models, retrieve_model, completions, chat_completions],
        include_in_schema=False,
    )
