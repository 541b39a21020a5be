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
  per tenant, Triton's response cache counters (``nv_cache_*_per_model``).
- **all**: Redis round-trip time, heartbeats, reclaimed and redelivered stream entries.

The package: :mod:`~shared.metrics.families` (names, labels, buckets),
:mod:`~shared.metrics.triton_counter` (Triton's counters under their exact names),
:mod:`~shared.metrics.recording` (what services call to count),
:mod:`~shared.metrics.exposition` (the ``/metrics`` text and scrape hooks) and
:mod:`~shared.metrics.redis_rtt` (the Redis round-trip probe). Services use this module's names.
"""

from prometheus_client import CONTENT_TYPE_LATEST

from shared.metrics.cache import CACHE_HIT_US, CACHE_HITS, CACHE_MISS_US, CACHE_MISSES
from shared.metrics.exposition import (
    MULTIPROC_ENV,
    add_renderer,
    exposition,
    multiprocess_dir,
    on_scrape,
)
from shared.metrics.families import (
    BACKEND,
    BATCH_BUCKETS,
    BATCH_SIZE,
    CANCELED,
    CLIENT_CANCELLATIONS,
    COMPUTE_INFER_US,
    COMPUTE_INPUT_US,
    COMPUTE_OUTPUT_US,
    COMPUTE_SECONDS,
    DEAD_LETTERS,
    DIRECT_DISPATCH,
    EXEC_COUNT,
    EXECUTIONS_IN_FLIGHT,
    FAILURE,
    FAILURE_REASONS,
    GATEWAY_REQUESTS,
    HEARTBEATS,
    INFERENCE_COUNT,
    LATE_RESULTS_DROPPED,
    LATENCY_BUCKETS,
    LOAD_DURATION,
    OTHER,
    PENDING,
    QUEUE_DEPTH,
    QUEUE_DURATION_US,
    QUEUE_OLDEST_AGE,
    QUEUE_SECONDS,
    READY_INSTANCES,
    RECLAIMED,
    REDELIVERED,
    REDIS_RTT,
    REJECTED,
    REJECTED_REQUESTS,
    REQUEST_DURATION_US,
    REQUEST_SECONDS,
    SEQUENCE_BACKLOG,
    SEQUENCE_EVENTS,
    SEQUENCE_SLOTS,
    SEQUENCES_ACTIVE,
    SUCCESS,
    WORKER_INSTANCES,
)
from shared.metrics.generation import GENERATION_FAMILIES
from shared.metrics.recording import (
    child,
    forget,
    init_client_cancels,
    init_model,
    init_stage,
    record_batch,
    record_client_cancel,
    record_dead_letter,
    record_direct,
    record_failures,
    record_heartbeat,
    record_late_result,
    record_rejected,
    record_request,
    record_sequence_event,
)
from shared.metrics.redis_rtt import redis_rtt_probe
from shared.metrics.triton_counter import MODEL, TRITON_COUNTERS, TritonCounter

__all__ = [
    "BACKEND",
    "BATCH_BUCKETS",
    "BATCH_SIZE",
    "CACHE_HITS",
    "CACHE_HIT_US",
    "CACHE_MISSES",
    "CACHE_MISS_US",
    "CANCELED",
    "CLIENT_CANCELLATIONS",
    "COMPUTE_INFER_US",
    "COMPUTE_INPUT_US",
    "COMPUTE_OUTPUT_US",
    "COMPUTE_SECONDS",
    "CONTENT_TYPE_LATEST",
    "DEAD_LETTERS",
    "DIRECT_DISPATCH",
    "EXECUTIONS_IN_FLIGHT",
    "EXEC_COUNT",
    "FAILURE",
    "FAILURE_REASONS",
    "GATEWAY_REQUESTS",
    "GENERATION_FAMILIES",
    "HEARTBEATS",
    "INFERENCE_COUNT",
    "LATENCY_BUCKETS",
    "LATE_RESULTS_DROPPED",
    "LOAD_DURATION",
    "MODEL",
    "MULTIPROC_ENV",
    "OTHER",
    "PENDING",
    "QUEUE_DEPTH",
    "QUEUE_DURATION_US",
    "QUEUE_OLDEST_AGE",
    "QUEUE_SECONDS",
    "READY_INSTANCES",
    "RECLAIMED",
    "REDELIVERED",
    "REDIS_RTT",
    "REJECTED",
    "REJECTED_REQUESTS",
    "REQUEST_DURATION_US",
    "REQUEST_SECONDS",
    "SEQUENCES_ACTIVE",
    "SEQUENCE_BACKLOG",
    "SEQUENCE_EVENTS",
    "SEQUENCE_SLOTS",
    "SUCCESS",
    "TRITON_COUNTERS",
    "WORKER_INSTANCES",
    "TritonCounter",
    "add_renderer",
    "child",
    "exposition",
    "forget",
    "init_client_cancels",
    "init_model",
    "init_stage",
    "multiprocess_dir",
    "on_scrape",
    "record_batch",
    "record_client_cancel",
    "record_dead_letter",
    "record_direct",
    "record_failures",
    "record_heartbeat",
    "record_late_result",
    "record_rejected",
    "record_request",
    "record_sequence_event",
    "redis_rtt_probe",
]
