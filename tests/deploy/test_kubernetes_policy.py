"""What the schemas cannot check: every workload is hardened, probed, sized, scraped and covered.

These run over the rendered overlays, so a patch that drops a probe or a security setting from
one backend is caught as surely as one in the base.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from manifests import RENDERS

from conch import envoy_bootstrap

ROOT = Path(__file__).resolve().parents[2]
Docs = dict[str, list[dict[str, Any]]]


def _workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def _of(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("overlay", RENDERS)
def test_workloads_are_hardened_probed_and_sized(rendered: Docs, overlay: str) -> None:
    for workload in _workloads(rendered[overlay]):
        name = workload["metadata"]["name"]
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert "readinessProbe" in container and "livenessProbe" in container, name
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert "memory" in resources["limits"], name
            assert ":" in container["image"], f"{name}: image without a tag"


@pytest.mark.parametrize("overlay", RENDERS)
def test_conch_services_are_scraped_and_probed_on_their_health_port(
    rendered: Docs, overlay: str
) -> None:
    for workload in _workloads(rendered[overlay]):
        name = workload["metadata"]["name"]
        if name.startswith("redis"):  # Redis and the Redis Cluster nodes: not Conch services
            continue
        template = workload["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", name
        container = template["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        # The gateway's readiness is a gRPC probe (grpc.health.v1); its liveness is on HTTP.
        probe = container["readinessProbe"].get("httpGet") or container["livenessProbe"]["httpGet"]
        probe_port = probe["port"]
        assert int(annotations["prometheus.io/port"]) == ports.get(probe_port, probe_port), name


def test_gpu_workers_request_gpus_only_in_the_gpu_overlay(rendered: Docs) -> None:
    def gpus(docs: list[dict[str, Any]]) -> dict[str, int]:
        found = {}
        for workload in _workloads(docs):
            for container in workload["spec"]["template"]["spec"]["containers"]:
                limit = container["resources"]["limits"].get("nvidia.com/gpu")
                if limit:
                    found[workload["metadata"]["name"]] = int(limit)
        return found

    assert gpus(rendered["overlays/gpu"]) == {
        "worker-onnxruntime-gpu": 1,
        "worker-pytorch-gpu": 1,
        "worker-tensorrt": 1,
    }
    assert gpus(rendered["overlays/cpu"]) == {}
    for name in ("worker-onnxruntime-gpu", "worker-tensorrt"):
        pod = _of(rendered["overlays/gpu"], "Deployment")[name]["spec"]["template"]["spec"]
        assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])


@pytest.mark.parametrize("overlay", RENDERS)
def test_every_deployment_has_a_pdb_and_every_service_selects_pods(
    rendered: Docs, overlay: str
) -> None:
    docs = rendered[overlay]
    pod_labels = [w["spec"]["template"]["metadata"]["labels"] for w in _workloads(docs)]

    def selects(selector: dict[str, str]) -> int:
        return sum(1 for labels in pod_labels if selector.items() <= labels.items())

    pdbs = _of(docs, "PodDisruptionBudget")
    for name, deployment in _of(docs, "Deployment").items():
        assert name in pdbs, f"{name} has no PodDisruptionBudget"
        pdb_selector = pdbs[name]["spec"]["selector"]["matchLabels"]
        assert pdb_selector == deployment["spec"]["selector"]["matchLabels"], name
    for name, pdb in pdbs.items():
        assert selects(pdb["spec"]["selector"]["matchLabels"]) == 1, name
    for name, service in _of(docs, "Service").items():
        assert selects(service["spec"]["selector"]) >= 1, f"service {name} selects nothing"


def test_gateways_autoscale_on_cpu_and_register_their_pod_ip(rendered: Docs) -> None:
    docs = rendered["base"]
    hpa = _of(docs, "HorizontalPodAutoscaler")["gateway"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "gateway"
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    gateway = _of(docs, "Deployment")["gateway"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in gateway["env"]}
    assert env["CONCH_GATEWAY_ADVERTISE_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "status.podIP"
    )
    assert gateway["resources"]["requests"]["cpu"], "an HPA on CPU needs a CPU request"


def test_redis_persists_to_a_volume_claim(rendered: Docs) -> None:
    redis = _of(rendered["base"], "StatefulSet")["redis"]
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    config = _of(rendered["base"], "ConfigMap")
    redis_conf = next(v for k, v in config.items() if k.startswith("redis-config"))
    assert "appendonly yes" in redis_conf["data"]["redis.conf"]


def test_copies_of_shared_configs_are_identical() -> None:
    """kustomize loads files only from inside k8s/, so two files are copies; keep them equal."""
    for copy_path, original in [
        ("k8s/base/envoy/envoy.yaml", "deploy/envoy/envoy.yaml"),
        ("k8s/base/redis/redis.conf", "deploy/redis/redis.conf"),
        ("k8s/overlays/redis-cluster/cluster.conf", "deploy/redis/cluster.conf"),
    ]:
        assert (ROOT / copy_path).read_text() == (ROOT / original).read_text(), copy_path


def test_envoy_bootstrap_is_what_conch_envoy_bootstrap_renders() -> None:
    on_disk = yaml.safe_load((ROOT / "deploy/envoy/envoy.yaml").read_text())
    assert on_disk == envoy_bootstrap.render(xds_host="controlplane", xds_port=18000)
