"""compose.yaml: valid against the Compose specification, and shaped into a working mesh.

The schema is the Compose spec JSON schema that check-jsonschema vendors; the shape checks are
what the schema cannot know (healthchecks everywhere, GPU reservations, files that exist).
"""

from __future__ import annotations

import copy
import json
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
GPU_WORKERS = {"worker-onnxruntime-gpu", "worker-pytorch-gpu", "worker-tensorrt"}
CPU_WORKERS = {"worker-onnxruntime", "worker-pytorch"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema_file = importlib_resources.files("check_jsonschema.builtin_schemas.vendor").joinpath(
        "compose-spec.json"
    )
    schema = json.loads(schema_file.read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _errors(validator: jsonschema.Draft202012Validator, doc: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


def test_compose_matches_the_compose_spec(validator: Any, compose: dict[str, Any]) -> None:
    assert _errors(validator, compose) == []


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split("/")
    node = doc
    for key in parents:
        node = node[key]
    node[last] = value


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("services/redis/healthcheck/interval", 10),  # must be a duration string
        ("services/scheduler/retriez", 3),  # unknown key
        (
            "services/worker-tensorrt/deploy/resources/reservations/devices",
            [{"driver": "nvidia", "count": 1, "capabilities": "gpu"}],  # must be a list
        ),
        ("services/envoy/depends_on/controlplane/condition", "service_happy"),
        ("services/envoy/ports", "8080:8080"),  # must be a list
    ],
)
def test_a_broken_compose_file_is_rejected(
    validator: Any, compose: dict[str, Any], path: str, value: Any
) -> None:
    broken = copy.deepcopy(compose)
    _set(broken, path, value)
    assert _errors(validator, broken), f"schema accepted {path}={value!r}"


def test_every_service_has_a_healthcheck_and_waits_for_healthy_dependencies(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no healthcheck"
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert condition["condition"] == "service_healthy", f"{name} -> {dependency}"
            # A service may depend on a profile's service only from within that profile.
            needed = set(services[dependency].get("profiles", []))
            assert needed <= set(service.get("profiles", [])), f"{name} needs profile {needed}"


def test_the_mesh_has_every_part(compose: dict[str, Any]) -> None:
    services = compose["services"]
    expected = {"redis", "controlplane", "envoy", "gateway-1", "gateway-2", "scheduler"}
    expected |= {"worker-python", "prometheus", "grafana"} | GPU_WORKERS | CPU_WORKERS
    assert expected <= set(services)
    # Envoy is the only public way in (HTTP and gRPC, as Triton's 8000 and 8001), and the
    # control plane tells it the listener ports.
    assert services["envoy"]["ports"] == [
        "${CONCH_HTTP_PORT:-8080}:8080",
        "${CONCH_GRPC_PORT:-8081}:8081",
    ]
    plane = services["controlplane"]["environment"]
    assert plane["CONCH_CONTROLPLANE_LISTENER_PORT"] == "8080"
    assert plane["CONCH_CONTROLPLANE_GRPC_LISTENER_PORT"] == "8081"
    for gateway in ("gateway-1", "gateway-2"):
        assert "ports" not in services[gateway]
        assert services[gateway]["environment"]["CONCH_GATEWAY_ADVERTISE_HOST"] == gateway
        # Each gateway serves gRPC, and announces it for Envoy's gRPC cluster.
        assert services[gateway]["environment"]["CONCH_GATEWAY_GRPC_PORT"] == "8001"
        assert "8001" in services[gateway]["expose"]
    # Redis keeps queued work across restarts: AOF on, no eviction, data on a volume.
    conf = (ROOT / "deploy/redis/redis.conf").read_text()
    assert "appendonly yes" in conf and "maxmemory-policy noeviction" in conf
    assert "redis-data:/data" in services["redis"]["volumes"]


def test_gpu_workers_reserve_gpus_and_cpu_profile_needs_none(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in GPU_WORKERS:
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
        assert services[name]["profiles"] == ["gpu"]
    for name, service in services.items():
        if "gpu" not in service.get("profiles", []):
            assert "deploy" not in service, f"{name} outside the gpu profile reserves a device"
    for name in CPU_WORKERS:
        assert services[name]["profiles"] == ["cpu"]
    for name in GPU_WORKERS | CPU_WORKERS | {"worker-python"}:
        assert "./examples/model_repository:/models:ro" in services[name]["volumes"]


def test_referenced_files_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        build = service.get("build")
        if build:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                path = ROOT / source
                # The example model repository is generated, its parent folder is not.
                assert path.exists() or path.parent.is_dir(), f"{name}: {source}"
    assert (ROOT / "deploy/prometheus/prometheus.yml").is_file()
    assert (ROOT / "deploy/grafana/provisioning/datasources").is_dir()
    assert (ROOT / "deploy/grafana/provisioning/dashboards").is_dir()


def test_prometheus_scrapes_every_conch_service(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    scraped: dict[str, int] = {}
    for job in config["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            for name in sd["names"]:
                scraped[name] = sd["port"]
    conch = {
        n
        for n in compose["services"]
        # `base` is built, never run: the image every Conch CPU image derives from.
        if not n.startswith("redis") and n not in ("prometheus", "grafana", "base")
    }
    assert conch <= set(scraped), f"not scraped: {conch - set(scraped)}"
    for name, port in scraped.items():
        assert str(port) in compose["services"][name].get("expose", []), name
