"""The bounds of issue 12 have one default each: `conch up`'s flags start where the services'
settings do (a flag that drifted would change a user's mesh without them asking)."""

from __future__ import annotations

from pathlib import Path

from conch.arguments import parser
from gateway.settings import GatewaySettings
from scheduler.settings import SchedulerSettings
from workers.settings import WorkerSettings


def test_conch_up_bounds_default_to_the_services_defaults() -> None:
    args = parser().parse_args(["up", "--model-repository", str(Path("."))])
    gateway, scheduler, worker = GatewaySettings(), SchedulerSettings(), WorkerSettings()
    assert args.max_request_bytes == gateway.max_request_bytes == 64 * 1024 * 1024
    assert args.max_in_flight == gateway.max_in_flight
    assert args.gone_bound_ms == gateway.gone_bound_ms
    assert args.dead_bound_ms == scheduler.dead_bound_ms == worker.dead_bound_ms
    assert args.max_deliveries == scheduler.max_deliveries == worker.max_deliveries


def test_the_bounds_are_ordered_as_the_contract_needs() -> None:
    """A dead bound above a heartbeat's TTL (a late beat is not death), a gone bound above the
    dead bound (refuse only after takeover would have happened)."""
    gateway, scheduler, worker = GatewaySettings(), SchedulerSettings(), WorkerSettings()
    assert scheduler.dead_bound_ms > scheduler.heartbeat_ttl_ms
    assert worker.dead_bound_ms > worker.heartbeat_ttl_ms
    assert gateway.gone_bound_ms > worker.dead_bound_ms


def test_bounds_are_read_from_the_environment() -> None:
    env = {
        "CONCH_GATEWAY_MAX_REQUEST_BYTES": "1024",
        "CONCH_GATEWAY_MAX_IN_FLIGHT": "7",
        "CONCH_GATEWAY_GONE_BOUND_MS": "5000",
        "CONCH_WORKER_DEAD_BOUND_MS": "4000",
    }
    gateway = GatewaySettings.from_env(env)
    assert (gateway.max_request_bytes, gateway.max_in_flight, gateway.gone_bound_ms) == (
        1024,
        7,
        5000,
    )
    assert WorkerSettings.from_env(env).dead_bound_ms == 4000
