"""Every metric family of the mesh: Triton's ``nv_*`` names and Conch's own.

The names, labels, help texts and buckets here are the contract that dashboards, recording rules
and alerts are written against (tests/observability checks them); who exports which family is in
``shared/metrics/__init__.py``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from shared.metrics.triton_counter import MODEL, TritonCounter

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
DIRECT_DISPATCH = Counter(
    "conch_direct_dispatch",
    "Requests that admission sent straight to an idle instance as a batch of one (queue delay "
    "0, nothing queued or in flight), skipping the scheduler; counted by the worker that ran them",
    MODEL,
)
REJECTED_REQUESTS = Counter(
    "conch_requests_rejected",
    "Requests refused at admission, per tenant and reason "
    "(rate_limited, unauthenticated, forbidden, no_worker, queue_full)",
    ("tenant", "model", "reason"),
)
CLIENT_CANCELLATIONS = Counter(
    "conch_requests_cancelled",
    "Requests whose client disconnected, cancelled or stopped reading before the last "
    "response (counted by the gateway that marked them cancelled)",
    ("model",),
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
DEAD_LETTERS = Counter(
    "conch_dead_letters",
    "Stream entries moved to the model's dead-letter stream: undecodable, or not executable "
    "within the delivery bound (stage: scheduler or worker)",
    ("stage", *MODEL),
)
LATE_RESULTS_DROPPED = Counter(
    "conch_late_results_dropped",
    "Acks, statistics or dispatches of a consumer that no longer owned the entry (another "
    "claimed it after the dead bound), dropped by the fence (stage: scheduler or worker)",
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

# --- Sequences (stateful models) ----------------------------------------------------------------
SEQUENCES_ACTIVE = Gauge(
    "conch_sequences_active",
    "Sequences held by this worker's execution instances (bound to one of their slots)",
    MODEL,
    multiprocess_mode="livesum",
)
SEQUENCE_SLOTS = Gauge(
    "conch_sequence_slots",
    "Sequence slots this worker's execution instances offer (occupancy: active / slots)",
    MODEL,
    multiprocess_mode="livesum",
)
SEQUENCE_BACKLOG = Gauge(
    "conch_sequence_backlog",
    "Sequences waiting for a free slot, fleet-wide (read from Redis; take the max across workers)",
    MODEL,
    multiprocess_mode="livemax",
)
SEQUENCE_EVENTS = Counter(
    "conch_sequence_events",
    "Sequence lifecycle events, counted by the process that performed them (event: started, "
    "ended, idle_released, adopted, backlogged, state_committed, commit_refused)",
    (*MODEL, "event"),
)
