"""What the services call to count: cached label children and one helper per event.

Hot paths hold label children from :func:`child` (cached per label tuple) so that counting is a
dict lookup and an add.
"""

from __future__ import annotations

import contextlib
from typing import Any

from shared.metrics.families import (
    BACKEND,
    BATCH_SIZE,
    CLIENT_CANCELLATIONS,
    COMPUTE_INFER_US,
    COMPUTE_INPUT_US,
    COMPUTE_OUTPUT_US,
    COMPUTE_SECONDS,
    DEAD_LETTERS,
    DIRECT_DISPATCH,
    EXEC_COUNT,
    FAILURE,
    FAILURE_REASONS,
    GATEWAY_REQUESTS,
    HEARTBEATS,
    INFERENCE_COUNT,
    LATE_RESULTS_DROPPED,
    QUEUE_DURATION_US,
    QUEUE_SECONDS,
    RECLAIMED,
    REDELIVERED,
    REJECTED_REQUESTS,
    REQUEST_DURATION_US,
    REQUEST_SECONDS,
    SEQUENCE_EVENTS,
    SUCCESS,
)

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

    ``stats`` is the worker's per-batch increment of ``keys.stats`` (its batch loop adds the same
    dict to the statistics hash), so the Prometheus counters and ``/v2/models/stats`` are the
    same numbers.
    """
    success = stats.get("success_count", 0)
    failed = stats.get("fail_count", 0)
    if success:
        child(SUCCESS, model, version).inc(success)
    if failed:
        child(FAILURE, model, version, BACKEND).inc(failed)
    executions = stats.get("execution_count", 0)
    if not executions:
        return
    q_ns = stats.get("queue_ns", 0)
    c_in, c_inf, c_out = (
        stats.get("compute_input_ns", 0),
        stats.get("compute_infer_ns", 0),
        stats.get("compute_output_ns", 0),
    )
    # Cached children: ``labels()`` takes the family's lock and builds its key every call.
    child(INFERENCE_COUNT, model, version).inc(stats.get("inference_count", 0))
    child(EXEC_COUNT, model, version).inc(executions)
    child(REQUEST_DURATION_US, model, version).inc((q_ns + c_in + c_inf + c_out) / 1000)
    child(QUEUE_DURATION_US, model, version).inc(q_ns / 1000)
    child(COMPUTE_INPUT_US, model, version).inc(c_in / 1000)
    child(COMPUTE_INFER_US, model, version).inc(c_inf / 1000)
    child(COMPUTE_OUTPUT_US, model, version).inc(c_out / 1000)
    # Histograms: one observation per execution (the batch's own durations, not per request).
    size = stats.get("inference_count", 0)
    child(BATCH_SIZE, model, version).observe(size)
    for phase in ("input", "infer", "output"):
        ns = stats.get(f"batch:{size}:compute_{phase}_ns", 0)
        child(COMPUTE_SECONDS, model, version, phase).observe(ns / 1e9)


def record_direct(model: str, version: int, priority: int, queue_ns: int) -> None:
    """A direct request ran (``shared.fleet.direct_path``): counted, and its time in the queue
    observed by the worker, since no scheduler saw it."""
    child(DIRECT_DISPATCH, model, version).inc()
    child(QUEUE_SECONDS, model, version, priority).observe(queue_ns / 1e9)


def record_failures(model: str, version: int, reason: str, count: int = 1) -> None:
    FAILURE.labels(model, version, reason).inc(count)


def record_rejected(tenant: str | None, model: str, reason: str) -> None:
    """A request refused at admission. ``tenant``: its name, None for anonymous callers.

    Reasons: rate_limited, unauthenticated, forbidden, no_worker, queue_full, in_flight_limit
    (or another short snake_case word). Callable from any gateway code (the multiprocess
    registry aggregates).
    """
    child(REJECTED_REQUESTS, tenant or "anonymous", model, reason).inc()


def record_client_cancel(model: str) -> None:
    """A gateway marked a request cancelled (its client went away or cancelled)."""
    child(CLIENT_CANCELLATIONS, model).inc()


def init_client_cancels(model: str) -> None:
    """The model's gateway cancellation counter at zero (rates read 0 before the first)."""
    child(CLIENT_CANCELLATIONS, model)


def record_request(model: str, version: int, arm: str, code: str, seconds: float) -> None:
    """One inference request answered by a gateway process (code "OK" or an error code)."""
    child(GATEWAY_REQUESTS, model, version, arm, code).inc()
    child(REQUEST_SECONDS, model, version).observe(seconds)


def record_dead_letter(stage: str, model: str, version: int) -> None:
    child(DEAD_LETTERS, stage, model, version).inc()


def record_late_result(stage: str, model: str, version: int, count: int = 1) -> None:
    """A fenced write refused: this consumer no longer owned the entry."""
    child(LATE_RESULTS_DROPPED, stage, model, version).inc(count)


def record_heartbeat(service: str, ok: bool) -> None:
    child(HEARTBEATS, service, "ok" if ok else "error").inc()


def record_sequence_event(model: str, version: int, event: str, count: int = 1) -> None:
    """A sequence lifecycle event (see ``SEQUENCE_EVENTS``), by whichever process did it."""
    if count:
        child(SEQUENCE_EVENTS, model, version, event).inc(count)
