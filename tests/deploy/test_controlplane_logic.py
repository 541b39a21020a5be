"""The control plane's pure parts (resources, validation, versions, retirement); Envoy plans.

The gateway-endpoint reader runs against the session's real redis-server.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as aioredis
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from conch import envoy_bootstrap, envoy_edge
from controlplane import pgv, resources
from controlplane.gateway_endpoints import Registration, Resolver, live_gateways
from controlplane.health import HealthServer
from controlplane.metrics import Metrics
from controlplane.service import ControlPlane
from controlplane.settings import ControlPlaneSettings
from controlplane.snapshot import InvalidSnapshot, SnapshotStore, validate
from shared.wire import keys

A = resources.Endpoint("127.0.0.1", 8001)
B = resources.Endpoint("127.0.0.1", 8002)


def _settings(**overrides: object) -> ControlPlaneSettings:
    return ControlPlaneSettings.from_env({}, **overrides)


def test_settings_come_from_the_prefixed_environment() -> None:
    env = {
        "CONCH_CONTROLPLANE_LISTENER_PORT": "9000",
        "CONCH_CONTROLPLANE_ROUTE_TIMEOUT_S": "12.5",
        "CONCH_REDIS_URL": "redis://example:1/2",
        "CONCH_GATEWAY_HTTP_PORT": "1",  # another service's: ignored
    }
    settings = ControlPlaneSettings.from_env(env)
    assert settings.listener_port == 9000
    assert settings.route_timeout_s == 12.5
    assert settings.redis_url == "redis://example:1/2"


def test_built_resources_are_valid_and_carry_the_settings() -> None:
    built = resources.build(_settings(route_timeout_s=7.0, num_retries=4), {A, B})
    validate(built)
    route = built[resources.ROUTE][resources.ROUTE_NAME].virtual_hosts[0].routes[0].route
    assert route.timeout.seconds == 7
    assert route.retry_policy.num_retries.value == 4
    assert "connect-failure" in route.retry_policy.retry_on
    cluster = built[resources.CLUSTER]["conch_gateways"]
    assert cluster.health_checks[0].http_health_check.path == "/v2/health/ready"
    cla = built[resources.ENDPOINT]["conch_gateways"]
    ports = [e.endpoint.address.socket_address.port_value for e in cla.endpoints[0].lb_endpoints]
    assert ports == [8001, 8002]


def test_grpc_at_the_edge_is_an_http2_cluster_routed_by_content_type() -> None:
    grpc = {resources.Endpoint("127.0.0.1", 9001, health_port=8001)}
    plain = resources.build(_settings(), {A})
    assert set(plain[resources.LISTENER]) == {resources.LISTENER_NAME}  # off unless a port
    built = resources.build(_settings(grpc_listener_port=8081, route_timeout_s=7.0), {A, B}, grpc)
    validate(built)
    listeners = built[resources.LISTENER]
    assert set(listeners) == {resources.LISTENER_NAME, resources.GRPC_LISTENER_NAME}
    assert listeners[resources.GRPC_LISTENER_NAME].address.socket_address.port_value == 8081
    routes = built[resources.ROUTE][resources.ROUTE_NAME].virtual_hosts[0].routes
    assert [r.route.cluster for r in routes] == [
        "conch_gateways_grpc",
        "conch_gateways_grpc",
        "conch_gateways",
    ]
    stream, unary, http = routes
    assert stream.match.path == resources.GRPC_STREAM_PATH
    assert stream.route.timeout.ToSeconds() == 0  # a stream lasts as long as its client wants
    assert unary.route.timeout.seconds == 7 and http.route.timeout.seconds == 7
    for route in (stream, unary):
        (header,) = route.match.headers
        assert header.name == "content-type"
        assert header.string_match.prefix == "application/grpc"
    assert not http.match.headers
    cluster = built[resources.CLUSTER]["conch_gateways_grpc"]
    options = http_protocol_options_pb2.HttpProtocolOptions()
    assert next(iter(cluster.typed_extension_protocol_options.values())).Unpack(options)
    assert options.explicit_http_config.HasField("http2_protocol_options")
    assert cluster.health_checks[0].http_health_check.path == "/v2/health/ready"
    (lb,) = built[resources.ENDPOINT]["conch_gateways_grpc"].endpoints[0].lb_endpoints
    assert lb.endpoint.address.socket_address.port_value == 9001
    assert lb.endpoint.health_check_config.port_value == 8001  # checked on its HTTP port
    # A gRPC endpoint that comes or goes changes endpoints only: listeners and routes stay.
    store = SnapshotStore()
    first = store.propose(built)
    moved = {resources.Endpoint("127.0.0.1", 9002, health_port=8002)}
    cfg = _settings(grpc_listener_port=8081, route_timeout_s=7.0)
    second = store.propose(resources.build(cfg, {A, B}, grpc | moved))
    assert first is not None and second is not None
    for kind in (resources.LISTENER, resources.ROUTE, resources.CLUSTER):
        assert second.type_versions[kind] == first.version
    assert second.type_versions[resources.ENDPOINT] == second.version


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"listener_port": 70000}, "port_value"),
        ({"cluster_name": ""}, "name"),
        ({"health_check_interval_s": 0.0}, "interval"),
        ({"health_check_path": ""}, "path"),
    ],
)
def test_validation_rejects_what_envoy_would_nack(overrides: dict, problem: str) -> None:
    with pytest.raises(InvalidSnapshot) as caught:
        validate(resources.build(_settings(**overrides), {A}))
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_validation_rejects_dangling_references_and_hostnames() -> None:
    built = resources.build(_settings(), {resources.Endpoint("gateway-1", 8000)})
    with pytest.raises(InvalidSnapshot, match="not an IP address"):
        validate(built)
    built = resources.build(_settings(), {A})
    del built[resources.CLUSTER]["conch_gateways"]
    with pytest.raises(InvalidSnapshot, match="unknown cluster"):
        validate(built)


def test_pgv_reads_rules_from_any_payloads() -> None:
    listener = resources.listener(_settings())
    assert pgv.validate(listener) == []
    hcm_any = listener.filter_chains[0].filters[0].typed_config
    hcm_any.value = hcm_any.value + b"\x12\x00"  # stat_prefix = "" (min_len 1)
    assert any("stat_prefix" in p for p in pgv.validate(listener))


def test_versions_move_only_on_change_and_per_type() -> None:
    store = SnapshotStore()
    first = store.propose(resources.build(_settings(), {A}))
    assert first is not None and first.version == 1
    assert store.propose(resources.build(_settings(), {A})) is None
    second = store.propose(resources.build(_settings(), {A, B}))
    assert second is not None and second.version == 2
    assert second.type_versions[resources.ENDPOINT] == 2
    assert second.type_versions[resources.LISTENER] == 1  # listeners untouched: not resent
    with pytest.raises(InvalidSnapshot):
        store.propose(resources.build(_settings(listener_port=70000), {A}))
    assert store.current is second and store.rejected == 1


def test_a_dropped_cluster_is_retired_until_routes_without_it_are_acked() -> None:
    store = SnapshotStore(retire_timeout_s=60)
    store.propose(resources.build(_settings(), {A}))
    store.stream_opened(1)
    snapshot = store.propose(resources.build(_settings(cluster_name="gw_b"), {A}))
    assert snapshot is not None
    assert set(snapshot.resources[resources.CLUSTER]) == {"conch_gateways", "gw_b"}
    assert store.retired == ["conch_gateways"]
    assert store.release_retired() is None  # nothing ACKed yet
    store.record_ack(1, resources.LISTENER, snapshot.type_versions[resources.LISTENER])
    store.record_ack(1, resources.ROUTE, snapshot.type_versions[resources.ROUTE])
    released = store.release_retired()
    assert released is not None and set(released.resources[resources.CLUSTER]) == {"gw_b"}
    assert store.retired == []
    # Further updates do not resurrect it.
    later = store.propose(resources.build(_settings(cluster_name="gw_b"), {A, B}))
    assert later is not None and set(later.resources[resources.CLUSTER]) == {"gw_b"}


def test_retirement_ends_after_the_timeout_without_acks() -> None:
    store = SnapshotStore(retire_timeout_s=0.0)
    store.propose(resources.build(_settings(), {A}))
    store.stream_opened(1)
    store.propose(resources.build(_settings(cluster_name="gw_b"), {A}))
    time.sleep(0.01)
    assert store.release_retired() is not None and store.retired == []


async def test_resolver_maps_unspecified_and_names_to_ips() -> None:
    resolver = Resolver(fallback_host="127.0.0.9")
    assert await resolver.resolve("0.0.0.0") == "127.0.0.9"
    assert await resolver.resolve("::1") == "::1"
    assert await resolver.resolve("localhost") in ("127.0.0.1", "::1")
    assert await resolver.resolve("no-such-host.invalid") is None
    regs = [Registration("a", "127.0.0.1", 8001), Registration("b", "127.0.0.1", 8001)]
    assert await resolver.endpoints(regs) == {A}  # processes sharing a port: one endpoint
    # Only the process that serves gRPC registers it; its endpoint is checked on the HTTP port.
    regs[0] = Registration("a", "127.0.0.1", 8001, grpc_port=9001)
    assert await resolver.endpoint_sets(regs) == (
        {A},
        {resources.Endpoint("127.0.0.1", 9001, health_port=8001)},
    )


async def test_live_gateways_follow_heartbeat_expiry(edge_redis_url: str) -> None:
    client = aioredis.Redis.from_url(edge_redis_url)
    now = int(time.time() * 1000)
    registry = keys.service_registry("gateway")
    try:
        await client.delete(registry)
        await client.zadd(registry, {"live": now + 3000, "dead": now - 1, "no-info": now + 3000})
        await client.hset(keys.service_info("gateway", "live"), mapping={"host": "h", "port": "1"})
        await client.hset(keys.service_info("gateway", "dead"), mapping={"host": "h", "port": "2"})
        found = await live_gateways(client, now)
        assert found == [Registration("live", "h", 1)]
        await client.hset(keys.service_info("gateway", "live"), "grpc_port", "9")
        assert await live_gateways(client, now) == [Registration("live", "h", 1, grpc_port=9)]
    finally:
        await client.delete(registry, keys.service_info("gateway", "live"))
        await client.delete(keys.service_info("gateway", "dead"))
        await client.aclose()


async def test_a_late_heartbeat_keeps_its_gateway_routed_within_the_grace(
    edge_redis_url: str,
) -> None:
    """A Redis stall longer than the heartbeat TTL expires every gateway's heartbeat and details
    at once: within the grace the control plane keeps routing to the address it last read,
    a gateway past the grace or deregistered (gone from the registry) is dropped."""
    client = aioredis.Redis.from_url(edge_redis_url)
    now = int(time.time() * 1000)
    registry = keys.service_registry("gateway")
    info = keys.service_info("gateway", "late")
    remembered: dict[str, Registration] = {}
    try:
        await client.delete(registry)
        await client.zadd(registry, {"late": now + 3000})
        await client.hset(info, mapping={"host": "h", "port": "7"})
        assert await live_gateways(client, now, 10_000, remembered) == [
            Registration("late", "h", 7)
        ]
        await client.delete(info)  # the details expired with the heartbeat
        later = now + 3000 + 5_000  # the heartbeat is 5 s late
        assert await live_gateways(client, later) == []
        assert await live_gateways(client, later, 10_000, remembered) == [
            Registration("late", "h", 7)
        ]
        assert await live_gateways(client, now + 3000 + 11_000, 10_000, remembered) == []
        assert remembered == {}
        await client.zrem(registry, "late")  # a clean stop
        assert (
            await live_gateways(client, later, 10_000, {"late": Registration("late", "h", 7)}) == []
        )
    finally:
        await client.delete(registry, info)
        await client.aclose()


def test_health_routes() -> None:
    ready = {"value": False}
    server = HealthServer(Metrics(), ready=lambda: ready["value"])
    assert server.route("GET", "/v2/health/live")[0] == 200
    assert server.route("GET", "/v2/health/ready")[0] == 503
    ready["value"] = True
    assert server.route("GET", "/v2/health/ready?x=1")[0] == 200
    status, _content_type, body = server.route("GET", "/metrics")
    assert status == 200 and b"conch_controlplane_live_gateways" in body
    assert server.route("POST", "/metrics")[0] == 405
    assert server.route("GET", "/nope")[0] == 404


def test_launch_plan_for_conch_up(tmp_path: object) -> None:
    plan = envoy_edge.plan_edge(
        "redis://127.0.0.1:6390/0",
        8080,
        workdir=str(tmp_path),
        python="/usr/bin/python3",
        envoy_path="/opt/envoy",
        controlplane_env={"CONCH_CONTROLPLANE_ROUTE_TIMEOUT_S": "5"},
    )
    assert plan.controlplane.argv == ["/usr/bin/python3", "-m", "controlplane"]
    env = plan.controlplane.env
    assert env["CONCH_REDIS_URL"] == "redis://127.0.0.1:6390/0"
    assert env["CONCH_CONTROLPLANE_LISTENER_PORT"] == "8080"
    assert env["CONCH_CONTROLPLANE_XDS_PORT"] == str(plan.ports["xds"])
    assert env["CONCH_CONTROLPLANE_ROUTE_TIMEOUT_S"] == "5"
    assert plan.envoy.argv[:3] == ["/opt/envoy", "-c", str(plan.bootstrap_path)]
    assert len(set(plan.ports.values())) == len(plan.ports)
    written = json.loads(plan.bootstrap_path.read_text())
    xds = written["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]
    address = xds["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert address == {"address": "127.0.0.1", "port_value": plan.ports["xds"]}
    assert written["admin"]["address"]["socket_address"]["port_value"] == plan.ports["admin"]
    assert plan.public_url == "http://127.0.0.1:8080"
    assert plan.controlplane.environ({"A": "1"})["A"] == "1"
    assert (
        envoy_bootstrap.render(xds_host="x", xds_port=1, metrics_port=None)["static_resources"][
            "listeners"
        ]
        == []
    )


async def test_a_redis_outage_keeps_the_last_snapshot_in_force() -> None:
    """With the registry unreadable, Envoy keeps being served what it had."""
    dead_port = envoy_edge.free_port()
    settings = _settings(
        redis_url=f"redis://127.0.0.1:{dead_port}/0",
        xds_host="127.0.0.1",
        xds_port=0,
        health_host="127.0.0.1",
        health_port=0,
        poll_interval_s=0.05,
    )
    plane = ControlPlane(settings)
    await plane.start()
    plane.publish({A})
    version = plane.store.current.version if plane.store.current else 0
    watcher = asyncio.create_task(plane.watch())
    try:
        await asyncio.sleep(0.5)
        errors = plane.metrics.registry.get_sample_value("conch_controlplane_redis_errors_total")
        assert errors is not None and errors >= 1
        assert plane.store.current is not None and plane.store.current.version == version
        assert plane.health.route("GET", "/v2/health/ready")[0] == 200
    finally:
        plane.stop()
        await watcher
        await plane.close()
