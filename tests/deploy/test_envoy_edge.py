"""Real Envoy, driven by the real control plane, follows gateways that come and go.

Each test runs against every kind in ``deploy_procs.GATEWAY_COMMANDS``: the real gateway
(``python -m gateway``) and a stand-in that keeps only its registry contract. Traffic goes
through Envoy the whole time; killing a gateway may fail only the requests its death cut: those
in flight on it, and those Envoy sent on its pooled connections before it saw them close. Envoy
retries only where no gateway can have received a request (connect failure, refused stream,
reset before the request went out): a retry after a gateway had the request could run it twice.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import deploy_procs as procs
import pytest

from tests.waiting import wait_until

pytestmark = pytest.mark.slow

CLUSTER = "conch_gateways"
FOLLOW_S = 2.0  # joins and leaves must reach Envoy within this
# How long after a kill Envoy may still send on the dead gateway's pooled connections: until its
# event loop has run the close, and a process on these VMs can be frozen for up to a second.
CUT_WINDOW_S = 1.0


def _usable(edge: procs.Edge) -> dict[int, bool]:
    return procs.cluster_hosts(edge.plan.admin_url, CLUSTER)


@pytest.fixture(params=sorted(procs.GATEWAY_COMMANDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _start_gateways(
    names: list[str], edge_redis_url: str, log_dir: Path, kind: str
) -> list[tuple[procs.Proc, int]]:
    """Start them together, then wait until each answers (and so is registered).

    An HTTP answer, not an open port: the real gateway's supervisor listens before its
    processes accept (connections wait in the backlog meanwhile)."""
    started = [procs.start_gateway(name, edge_redis_url, log_dir, kind) for name in names]
    for proc, port in started:
        procs.wait_port(port, 30, proc)  # the real gateway's imports take seconds on 2 cores
        wait_until(lambda p=port: procs.get(f"http://127.0.0.1:{p}/v2/health/live")[0] == 200, 30)  # type: ignore[misc]
    return started


def test_envoy_follows_gateways_without_failed_requests(
    edge: procs.Edge, edge_redis_url: str, log_dir: Path, kind: str
) -> None:
    envoy_pid = edge.envoy.pid
    (a, port_a), (b, port_b) = _start_gateways(
        ["gateway-a", "gateway-b"], edge_redis_url, log_dir, kind
    )
    c = None
    try:
        wait_until(lambda: _usable(edge).get(port_a) and _usable(edge).get(port_b), 5)
        with procs.Traffic(edge.plan.public_url) as traffic:
            time.sleep(0.5)
            killed_at = time.monotonic()
            a.signal(signal.SIGKILL)
            gone = wait_until(lambda: not _usable(edge).get(port_a, False), FOLLOW_S + 1)

            # Joining is timed from the moment the new gateway listens (it registers then);
            # how long its own process takes to start is not Envoy's to follow.
            ((c, port_c),) = _start_gateways(["gateway-c"], edge_redis_url, log_dir, kind)
            joined = wait_until(lambda: _usable(edge).get(port_c, False), FOLLOW_S + 3)
            time.sleep(0.5)

        assert gone <= FOLLOW_S, f"Envoy kept routing to the killed gateway for {gone:.2f}s"
        assert joined <= FOLLOW_S, f"the new gateway took {joined:.2f}s to get traffic"
        in_flight = traffic.in_flight_at(killed_at)
        cut = in_flight + traffic.started_between(killed_at, killed_at + CUT_WINDOW_S)
        failed = traffic.failures()
        assert len(traffic.results) > 50, "traffic did not flow"
        assert len(failed) <= cut, (
            f"{len(failed)} failed requests but only {in_flight} were in flight at the kill "
            f"and {cut - in_flight} sent in the next {CUT_WINDOW_S} s: {failed[:5]}"
        )
        assert all(start <= killed_at + CUT_WINDOW_S for start, _, _ in failed), failed[:5]
        # Envoy was never restarted: the same process applied every change.
        assert edge.envoy.alive() and edge.envoy.pid == envoy_pid
        # The killed gateway's registration expires (3 s), and after the grace for a late
        # heartbeat its endpoint leaves EDS.
        wait_until(lambda: port_a not in _usable(edge), 3.0 + procs.GATEWAY_GRACE_S + FOLLOW_S)
        assert set(_usable(edge)) >= {port_b, port_c}
        print(
            f"kill->unrouted {gone:.2f}s, listening->routed {joined:.2f}s, "
            f"{len(traffic.results)} requests, {len(failed)} failed"
        )
    finally:
        for proc in (a, b, c):
            if proc is not None:
                proc.stop()


def test_graceful_leave_removes_endpoint_within_2s(
    edge: procs.Edge, edge_redis_url: str, log_dir: Path, kind: str
) -> None:
    ((gateway, port),) = _start_gateways(["gateway-leaving"], edge_redis_url, log_dir, kind)
    try:
        wait_until(lambda: _usable(edge).get(port, False), 5)
        gateway.signal(signal.SIGTERM)  # deregisters, then exits
        took = wait_until(lambda: port not in _usable(edge), FOLLOW_S + 1)
        assert took <= FOLLOW_S
    finally:
        gateway.stop()


def test_controlplane_exposes_health_and_metrics(edge: procs.Edge) -> None:
    base = edge.plan.controlplane_health_url.removesuffix("/v2/health/ready")
    assert procs.get(f"{base}/v2/health/live")[0] == 200
    assert procs.get(f"{base}/v2/health/ready")[0] == 200
    status, body = procs.get(f"{base}/metrics")
    assert status == 200
    text = body.decode()
    assert "conch_controlplane_snapshot_version" in text
    assert "conch_controlplane_xds_streams 1.0" in text
    # Envoy's metrics listener exposes only Prometheus stats and readiness, not the admin API.
    metrics = edge.plan.ready_url.removesuffix("/ready")
    assert procs.get(f"{metrics}/stats/prometheus")[0] == 200
    assert procs.get(f"{metrics}/quitquitquit")[0] == 404
