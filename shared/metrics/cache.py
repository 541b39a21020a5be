"""Triton's response cache families (``nv_cache_*_per_model``), exported by the gateways.

The cache is looked up and filled at the gateway, whose processes share one ``/metrics`` through
prometheus_client's multiprocess mode. Its Counter would rename Triton's counters
(``_total``), so these are summed gauges, typed ``counter`` in the exposition
(``shared.metrics.exposition``) as Triton types them: dashboards and alerts written for Triton
read them unchanged.
"""

from __future__ import annotations

from prometheus_client import Gauge

from shared.metrics.triton_counter import MODEL

CACHE_HITS = Gauge(
    "nv_cache_num_hits_per_model",
    "Number of cache hits per model",
    MODEL,
    multiprocess_mode="sum",
)
CACHE_MISSES = Gauge(
    "nv_cache_num_misses_per_model",
    "Number of cache misses per model",
    MODEL,
    multiprocess_mode="sum",
)
CACHE_HIT_US = Gauge(
    "nv_cache_hit_duration_per_model",
    "Total cache hit duration per model, in microseconds",
    MODEL,
    multiprocess_mode="sum",
)
CACHE_MISS_US = Gauge(
    "nv_cache_miss_duration_per_model",
    "Total cache miss (lookup and insertion) duration per model, in microseconds",
    MODEL,
    multiprocess_mode="sum",
)
# Families kept as gauges but exposed with Triton's counter type.
COUNTER_TYPED = tuple(
    family._name for family in (CACHE_HITS, CACHE_MISSES, CACHE_HIT_US, CACHE_MISS_US)
)
