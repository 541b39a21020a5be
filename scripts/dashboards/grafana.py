"""Grafana's dashboard JSON from a list of panels and rows: ids, grid layout, the model variable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
SCHEMA_VERSION = 39


@dataclass
class Panel:
    title: str
    exprs: list[tuple[str, str]]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""
    width: int = 12
    height: int = 8


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    panels: list[Panel | str]  # a str starts a row
    tags: list[str] = field(default_factory=list)
    model_variable: bool = True


def _targets(panel: Panel) -> list[dict[str, Any]]:
    return [
        {
            "datasource": DATASOURCE,
            "refId": chr(ord("A") + index),
            "expr": expr,
            "legendFormat": legend,
            "range": panel.kind != "stat",
            "instant": panel.kind == "stat",
        }
        for index, (expr, legend) in enumerate(panel.exprs)
    ]


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": _targets(panel),
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
    }
    if panel.kind == "timeseries":
        body["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel.kind == "stat":
        body["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "values": False}}
    return body


def render(dashboard: Dashboard) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    x = y = 0
    row_height = 0
    next_id = 1
    for item in dashboard.panels:
        if isinstance(item, str):
            y += row_height
            x, row_height = 0, 0
            panels.append(
                {
                    "id": next_id,
                    "type": "row",
                    "title": item,
                    "collapsed": False,
                    "panels": [],
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                }
            )
            next_id += 1
            y += 1
            continue
        if x + item.width > 24:
            y += row_height
            x, row_height = 0, 0
        panels.append(_panel_json(item, next_id, x, y))
        next_id += 1
        x += item.width
        row_height = max(row_height, item.height)
    templating: list[dict[str, Any]] = []
    if dashboard.model_variable:
        templating.append(
            {
                "name": "model",
                "label": "Model",
                "type": "query",
                "datasource": DATASOURCE,
                "query": "label_values(nv_inference_count, model)",
                "refresh": 2,
                "includeAll": True,
                "multi": True,
                "allValue": ".*",
                "current": {"text": "All", "value": "$__all"},
                "sort": 1,
            }
        )
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["conch", *dashboard.tags],
        "editable": False,
        "graphTooltip": 1,
        "refresh": "10s",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "links": [
            {
                "title": "Conch dashboards",
                "type": "dashboards",
                "tags": ["conch"],
                "asDropdown": True,
                "icon": "external link",
                "includeVars": True,
                "keepTime": True,
                "targetBlank": False,
                "tooltip": "",
                "url": "",
            }
        ],
        "annotations": {"list": []},
        "templating": {"list": templating},
        "panels": panels,
    }
