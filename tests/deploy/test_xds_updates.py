"""Updates that could hurt: an invalid config, and a cluster replaced under traffic.

The control plane runs in this process (so the test can hand it a config), Envoy and the gateway
are real processes. An invalid snapshot is refused before its version is bumped; forced past that
check, Envoy NACKs it, the NACK is logged and counted, and Envoy keeps serving the last good
config. Replacing the gateway cluster keeps the old one until Envoy ACKed routes to the new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import deploy_procs as procs
import msgspec
import pytest

from conch import envoy_edge
from controlplane import resources
from controlplane.service import ControlPlane
from controlplane.settings import ControlPlaneSettings
from controlplane.snapshot import InvalidSnapshot
from tests.waiting import eventually, until

pytestmark = pytest.mark.slow


async def _public_ok(url: str) -> bool:
    return (await asyncio.to_thread(procs.get, f"{url}/v2"))[0] == 200


class Harness:
    def __init__(self, plane: ControlPlane, plan: envoy_edge.EdgePlan, gateway_port: int):
        self.plane = plane
        self.plan = plan
        self.endpoints = {resources.Endpoint("127.0.0.1", gateway_port)}

    def count(self, name: str, type_name: str) -> float:
        value = self.plane.metrics.registry.get_sample_value(
            f"conch_controlplane_xds_{name}_total", {"type": type_name}
        )
        return value or 0.0


@pytest.fixture
async def harness(edge_redis_url: str, log_dir: Path, envoy_path: str) -> AsyncIterator[Harness]:
    # The stand-in: these tests are about the control plane, and it starts in a blink.
    gateway, gateway_port = procs.start_gateway("gateway", edge_redis_url, log_dir, "standin")
    listener_port = procs.free_port()
    settings = ControlPlaneSettings.from_env(
        {},
        redis_url=edge_redis_url,
        xds_host="127.0.0.1",
        xds_port=procs.free_port(),
        health_host="127.0.0.1",
        health_port=0,
        listener_host="127.0.0.1",
        listener_port=listener_port,
    )
    plane = ControlPlane(settings)
    await plane.start()
    plane.publish({resources.Endpoint("127.0.0.1", gateway_port)})
    plan = envoy_edge.plan_edge(
        edge_redis_url,
        listener_port,
        xds_port=plane.xds_port,
        workdir=log_dir / "edge",
        envoy_path=envoy_path,
        concurrency=1,
    )
    envoy = procs.Proc("envoy", plan.envoy.argv, plan.envoy.env, log_dir)
    try:
        await asyncio.to_thread(procs.wait_port, gateway_port, 10, gateway)
        assert await until(lambda: envoy.alive(), 1)

        async def public_ok() -> bool:
            if await _public_ok(plan.public_url):
                return True
            assert envoy.alive(), envoy.log()
            return False

        assert await eventually(public_ok, bool, within=15, every=0.05), envoy.log()
        yield Harness(plane, plan, gateway_port)
    finally:
        envoy.stop()
        await plane.close()
        gateway.stop()


async def test_invalid_update_is_never_sent_and_a_nack_keeps_the_last_good_config(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    plane, store = harness.plane, harness.plane.store
    good = plane.settings
    bad = msgspec.structs.replace(good, listener_port=70000)
    version = store.current.version if store.current else 0

    # Refused by validation: no version bump, nothing for Envoy to see.
    with pytest.raises(InvalidSnapshot, match="port_value"):
        store.propose(resources.build(bad, harness.endpoints))
    plane.settings = bad
    plane.publish(harness.endpoints)
    plane.settings = good
    assert store.current is not None and store.current.version == version
    assert plane.metrics.registry.get_sample_value(
        "conch_controlplane_snapshots_rejected_total"
    ) == pytest.approx(1)

    # Forced past validation, Envoy itself rejects it and keeps serving the old listener.
    caplog.set_level(logging.WARNING, logger="controlplane.ads")
    store.propose(resources.build(bad, harness.endpoints), check=False)
    assert await until(lambda: harness.count("nacks", "Listener") >= 1, 5)
    assert "envoy rejected config" in caplog.text
    # Envoy's own reason is in the log record.
    assert any("65535" in str(getattr(r, "error", "")) for r in caplog.records)
    assert await _public_ok(harness.plan.public_url)

    # The next good snapshot is accepted.
    acks = harness.count("acks", "Listener")
    plane.publish(harness.endpoints)
    assert await until(lambda: harness.count("acks", "Listener") > acks, 5)
    assert await _public_ok(harness.plan.public_url)


async def test_replacing_the_cluster_is_make_before_break(harness: Harness) -> None:
    plane, store = harness.plane, harness.plane.store
    old_name = plane.settings.cluster_name
    with procs.Traffic(harness.plan.public_url, threads=2) as traffic:
        await asyncio.sleep(0.3)
        plane.settings = msgspec.structs.replace(plane.settings, cluster_name="conch_gateways_b")
        plane.publish(harness.endpoints)
        # The old cluster is still offered while Envoy may route to it...
        assert store.retired == [old_name]
        assert store.current is not None
        assert old_name in store.current.resources[resources.CLUSTER]
        # ...and dropped once Envoy ACKed the listener and routes that no longer use it.
        assert await until(lambda: store.retired == [], 5)
        assert old_name not in store.current.resources[resources.CLUSTER]
        admin = harness.plan.admin_url

        def old_cluster_gone() -> bool:
            return procs.cluster_hosts(admin, old_name) == {} and any(
                procs.cluster_hosts(admin, "conch_gateways_b").values()
            )

        assert await until(old_cluster_gone, 5)
        await asyncio.sleep(0.3)
    assert len(traffic.results) > 20
    assert traffic.failures() == []
