"""Every metric family of the mesh, in one place: Triton's ``nv_*`` names and Conch's own.

Who exports what (every service serves ``/metrics``; dashboards and rules sum across them):

- **workers**: Triton's per-model counters (``nv_inference_*``, labels ``model``, ``version``)
  counted exactly where the statistics extension's Redis counters are, so both agree; compute
  and batch-size histograms; loaded models and load durations; ``nv_gpu_*`` (workers/gpu_metrics).
- **schedulers**: queue depth, oldest-entry age and ``nv_inference_pending_request_count`` (read
  from the in-memory queues at scrape time), the queue-duration histogram by priority, requests
  the scheduler answered with an error, live instances per model version (fleet-wide).
- **gateways** (several processes, aggregated by prometheus_client's multiprocess mode): the
  end-to-end request-duration histogram, requests per version arm and outcome, rejected requests
  per tenant.
- **all**: Redis round-trip time, heartbeats, reclaimed and redelivered stream entries.

Triton's counters have no ``_total`` suffix (``nv_inference_request_success``), which
prometheus_client's Counter always adds, so they are :class:`TritonCounter` (a plain dict of
floats, rendered after the registry's text). Hot paths hold label children from
:func:`child` (cached per label tuple) so that counting is a dict lookup and an add.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.utils import floatToGoString

log = logging.getLogger(__name__)

__all__ = ["CONTENT_TYPE_LATEST", "exposition"]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds. Dense from 0.5 ms to 100 ms, where a mesh hop and small models live, so that p99
# from histogram_quantile is within one bucket of the true value.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025,
    0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

# Triton's failure reasons (nv_inference_request_failure{reason}).
REJECTED, CANCELED, BACKEND, OTHER = "REJECTED", "CANCELED", "BACKEND", "OTHER"
FAILURE_REASONS = (REJECTED, CANCELED, BACKEND, OTHER)

MODEL = ("model", "version")


class _TritonChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class TritonCounter:
    """A counter exposed under its exact name, as Triton does (``# TYPE name counter``).

    Single-process only (workers and schedulers); increments happen on the event loop.
    """

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...] = MODEL):
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self._children: dict[tuple[str, ...], _TritonChild] = {}
        self._lock = threading.Lock()
        TRITON_COUNTERS.append(self)

    def labels(self, *values: Any) -> _TritonChild:
        key = tuple(str(v) for v in values)
        found = self._children.get(key)
        if found is None:
            with self._lock:
                found = self._children.setdefault(key, _TritonChild())
        return found

    def value(self, *values: Any) -> float:
        child = self._children.get(tuple(str(v) for v in values))
        return child.value if child else 0.0

    def clear(self) -> None:
        self._children.clear()

    def render(self) -> str:
        lines = [f"# HELP {self.name} {self.documentation}", f"# TYPE {self.name} counter"]
        for key, child in list(self._children.items()):
            labels = ",".join(
                f'{n}="{_escape(v)}"' for n, v in zip(self.labelnames, key, strict=True)
            )
            lines.append(f"{self.name}{{{labels}}} {floatToGoString(child.value)}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


TRITON_COUNTERS: list[TritonCounter] = []

# --- Triton's per-model families (workers; failures also from schedulers) ----------------------
SUCCESS = TritonCounter(
    "nv_inference_request_success",
    "Number of successful inference requests, all batch sizes",
)
FAILURE = TritonCounter(
    "nv_inference_request_failure",
    "Number of failed inference requests, all batch sizes",
    (*MODEL, "reason"),
)
INFERENCE_COUNT = TritonCounter(
    "nv_inference_count", "Number of inferences performed (does not include cached requests)"
)
EXEC_COUNT = TritonCounter(
    "nv_inference_exec_count",
    "Number of model executions performed (does not include cached requests)",
)
REQUEST_DURATION_US = TritonCounter(
    "nv_inference_request_duration_us",
    "Cumulative inference request duration in microseconds (queue and compute)",
)
QUEUE_DURATION_US = TritonCounter(
    "nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds"
)
COMPUTE_INPUT_US = TritonCounter(
    "nv_inference_compute_input_duration_us",
    "Cumulative compute input duration in microseconds",
)
COMPUTE_INFER_US = TritonCounter(
    "nv_inference_compute_infer_duration_us",
    "Cumulative compute inference duration in microseconds",
)
COMPUTE_OUTPUT_US = TritonCounter(
    "nv_inference_compute_output_duration_us",
    "Cumulative inference compute output duration in microseconds",
)
PENDING = Gauge(
    "nv_inference_pending_request_count",
    "Instantaneous number of pending requests awaiting execution per-model.",
    MODEL,
    multiprocess_mode="livesum",
)
LOAD_DURATION = Gauge(
    "nv_model_load_duration_secs",
    "Model load time in seconds",
    MODEL,
    multiprocess_mode="liveall",
)

# --- Histograms (the p95/p99 across replicas that Triton has no families for) -----------------
REQUEST_SECONDS = Histogram(
    "conch_request_duration_seconds",
    "End-to-end inference request duration at the gateway (admission to reply), seconds",
    MODEL,
    buckets=LATENCY_BUCKETS,
)
QUEUE_SECONDS = Histogram(
    "conch_queue_duration_seconds",
    "Time a request waited in its priority queue before its batch was formed, seconds",
    (*MODEL, "priority"),
    buckets=LATENCY_BUCKETS,
)
COMPUTE_SECONDS = Histogram(
    "conch_compute_duration_seconds",
    "Duration of one model execution by phase (input, infer, output), seconds",
    (*MODEL, "phase"),
    buckets=LATENCY_BUCKETS,
)
BATCH_SIZE = Histogram(
    "conch_batch_size",
    "Inferences per model execution (the sum of the batched requests' batch sizes)",
    MODEL,
    buckets=BATCH_BUCKETS,
)

# --- The mesh's own -----------------------------------------------------------------------------
QUEUE_DEPTH = Gauge(
    "conch_queue_depth",
    "Requests waiting in a scheduler's queue, per model version and priority level",
    (*MODEL, "priority"),
    multiprocess_mode="livesum",
)
QUEUE_OLDEST_AGE = Gauge(
    "conch_queue_oldest_age_seconds",
    "Age of the oldest request waiting in a scheduler's queue (0 when empty)",
    (*MODEL, "priority"),
    multiprocess_mode="livemax",
)
READY_INSTANCES = Gauge(
    "conch_model_ready_instances",
    "Execution instances of live workers serving a model version, across the fleet",
    MODEL,
    multiprocess_mode="livemax",
)
WORKER_INSTANCES = Gauge(
    "conch_worker_model_instances",
    "Execution instances this worker has loaded for a model version (loaded models)",
    (*MODEL, "backend"),
    multiprocess_mode="livesum",
)
EXECUTIONS_IN_FLIGHT = Gauge(
    "conch_worker_executions_in_flight",
    "Model executions running on this worker now",
    MODEL,
    multiprocess_mode="livesum",
)
GATEWAY_REQUESTS = Counter(
    "conch_gateway_requests",
    "Inference requests answered by the gateway, per version arm and outcome code "
    "(arm: routed by weights/default, pinned to a version by the client, shadow copy)",
    (*MODEL, "arm", "code"),
)
REJECTED_REQUESTS = Counter(
    "conch_requests_rejected",
    "Requests refused at admission, per tenant and reason "
    "(rate_limited, unauthenticated, forbidden, no_worker, queue_full)",
    ("tenant", "model", "reason"),
)
RECLAIMED = Counter(
    "conch_stream_entries_reclaimed",
    "Stream entries taken over from a dead consumer (stage: scheduler or worker)",
    ("stage", *MODEL),
)
REDELIVERED = Counter(
    "conch_stream_entries_redelivered",
    "Stream entries processed again after an earlier delivery (stage: scheduler or worker)",
    ("stage", *MODEL),
)
HEARTBEATS = Counter(
    "conch_heartbeats",
    "Registry heartbeats sent by this service (outcome: ok or error)",
    ("service", "outcome"),
)
REDIS_RTT = Histogram(
    "conch_redis_roundtrip_seconds",
    "Round-trip time of a Redis PING from this service, seconds",
    ("service",),
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
)

# --- Label children, cached ---------------------------------------------------------------------
_cache: dict[tuple[int, tuple[Any, ...]], Any] = {}


def child(metric: Any, *values: Any) -> Any:
    """``metric.labels(*values)``, cached: the hot path pays one dict lookup."""
    key = (id(metric), values)
    found = _cache.get(key)
    if found is None:
        found = _cache[key] = metric.labels(*(str(v) for v in values))
    return found


def forget(metric: Any, *values: Any) -> None:
    """Remove one labelled series (e.g. a model version that was unloaded)."""
    _cache.pop((id(metric), values), None)
    with contextlib.suppress(KeyError):
        metric.remove(*(str(v) for v in values))


# --- Recording helpers (called by the services) -------------------------------------------------


def init_model(model: str, version: int) -> None:
    """Create a version's Triton series at zero, as Triton does when a model loads, so that
    rates and ratios exist (0) before the first request and failure panels read 0, not empty."""
    for family in (
        SUCCESS, INFERENCE_COUNT, EXEC_COUNT, REQUEST_DURATION_US, QUEUE_DURATION_US,
        COMPUTE_INPUT_US, COMPUTE_INFER_US, COMPUTE_OUTPUT_US,
    ):  # fmt: skip
        family.labels(model, version)
    for reason in FAILURE_REASONS:
        FAILURE.labels(model, version, reason)


def init_stage(stage: str, model: str, version: int) -> None:
    """Reclaimed / redelivered series at zero for a stream this stage consumes."""
    child(RECLAIMED, stage, model, version)
    child(REDELIVERED, stage, model, version)


def record_batch(model: str, version: int, stats: dict[str, int]) -> None:
    """A worker's execution, from the very counters it adds to the statistics hash.

    ``stats`` is the worker's per-batch increment of ``keys.stats`` (see workers/service.py), so
    the Prometheus counters and ``/v2/models/stats`` are the same numbers.
    """
    success = stats.get("success_count", 0)
    failed = stats.get("fail_count", 0)
    if success:
        SUCCESS.labels(model, version).inc(success)
    if failed:
        FAILURE.labels(model, version, BACKEND).inc(failed)
    executions = stats.get("execution_count", 0)
    if not executions:
        return
    q_ns = stats.get("queue_ns", 0)
    c_in, c_inf, c_out = (
        stats.get("compute_input_ns", 0),
        stats.get("compute_infer_ns", 0),
        stats.get("compute_output_ns", 0),
    )
    INFERENCE_COUNT.labels(model, version).inc(stats.get("inference_count", 0))
    EXEC_COUNT.labels(model, version).inc(executions)
    REQUEST_DURATION_US.labels(model, version).inc((q_ns + c_in + c_inf + c_out) / 1000)
    QUEUE_DURATION_US.labels(model, version).inc(q_ns / 1000)
    COMPUTE_INPUT_US.labels(model, version).inc(c_in / 1000)
    COMPUTE_INFER_US.labels(model, version).inc(c_inf / 1000)
    COMPUTE_OUTPUT_US.labels(model, version).inc(c_out / 1000)
    # Histograms: one observation per execution (the batch's own durations, not per request).
    size = stats.get("inference_count", 0)
    child(BATCH_SIZE, model, version).observe(size)
    for phase in ("input", "infer", "output"):
        ns = stats.get(f"batch:{size}:compute_{phase}_ns", 0)
        child(COMPUTE_SECONDS, model, version, phase).observe(ns / 1e9)


def record_failures(model: str, version: int, reason: str, count: int = 1) -> None:
    FAILURE.labels(model, version, reason).inc(count)


def record_rejected(tenant: str | None, model: str, reason: str) -> None:
    """A request refused at admission. ``tenant``: its name, None for anonymous callers.

    Reasons: rate_limited, unauthenticated, forbidden, no_worker, queue_full (or another short
    snake_case word). Callable from any gateway code (the multiprocess registry aggregates).
    """
    child(REJECTED_REQUESTS, tenant or "anonymous", model, reason).inc()


def record_request(model: str, version: int, arm: str, code: str, seconds: float) -> None:
    """One inference request answered by a gateway process (code "OK" or an error code)."""
    child(GATEWAY_REQUESTS, model, version, arm, code).inc()
    child(REQUEST_SECONDS, model, version).observe(seconds)


def record_heartbeat(service: str, ok: bool) -> None:
    child(HEARTBEATS, service, "ok" if ok else "error").inc()


# --- Exposition -----------------------------------------------------------------------------

_scrape_hooks: list[Callable[[], None]] = []


def on_scrape(hook: Callable[[], None]) -> None:
    """Run ``hook`` before each exposition (gauges read from in-memory state at scrape time)."""
    _scrape_hooks.append(hook)


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The Prometheus text format of this process (or, in multiprocess mode, of all of them)."""
    for hook in list(_scrape_hooks):
        try:
            hook()
        except Exception:
            log.exception("metrics scrape hook failed")
    path = multiprocess_dir()
    if path:
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=path)
        return generate_latest(merged)
    triton = "".join(c.render() for c in TRITON_COUNTERS if c._children)
    return generate_latest(registry) + triton.encode()


async def redis_rtt_probe(r: Any, service: str, interval_s: float = 2.0) -> None:
    """PING Redis every ``interval_s`` and observe the round trip (runs until cancelled)."""
    observe = child(REDIS_RTT, service).observe
    while True:
        started = time.perf_counter()
        try:
            await r.ping()
        except asyncio.CancelledError:
            raise
        except Exception:
            pass
        else:
            observe(time.perf_counter() - started)
        await asyncio.sleep(interval_s)
