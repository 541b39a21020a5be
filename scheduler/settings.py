"""Scheduler settings, from CONCH_SCHEDULER_* (and CONCH_REDIS_URL)."""

from __future__ import annotations

from shared.fleet.control import check_mode
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
    # Triton's --model-control-mode as the scheduler sees it: in on_demand the scheduler runs
    # the placer (one scheduler of the fleet at a time, by lease), which loads a model on one
    # worker when it is first asked for and moves copies with traffic (docs/many-models.md).
    model_control_mode: str = "none"
    # on_demand: a copy that executed nothing for this long is unloaded, down to
    # model_min_copies (--model-idle-unload-seconds); 0 never unloads for idleness.
    model_idle_unload_s: float = 300
    # on_demand: the copies an idle model keeps (--model-min-copies); 0 lets an idle model go
    # entirely (it stays indexed and loads again on its next request). Pinned models keep one.
    model_min_copies: int = 1
    # on_demand: a load not answered within this long is placed again on another worker (its
    # worker is stuck; one that died is seen sooner, by its heartbeat).
    model_load_timeout_s: float = 300
    # on_demand: how often the placer looks at demand, loads and copies (a new demand wakes it
    # at once); each look is a few Redis reads.
    placer_tick_ms: int = 250
    # on_demand: the placer's lease; a placer that stops renewing it (dead, cut off) is
    # replaced by another scheduler's within this long.
    placer_lease_ms: int = 3_000

    def __post_init__(self) -> None:
        self.model_control_mode = check_mode(
            self.model_control_mode, "CONCH_SCHEDULER_MODEL_CONTROL_MODE"
        )
        if self.model_idle_unload_s < 0:
            raise ValueError(
                f"CONCH_SCHEDULER_MODEL_IDLE_UNLOAD_S is {self.model_idle_unload_s}; expected "
                "seconds of 0 or more (0: never unload an idle copy)"
            )
        if self.model_min_copies < 0:
            raise ValueError(
                f"CONCH_SCHEDULER_MODEL_MIN_COPIES is {self.model_min_copies}; expected 0 or "
                "more (0: an idle model may go entirely)"
            )
        if self.model_load_timeout_s <= 0:
            raise ValueError(
                f"CONCH_SCHEDULER_MODEL_LOAD_TIMEOUT_S is {self.model_load_timeout_s}; "
                "expected seconds above 0"
            )
        if not 10 <= self.placer_tick_ms <= 60_000:
            raise ValueError(
                f"CONCH_SCHEDULER_PLACER_TICK_MS is {self.placer_tick_ms}; expected 10 to 60000"
            )
        if self.placer_lease_ms < 3 * self.placer_tick_ms:
            raise ValueError(
                f"CONCH_SCHEDULER_PLACER_LEASE_MS is {self.placer_lease_ms}; expected at least "
                f"3 placer ticks ({3 * self.placer_tick_ms}): the holder renews it every tick"
            )
