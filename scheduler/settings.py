"""Scheduler settings, from CONCH_SCHEDULER_* (and CONCH_REDIS_URL)."""

from __future__ import annotations

from shared.runtime.settings import Settings


class SchedulerSettings(Settings, kw_only=True):
    __prefix__ = "CONCH_SCHEDULER_"

    # Address of the scheduler's /health/live, /health/ready and /metrics.
    health_host: str = "0.0.0.0"
    # Port of those probes and /metrics; a port in use stops the service (exit 78).
    health_port: int = 8010
    # How often the scheduler renews its heartbeat (others take its pending entries over once
    # it is older than the dead bound).
    heartbeat_interval_ms: int = 1_000
    # A scheduler heartbeat not renewed within this long expires.
    heartbeat_ttl_ms: int = 3_000
    # The registry and readiness are re-read when the change feed announces a change
    # (``shared/fleet/change_feed.py``); this is the safety poll that catches a lost notice.
    refresh_interval_ms: int = 10_000
    # Entries read per XREADGROUP call.
    read_count: int = 512
    # Read the request streams with one XREADGROUP per hash slot (concurrently) rather than one
    # over all of them. Always so on Redis Cluster, which refuses a read across slots; on one
    # Redis, one read is cheaper, and this forces the cluster's plan there (the slot check).
    read_by_slot: bool = False
    # How often pending entries of dead schedulers are looked for.
    reclaim_interval_ms: int = 1_000
    # A scheduler is dead, and its pending entries may be claimed, once its last heartbeat is
    # this old; entries are claimed only when idle this long. Well above a 5 s freeze.
    dead_bound_ms: int = 10_000
    # Ensemble steps are refused at once only when no worker of the composing model has been
    # ready within this bound (as the gateway's admission does).
    gone_bound_ms: int = 30_000
    # The queue of a version gone from the fleet (unloaded) is removed after this long.
    retire_after_ms: int = 5_000
    # An entry delivered more often than this is answered with an error instead of retried.
    max_deliveries: int = 3
    # Batches queued per live instance beside the one it executes. 0 is Triton's behaviour: the
    # next batch keeps growing until an instance is free (workers announce each finished batch).
    queued_batches_per_instance: int = 0
    # While held back, how often the batch stream's backlog is re-read if no worker has announced
    # a finished batch (workers publish one message per batch; this is the fallback).
    backlog_poll_us: int = 20_000
