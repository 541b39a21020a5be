"""The standard gRPC health service (grpc.health.v1.Health) on the gateway's gRPC port, called as
Kubernetes' gRPC probes and load balancers call it (grpcio, the health protocol's messages):
Check and Watch say NOT_SERVING before the models are ready and SERVING after, agreeing with
/v2/health/ready; the container probe (``python -m gateway.grpc.health``) that compose runs
agrees too; and the manifests probe what this test checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
import yaml

from conch.ports import free_port
from conch.private_redis import PrivateRedis
from gateway.grpc import health
from tests.mesh import ROOT, Mesh, flush_database, write_example_models
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

PROBE = ["python", "-m", "gateway.grpc.health"]


@pytest.fixture(scope="module")
def starting_mesh(
    redis_server: PrivateRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Mesh, int]]:
    """A gateway and a scheduler, but no worker yet: the gateway is up and not ready."""
    flush_database(redis_server.url)
    repository = tmp_path_factory.mktemp("health_models")
    write_example_models(repository, "simple")
    port = free_port()
    mesh = Mesh(redis_server.url, repository, log_dir=tmp_path_factory.mktemp("health_logs"))
    try:
        mesh.start_scheduler()
        mesh.start_gateway(processes=2, CONCH_GATEWAY_GRPC_PORT=str(port))
        yield mesh, port
    finally:
        mesh.stop()


def _call(port: int, method: str, service: str = "") -> Any:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    kind = channel.unary_stream if method == "Watch" else channel.unary_unary
    call = kind(
        f"/{health.SERVICE}/{method}",
        request_serializer=health.HealthCheckRequest.SerializeToString,
        response_deserializer=health.HealthCheckResponse.FromString,
    )
    timeout = None if method == "Watch" else 2.0
    return call(health.HealthCheckRequest(service=service), timeout=timeout)


def _check(port: int, service: str = "") -> int | None:
    try:
        return int(_call(port, "Check", service).status)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:  # not listening yet
            return None
        raise


def _http_ready(mesh: Mesh) -> int:
    return httpx.get(f"http://{mesh.url}/v2/health/ready", timeout=2).status_code


def _probe(port: int) -> int:
    env = {**os.environ, "CONCH_GATEWAY_GRPC_PORT": str(port)}
    return subprocess.run([sys.executable, *PROBE[1:]], env=env, cwd=ROOT, timeout=10).returncode


class Watcher:
    """A Watch stream read on a thread: the statuses it sent, and whether it ended."""

    def __init__(self, port: int, service: str = ""):
        self.statuses: list[int] = []
        self.ended = threading.Event()
        self.call = _call(port, "Watch", service)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for response in self.call:
                self.statuses.append(int(response.status))
        except grpc.RpcError:
            pass
        self.ended.set()


def test_health_follows_readiness_from_start_to_stop(starting_mesh: tuple[Mesh, int]) -> None:
    mesh, port = starting_mesh
    wait_until(lambda: _check(port) is not None, 30, failure=lambda: mesh.logs())
    assert _check(port) == health.NOT_SERVING
    assert _check(port, "inference.GRPCInferenceService") == health.NOT_SERVING
    assert _http_ready(mesh) == 503
    assert _probe(port) == 1
    watcher = Watcher(port)
    unknown = Watcher(port, "no.such.Service")
    with pytest.raises(grpc.RpcError) as caught:
        _call(port, "Check", "no.such.Service")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND

    mesh.start_worker()
    mesh.wait_ready(["simple"])
    wait_until(lambda: _check(port) == health.SERVING, 10)
    assert _check(port, "inference.GRPCInferenceService") == health.SERVING
    assert _http_ready(mesh) == 200
    assert _probe(port) == 0
    wait_until(lambda: watcher.statuses[-1:] == [health.SERVING], 5)
    assert watcher.statuses == [health.NOT_SERVING, health.SERVING]
    assert unknown.statuses == [health.SERVICE_UNKNOWN] and not unknown.ended.is_set()

    mesh.signal("gateway", signal.SIGTERM)  # a stopping gateway ends its watchers at once
    assert watcher.ended.wait(10), mesh.log("gateway")
    assert watcher.statuses == [health.NOT_SERVING, health.SERVING, health.NOT_SERVING]
    assert unknown.ended.wait(10)


def test_orchestrators_probe_the_grpc_health_service() -> None:
    """Compose runs the probe this test runs; Kubernetes' gRPC probe calls the service on the
    port the gateway serves gRPC on."""
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for name in ("gateway-1", "gateway-2"):
        assert compose["services"][name]["healthcheck"]["test"] == ["CMD", *PROBE]
    deployment = yaml.safe_load((ROOT / "k8s/base/gateway/deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["grpc"]["port"] == ports["grpc"]
    assert int(env["CONCH_GATEWAY_GRPC_PORT"]) == ports["grpc"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
