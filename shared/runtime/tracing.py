"""OpenTelemetry tracing: gateway -> queue (scheduler) -> worker -> reply, off by default.

Turned on by the standard OpenTelemetry environment: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, and ``OTEL_SDK_DISABLED`` not ``true``; the OTLP
exporter (HTTP/protobuf) then reads its own settings (headers, timeout, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``) from the environment too. ``CONCH_TRACING=console`` prints spans
instead (debugging). Without either, or without the ``opentelemetry-sdk`` package, every helper
here is a no-op that costs one attribute check.

The context crosses processes in the message envelope: the gateway injects the W3C
``traceparent`` of its request span into ``InferRequest.trace``; the scheduler reads only that
field (the tensors stay undecoded, see :data:`decode_trace`) for its queue span; the worker
continues the trace around the execution. Spans:

- ``conch.gateway.infer`` (gateway: admission to the reply, the whole request);
- ``conch.scheduler.queue`` (scheduler: enqueued -> batch formed; attribute priority);
- ``conch.worker.execute`` (worker: the model execution of the batch that held the request);
- ``conch.worker.reply`` (worker: publishing the reply to the gateway's reply stream).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any

import msgspec

log = logging.getLogger(__name__)

ENABLED = False
_tracer: Any = None
_propagator: Any = None


def enabled_by(env: Mapping[str, str]) -> str | None:
    """The exporter the environment asks for: "otlp", "console" or None (tracing off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    wanted = env.get("CONCH_TRACING", "").strip().lower()
    if wanted in ("otlp", "console"):
        return wanted
    if wanted in ("off", "none", "false", "0"):
        return None
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return "otlp"
    return None


def setup(service: str, env: Mapping[str, str] | None = None, exporter: Any = None) -> bool:
    """Configure tracing for this process (call once, at service start). True when on.

    ``exporter`` replaces the one the environment names (tests pass an in-memory exporter).
    """
    global ENABLED, _tracer, _propagator
    env = os.environ if env is None else env
    kind = "custom" if exporter is not None else enabled_by(env)
    if kind is None:
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        log.warning("tracing requested but opentelemetry-sdk is not installed; tracing is off")
        return False
    if exporter is None and kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter = ConsoleSpanExporter()
    elif exporter is None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("OTLP endpoint set but opentelemetry-exporter-otlp-proto-http is missing")
            return False
        exporter = OTLPSpanExporter()
    name = env.get("OTEL_SERVICE_NAME") or f"conch-{service}"
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    processor = SimpleSpanProcessor if kind == "custom" else BatchSpanProcessor
    provider.add_span_processor(processor(exporter))
    _tracer = provider.get_tracer("conch")
    _propagator = TraceContextTextMapPropagator()
    ENABLED = True
    _providers.append(provider)
    log.info("tracing on", extra={"exporter": kind, "service_name": name})
    return True


_providers: list[Any] = []


def shutdown() -> None:
    """Flush and stop (service exit; tests)."""
    global ENABLED, _tracer
    for provider in _providers:
        with contextlib.suppress(Exception):
            provider.shutdown()
    _providers.clear()
    ENABLED = False
    _tracer = None


def _context(carrier: Mapping[str, str] | None) -> Any:
    return _propagator.extract(carrier) if carrier else None


class _NullSpan:
    carrier: dict[str, str] = {}

    def end(self, error: str | None = None) -> None:
        pass


NULL_SPAN = _NullSpan()


class _Span:
    """A started span and its context as an envelope carrier; ended explicitly."""

    __slots__ = ("_span", "carrier")

    def __init__(self, span: Any):
        from opentelemetry.trace import set_span_in_context

        self._span = span
        self.carrier: dict[str, str] = {}
        _propagator.inject(self.carrier, context=set_span_in_context(span))

    def end(self, error: str | None = None) -> None:
        if error:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, error))
        self._span.end()


def start(
    name: str,
    parent: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
    start_ns: int | None = None,
) -> _Span | _NullSpan:
    """Start a span, child of ``parent`` (a carrier) if given; ``.carrier`` is its own context
    for the envelope, ``.end(error)`` ends it. :data:`NULL_SPAN` when tracing is off."""
    if not ENABLED:
        return NULL_SPAN
    return _Span(
        _tracer.start_span(
            name,
            context=_context(parent),
            start_time=start_ns,
            attributes=dict(attributes) if attributes else None,
        )
    )


def record(
    name: str,
    parent: Mapping[str, str] | None,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> None:
    """A span that already happened (time spent queued, an execution), ended at once."""
    if not ENABLED or not parent:
        return
    s = _tracer.start_span(
        name,
        context=_context(parent),
        start_time=start_ns,
        attributes=dict(attributes) if attributes else None,
    )
    if error:
        from opentelemetry.trace import Status, StatusCode

        s.set_status(Status(StatusCode.ERROR, error))
    s.end(end_time=end_ns)


class _TraceView(msgspec.Struct, array_like=True):
    """An InferRequest read for its trace context only: tensors stay raw, undecoded bytes."""

    id: str
    model: str
    version: int
    inputs: msgspec.Raw
    outputs: msgspec.Raw
    parameters: msgspec.Raw
    reply_to: str
    deadline_ms: int
    enqueued_ms: int
    client_id: str = ""
    trace: dict[str, str] = {}


_decode_view = msgspec.msgpack.Decoder(_TraceView).decode


def decode_trace(data: bytes) -> dict[str, str]:
    """The ``trace`` carrier of an encoded InferRequest, without decoding its tensors."""
    try:
        return _decode_view(data).trace
    except msgspec.DecodeError:
        return {}
