"""Grafana dashboards and provisioning, checked offline.

Each dashboard validates against the JSON Schema generated from Grafana's own TypeScript types
(@grafana/schema; scripts/grafana_schema/make_schema.sh), is what scripts/make_dashboards.py
makes, and queries only metric names that some service exports or a recording rule records.
Whether the queries return data is tests/observability/test_live_prometheus.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from shared import metrics
from workers import gpu_metrics

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
SCHEMA = json.loads((Path(__file__).parent / "grafana-dashboard.schema.json").read_text())
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
EXPECTED = {"conch-overview", "conch-versions", "conch-queues", "conch-workers", "conch-gpus"}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_five_dashboards_exist() -> None:
    assert {p.stem for p in DASHBOARDS} == EXPECTED
    assert {_load(p)["uid"] for p in DASHBOARDS} == EXPECTED


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_matches_grafana_schema(path: Path) -> None:
    errors = sorted(
        jsonschema.Draft7Validator(SCHEMA).iter_errors(_load(path)), key=lambda e: e.path
    )
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def test_schema_rejects_what_grafana_would_reject() -> None:
    validator = jsonschema.Draft7Validator(SCHEMA)
    good = _load(DASHBOARDS[0])
    assert validator.is_valid(good)
    assert not validator.is_valid({**good, "bogusKey": 1})
    assert not validator.is_valid({**good, "refresh": 10})
    panel = {**good["panels"][1], "gridPos": {"h": "9", "w": 12, "x": 0, "y": 0}}
    assert not validator.is_valid({**good, "panels": [panel]})


def test_dashboards_are_generated_from_the_script() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_dashboards.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_panels_use_the_provisioned_datasource_and_unique_ids() -> None:
    datasources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    uid = datasources["datasources"][0]["uid"]
    for path in DASHBOARDS:
        dashboard = _load(path)
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids)), path.name
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == uid
            assert panel["targets"], f"{path.name}: {panel['title']} has no query"
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == uid
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/conch.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def _exported_names() -> set[str]:
    names = {c.name for c in metrics.TRITON_COUNTERS}
    for value in vars(metrics).values():
        name = getattr(value, "_name", None)
        kind = getattr(value, "_type", None)
        if name and kind:
            names |= {name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    names |= set(gpu_metrics._GAUGES) | {gpu_metrics.ENERGY, "up"}
    for name, kind in metrics.GENERATION_FAMILIES:  # pb_utils custom metrics of the model
        names |= (
            {f"{name}_bucket", f"{name}_count", f"{name}_sum"} if kind == "histogram" else {name}
        )
    for path in (ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


_NAME = re.compile(r"\b((?:nv|conch)_[a-z0-9_]+|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+|up)\b(?!\s*\()")


def test_every_queried_metric_is_exported_or_recorded() -> None:
    known = _exported_names()
    unknown = set()
    for path in DASHBOARDS:
        for panel in _load(path)["panels"]:
            for target in panel.get("targets", []):
                for name in _NAME.findall(target["expr"]):
                    if name not in known:
                        unknown.add(f"{path.stem}: {name}")
    assert not unknown, sorted(unknown)


@pytest.mark.gpu
def test_gpu_dashboard_metrics_are_exported_where_nvml_finds_a_gpu() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    nvml = gpu_metrics.load_nvml()
    if nvml is None:
        pytest.skip("no GPU visible to NVML (nvidia-ml-py + driver + device)")
    registry = CollectorRegistry()
    gpu_metrics.register_gpu_metrics(registry, nvml)
    text = generate_latest(registry).decode()
    dashboard = _load(GRAFANA / "dashboards" / "conch-gpus.json")
    names = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in _NAME.findall(target["expr"])
    }
    assert names >= {"nv_gpu_utilization", "nv_gpu_memory_used_bytes"}
    missing = [name for name in names if f"{name}{{" not in text]
    assert not missing, missing
