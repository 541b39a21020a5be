"""Envoy itself (``envoy --mode validate``) accepts the bootstraps and every xDS resource.

Validate mode loads a config exactly as a start would, without opening ports, so the resources
the control plane serves over ADS are checked here by the same Envoy the edge runs: as static
resources in a bootstrap.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format

from conch import envoy_bootstrap, envoy_edge
from controlplane import resources
from controlplane.settings import ControlPlaneSettings

ROOT = Path(__file__).resolve().parents[2]


def envoy_validate(envoy_path: str, config: dict[str, Any] | Path, tmp_path: Path) -> str:
    """Envoy's verdict; raises AssertionError with Envoy's reason when it rejects."""
    if isinstance(config, Path):
        path = config
    else:
        path = tmp_path / "envoy.json"
        path.write_text(json.dumps(config))
    result = subprocess.run(
        [envoy_path, "--mode", "validate", "-c", str(path), "--log-level", "error"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-2000:]
    return output


def _static(
    settings: ControlPlaneSettings,
    endpoints: set[resources.Endpoint],
    grpc_endpoints: set[resources.Endpoint] | None = None,
) -> dict[str, Any]:
    """A bootstrap carrying the snapshot's listeners, route and clusters as static resources."""
    built = resources.build(settings, endpoints, grpc_endpoints or set())
    config = envoy_bootstrap.render(xds_host="127.0.0.1", xds_port=18000)

    def as_dict(msg: Any) -> dict[str, Any]:
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    for listener_msg in built[resources.LISTENER].values():
        listener = as_dict(listener_msg)
        hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
        del hcm["rds"]
        hcm["route_config"] = as_dict(built[resources.ROUTE][resources.ROUTE_NAME])
        config["static_resources"]["listeners"].append(listener)
    for name, cluster_msg in built[resources.CLUSTER].items():
        cluster = as_dict(cluster_msg)
        cluster["type"] = "STATIC"
        del cluster["eds_cluster_config"]
        cluster["load_assignment"] = as_dict(built[resources.ENDPOINT][name])
        config["static_resources"]["clusters"].append(cluster)
    return config


@pytest.mark.parametrize("path", ["deploy/envoy/envoy.yaml", "k8s/base/envoy/envoy.yaml"])
def test_deployed_bootstrap_is_accepted_by_envoy(
    envoy_path: str, path: str, tmp_path: Path
) -> None:
    assert "OK" in envoy_validate(envoy_path, ROOT / path, tmp_path)


def test_launch_bootstrap_is_accepted_by_envoy(envoy_path: str, tmp_path: Path) -> None:
    plan = envoy_edge.plan_edge(
        "redis://127.0.0.1:6379/0", 18080, workdir=tmp_path, envoy_path=envoy_path
    )
    envoy_validate(envoy_path, plan.bootstrap_path, tmp_path)


def test_served_resources_are_accepted_by_envoy(envoy_path: str, tmp_path: Path) -> None:
    settings = ControlPlaneSettings.from_env({}, per_try_timeout_s=2.0, route_timeout_s=5.0)
    endpoints = {resources.Endpoint("127.0.0.1", 8000), resources.Endpoint("10.1.2.3", 8001)}
    envoy_validate(envoy_path, _static(settings, endpoints), tmp_path)


def test_served_grpc_resources_are_accepted_by_envoy(envoy_path: str, tmp_path: Path) -> None:
    """With a gRPC listener: two listeners on one route config, the HTTP/2 cluster of the
    gateways' gRPC ports, each health-checked on its gateway's HTTP port."""
    settings = ControlPlaneSettings.from_env({}, grpc_listener_port=18081)
    endpoints = {resources.Endpoint("127.0.0.1", 8000), resources.Endpoint("10.1.2.3", 8000)}
    grpc = {
        resources.Endpoint("127.0.0.1", 8001, health_port=8000),
        resources.Endpoint("10.1.2.3", 8001, health_port=8000),
    }
    config = _static(settings, endpoints, grpc)
    assert len(config["static_resources"]["clusters"]) >= 2
    envoy_validate(envoy_path, config, tmp_path)


def test_envoy_rejects_a_broken_config(envoy_path: str, tmp_path: Path) -> None:
    """The validator must be able to fail: a port Envoy refuses is caught."""
    settings = ControlPlaneSettings.from_env({}, listener_port=70000)
    config = _static(settings, {resources.Endpoint("127.0.0.1", 8000)})
    with pytest.raises(AssertionError, match="65535"):
        envoy_validate(envoy_path, config, tmp_path)


def test_retries_happen_only_where_no_gateway_can_have_the_request(
    envoy_path: str, tmp_path: Path
) -> None:
    """Issue 12: a plain ``reset`` retry re-sent requests a gateway had already queued (run
    twice). Envoy's validate mode accepts unknown retry_on tokens silently, so the shipped
    binary is also checked to know the one the policy relies on."""
    settings = ControlPlaneSettings.from_env({})
    policy = resources.route(settings).virtual_hosts[0].routes[0].route.retry_policy
    assert set(policy.retry_on.split(",")) == {
        "connect-failure",
        "refused-stream",
        "reset-before-request",
    }
    envoy_validate(envoy_path, _static(settings, {resources.Endpoint("127.0.0.1", 8000)}), tmp_path)
    assert b"reset-before-request" in Path(envoy_path).read_bytes()
