"""gRPC ``ModelStreamInfer``: many requests on one bidirectional stream, responses as they come.

Each request read from the stream runs as a task of its own over
:meth:`DataPlane.infer_stream`, so a slow request does not hold back the others, and every
response frame is written as soon as it arrives. As in Triton:

- each response carries the parameter ``triton_final_response`` (true on a request's last);
- a decoupled model's flags-only final response is sent (as an empty response) only when the
  request asked with ``triton_enable_empty_final_response``;
- an error ends that request only: it is written as ``error_message`` (with the request's model,
  version and id), and the stream goes on with the other requests;
- requests of one sequence (``sequence_id``) are admitted one after the other, in the order they
  came on the stream, through the usual sequence admission.

The client cancelling the call, or closing the stream, cancels every request still running on
it (``gateway.core.cancellation``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import msgspec
from tritonclient.grpc import service_pb2

from gateway.core.caller import ROUTE_KEY_HEADER, Caller
from gateway.core.dataplane import DataPlane, InferOutcome
from gateway.errors import REDIS_ERRORS, internal_error, redis_unavailable
from gateway.grpc.codec import encode_grpc_response, parse_grpc_request
from shared.wire.errors import ConchError

log = logging.getLogger(__name__)

EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL = "triton_final_response"
_DONE = object()


async def model_stream_infer(
    dataplane: DataPlane, requests: AsyncIterator[Any], context: Any
) -> AsyncIterator[Any]:
    headers = dict(context.invocation_metadata() or ())
    caller = Caller(headers.get("authorization"), headers.get(ROUTE_KEY_HEADER))
    out: asyncio.Queue[Any] = asyncio.Queue()
    tasks: set[asyncio.Task[None]] = set()
    sequences: dict[Any, asyncio.Task[None]] = {}

    async def read() -> None:
        try:
            async for request in requests:
                sequence = _sequence_key(request)
                before = sequences.get(sequence) if sequence is not None else None
                task = asyncio.create_task(_one(dataplane, request, headers, caller, out, before))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                if sequence is not None:
                    sequences[sequence] = task

                    def forget(t: asyncio.Task[None], s: Any = sequence) -> None:
                        if sequences.get(s) is t:
                            sequences.pop(s, None)

                    task.add_done_callback(forget)
        finally:
            if tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
            out.put_nowait(_DONE)

    reader = asyncio.create_task(read())
    try:
        while True:
            item = await out.get()
            if item is _DONE:
                break
            yield item
    finally:  # the client cancelled or closed the stream: stop what still runs
        reader.cancel()
        for task in list(tasks):
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(reader, *list(tasks), return_exceptions=True)


def _sequence_key(request: Any) -> Any:
    parameter = request.parameters.get("sequence_id") if request.parameters else None
    if parameter is None:
        return None
    choice = parameter.WhichOneof("parameter_choice")
    value = getattr(parameter, choice) if choice else None
    return (request.model_name, value) if value else None


async def _one(
    dataplane: DataPlane,
    request: Any,
    headers: dict[str, str],
    caller: Caller,
    out: asyncio.Queue[Any],
    before: asyncio.Task[None] | None,
) -> None:
    """Run one request of the stream, putting each of its responses on ``out``."""
    if before is not None:  # the previous step of this sequence is admitted and answered first
        with contextlib.suppress(BaseException):
            await asyncio.shield(before)
    model, version = request.model_name, request.model_version or None
    empty_final = False
    try:
        dataplane.in_flight.enter(model)
    except ConchError as exc:
        out.put_nowait(_error(request, exc.message))
        return
    try:
        parsed = parse_grpc_request(request)
        empty_final = bool(parsed.parameters.pop(EMPTY_FINAL, False))
        plan = await dataplane.extensions.prepare(parsed, headers, grpc=True)
        decoupled = dataplane.table.config(model).decoupled
        # An async generator: DataPlane.infer_stream's annotation (AsyncIterator) omits aclose.
        frames = cast(
            AsyncGenerator[InferOutcome, None],
            dataplane.infer_stream(model, version, parsed, caller),
        )
        try:
            async for outcome in frames:
                reply = outcome.reply
                if decoupled and reply.final and not reply.outputs and not empty_final:
                    continue  # a flags-only final, not asked for
                finished = await dataplane.extensions.finish(
                    plan, dataplane.table.configs.get(model), reply.outputs
                )
                response = encode_grpc_response(
                    model,
                    outcome.version,
                    request.id,
                    finished.outputs,
                    finished.in_shared_memory,
                    reply.parameters,
                )
                response.parameters[FINAL].bool_param = reply.final
                out.put_nowait(service_pb2.ModelStreamInferResponse(infer_response=response))
        finally:
            await frames.aclose()
    except ConchError as exc:
        out.put_nowait(_error(request, exc.message))
    except REDIS_ERRORS as exc:
        _, body, _, _ = redis_unavailable(exc, f"grpc stream infer {model}")
        out.put_nowait(_error(request, msgspec.json.decode(body)["error"]))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        _, body, _, _ = internal_error(exc, "grpc ModelStreamInfer")
        out.put_nowait(_error(request, msgspec.json.decode(body)["error"]))
    finally:
        dataplane.in_flight.leave()


def _error(request: Any, message: str) -> Any:
    return service_pb2.ModelStreamInferResponse(
        error_message=message,
        infer_response=service_pb2.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )
