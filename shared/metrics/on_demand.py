"""The metric families of on_demand model control (docs/many-models.md).

Loads and unloads per reason (``shared.fleet.on_demand``'s reasons) are counted by the worker
that did them; the cold-start wait and the hit ratio by the gateway that held the request;
resident models and bytes are each worker's gauges.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Seconds: a cold start is a model load, from tens of milliseconds to minutes.
COLD_START_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

MODEL_LOADS = Counter(
    "conch_model_loads",
    "Model loads by this worker, by why (demand, copy, retry, pinned)",
    ("model", "reason"),
)
MODEL_UNLOADS = Counter(
    "conch_model_unloads",
    "Model unloads by this worker, by why (evicted, idle, api)",
    ("model", "reason"),
)
COLD_START_SECONDS = Histogram(
    "conch_model_cold_start_seconds",
    "From a request's arrival at a gateway to its model being ready, for requests that found "
    "their model not loaded (on_demand mode)",
    ("model",),
    buckets=COLD_START_BUCKETS,
)
MODEL_DEMAND = Counter(
    "conch_model_demand",
    "Requests in on_demand mode by whether their model was loaded (hit) or not (miss)",
    ("outcome",),
)
RESIDENT_MODELS = Gauge(
    "conch_worker_resident_models", "Models this worker holds loaded", ("backend",)
)
RESIDENT_BYTES = Gauge(
    "conch_worker_resident_bytes",
    "Memory the models this worker holds were measured to take",
    ("backend",),
)
BUDGET_BYTES = Gauge(
    "conch_worker_model_memory_budget_bytes",
    "This worker's model memory budget (--model-memory-budget)",
    ("backend",),
)
