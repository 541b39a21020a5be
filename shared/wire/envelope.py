"""The messages that travel through Redis Streams, encoded with msgpack (msgspec).

A request stream entry has two fields: ``h`` (a small :class:`RequestHeader`, all the scheduler
needs to queue, order, batch and expire the request) and ``d`` (the full :class:`InferRequest`,
which the scheduler passes to the workers without decoding). Tensor data stays the original
little-endian bytes from the HTTP body to the backend and back.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Tensor(msgspec.Struct, array_like=True, frozen=True):
    """One tensor: raw little-endian row-major bytes; BYTES elements are 4-byte-length-prefixed."""

    name: str
    datatype: str
    shape: list[int]
    data: bytes


class RequestHeader(msgspec.Struct, array_like=True, frozen=True):
    """What the scheduler reads: identity, ordering, deadline and the batching signature."""

    id: str
    reply_to: str
    deadline_ms: int
    priority: int
    batch_size: int
    # Shapes of every input without the batch dimension; equal signatures may share a batch.
    shape_sig: str
    enqueued_ms: int
    # Microseconds the request may wait in the queue (0: only the deadline applies).
    queue_timeout_us: int = 0
    delay_on_timeout: bool = False
    # Wall-clock microseconds of admission: the batcher's delay runs from here, as Triton's runs
    # from the request's arrival, so the hop to the scheduler is not waited on top of it (0: a
    # submitter from before this field; the scheduler then counts from its own read).
    enqueued_us: int = 0


class InferRequest(msgspec.Struct, array_like=True, frozen=True):
    id: str
    model: str
    version: int
    inputs: list[Tensor]
    # Names of the requested outputs; empty means every output of the model.
    outputs: list[str]
    parameters: dict[str, Any]
    reply_to: str
    deadline_ms: int
    enqueued_ms: int
    client_id: str = ""
    trace: dict[str, str] = {}
    # The caller's priority as asked (the request's, else its tenant's), before it was mapped to
    # this model's levels, and the tenant: what an ensemble step or a BLS call passes on.
    priority: int = 0
    tenant: str = ""
    # A stream is bounded by silence: no response for this long ends it (0: a unary request,
    # ``deadline_ms`` bounds it); ``end_by_ms``: a stream's asked deadline (0: none). See
    # ``shared.wire.deadlines``.
    silence_ms: int = 0
    end_by_ms: int = 0


class Timing(msgspec.Struct, array_like=True, frozen=True):
    """Nanosecond durations measured by the scheduler and worker, for statistics and metrics."""

    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    batch_size: int = 0


class Reply(msgspec.Struct, array_like=True, frozen=True):
    id: str
    model: str
    version: int
    outputs: list[Tensor] = []
    error_code: str = ""
    error: str = ""
    timing: Timing = Timing()
    worker: str = ""
    # A request gets zero or more frames and exactly one final one (``final``), numbered
    # gap-free from 0 (``seq``); an ordinary model sends one frame, seq 0, final. A decoupled
    # model's flags-only final is a frame with no outputs. A frame with ``error_code`` is final.
    seq: int = 0
    final: bool = True
    # The response's parameters (a Python model's ``InferenceResponse(parameters=...)``):
    # str, int or bool values, as Triton's response parameters.
    parameters: dict[str, Any] = {}


class Batch(msgspec.Struct, array_like=True, frozen=True):
    """A batch formed by the scheduler: the undecoded request payloads, in execution order."""

    batch_id: str
    model: str
    version: int
    formed_ms: int
    requests: list[bytes]
    # Per request: nanoseconds it spent queued before the batch was formed.
    queue_ns: list[int]


_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode

decode_header = msgspec.msgpack.Decoder(RequestHeader).decode
decode_request = msgspec.msgpack.Decoder(InferRequest).decode
# A reply stream entry holds every reply one batch produced for that stream.
decode_replies = msgspec.msgpack.Decoder(list[Reply]).decode
decode_batch = msgspec.msgpack.Decoder(Batch).decode


def error_reply(request_id: str, model: str, version: int, code: str, message: str) -> Reply:
    return Reply(id=request_id, model=model, version=version, error_code=code, error=message)
