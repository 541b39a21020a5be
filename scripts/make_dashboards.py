"""Writes Conch's Grafana dashboards (deploy/grafana/dashboards/*.json) from the code below.

    python scripts/make_dashboards.py            # rewrite the JSON files
    python scripts/make_dashboards.py --check    # exit 1 if a file differs from what it makes

Every panel query is checked against a live mesh and Prometheus (tests/observability), and every
dashboard against Grafana's own dashboard JSON Schema (tests/observability/
grafana-dashboard.schema.json, made by scripts/grafana_schema/make_schema.sh).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
SCHEMA_VERSION = 39
GOOD_CODES = "OK|INVALID_ARG|NOT_FOUND|UNSUPPORTED|ALREADY_EXISTS"
M = 'model=~"$model"'  # the model variable (All = .*)


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


def _targets(panel: Panel) -> list[dict]:
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


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    body: dict = {
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


def render(dashboard: Dashboard) -> dict:
    panels: list[dict] = []
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
    templating: list[dict] = []
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


def _quantiles(metric: str, by: str, selector: str = M) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by ({by}, le) "
            f"(rate({metric}_bucket{{{selector}}}[$__rate_interval])))",
            f"p{int(q * 100)} {{{{{by.split(', ')[0]}}}}}"
            + "".join(f" {{{{{b}}}}}" for b in by.split(", ")[1:]),
        )
        for q in (0.5, 0.95, 0.99)
    ]


def _ratio_errors(by: str, selector: str = M) -> str:
    return (
        f"1 - (sum by ({by}) (rate(conch_gateway_requests_total{{{selector},"
        f'code=~"{GOOD_CODES}"}}[$__rate_interval])) / sum by ({by}) '
        f"(rate(conch_gateway_requests_total{{{selector}}}[$__rate_interval])))"
    )


OVERVIEW = Dashboard(
    uid="conch-overview",
    title="Conch / Overview",
    description="Is the mesh serving? Throughput, errors and latency percentiles by model.",
    panels=[
        Panel(
            "Requests/s",
            [(f"sum(rate(conch_gateway_requests_total{{{M}}}[$__rate_interval]))", "req/s")],
            "reqps",
            "stat",
            width=6,
            height=4,
        ),
        Panel(
            "Server error ratio",
            [(_ratio_errors("model").replace("sum by (model) ", "sum "), "errors")],
            "percentunit",
            "stat",
            "Share of answers with a server-side error (4xx-class client errors excluded).",
            width=6,
            height=4,
        ),
        Panel(
            "p99 latency (all models)",
            [
                (
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate(conch_request_duration_seconds_bucket{{{M}}}[$__rate_interval])))",
                    "p99",
                )
            ],
            "s",
            "stat",
            width=6,
            height=4,
        ),
        Panel(
            "Live execution instances",
            [("sum(model_version:conch_model_ready_instances:max)", "instances")],
            "short",
            "stat",
            width=6,
            height=4,
        ),
        "Throughput",
        Panel(
            "Successful requests/s by model (Triton)",
            [
                (
                    f"sum by (model) (rate(nv_inference_request_success{{{M}}}[$__rate_interval]))",
                    "{{model}}",
                )
            ],
            "reqps",
        ),
        Panel(
            "Inferences/s by model (batch-n counts n)",
            [
                (
                    f"sum by (model) (rate(nv_inference_count{{{M}}}[$__rate_interval]))",
                    "{{model}}",
                )
            ],
            "short",
        ),
        "Errors",
        Panel(
            "Failures/s by model and reason (Triton)",
            [
                (
                    "sum by (model, reason) "
                    f"(rate(nv_inference_request_failure{{{M}}}[$__rate_interval]))",
                    "{{model}} {{reason}}",
                )
            ],
            "reqps",
        ),
        Panel(
            "Server error ratio by model (gateway)",
            [(_ratio_errors("model"), "{{model}}")],
            "percentunit",
        ),
        Panel(
            "Answers/s by outcome code",
            [
                (
                    "sum by (model, code) "
                    f"(rate(conch_gateway_requests_total{{{M}}}[$__rate_interval]))",
                    "{{model}} {{code}}",
                )
            ],
            "reqps",
        ),
        Panel(
            "Rejected at admission by tenant and reason",
            [
                (
                    "sum by (tenant, reason) "
                    f"(rate(conch_requests_rejected_total{{{M}}}[$__rate_interval]))",
                    "{{tenant}} {{reason}}",
                )
            ],
            "reqps",
            description="rate_limited, unauthenticated, forbidden, no_worker, queue_full.",
        ),
        "Latency",
        Panel(
            "End-to-end latency p50 / p95 / p99 by model",
            _quantiles("conch_request_duration_seconds", "model"),
            "s",
            width=24,
        ),
        Panel(
            "Mean request duration by model (Triton counters)",
            [
                (
                    f"sum by (model) (rate(nv_inference_request_duration_us{{{M}}}"
                    "[$__rate_interval])) / 1e6 / sum by (model) "
                    f"(rate(nv_inference_request_success{{{M}}}[$__rate_interval]))",
                    "{{model}}",
                )
            ],
            "s",
            description="Queue + compute as Triton counts it (worker side, no network).",
        ),
        Panel(
            "Redis round trip p99 by service",
            [("service:conch_redis_roundtrip_seconds:p99_1m", "{{service}}")],
            "s",
        ),
    ],
)

VERSIONS = Dashboard(
    uid="conch-versions",
    title="Conch / A/B versions",
    description="Is the candidate version as fast and as reliable as the current one?",
    tags=["ab"],
    panels=[
        "Traffic",
        Panel(
            "Requests/s by version and arm",
            [
                (
                    "sum by (model, version, arm) "
                    f"(rate(conch_gateway_requests_total{{{M}}}[$__rate_interval]))",
                    "{{model}} v{{version}} {{arm}}",
                )
            ],
            "reqps",
            description="arm: routed (weights or default), pinned (client named the version), "
            "shadow (copy sent by the gateway).",
        ),
        Panel(
            "Share of routed traffic by version",
            [
                (
                    "sum by (model, version) (rate(conch_gateway_requests_total"
                    f'{{{M},arm="routed"}}[$__rate_interval])) / on (model) group_left () '
                    "sum by (model) (rate(conch_gateway_requests_total"
                    f'{{{M},arm="routed"}}[$__rate_interval]))',
                    "{{model}} v{{version}}",
                )
            ],
            "percentunit",
        ),
        "Side by side",
        Panel(
            "p99 latency by version",
            [
                (
                    "histogram_quantile(0.99, sum by (model, version, le) (rate("
                    f"conch_request_duration_seconds_bucket{{{M}}}[$__rate_interval])))",
                    "{{model}} v{{version}}",
                )
            ],
            "s",
        ),
        Panel(
            "p50 latency by version",
            [
                (
                    "histogram_quantile(0.5, sum by (model, version, le) (rate("
                    f"conch_request_duration_seconds_bucket{{{M}}}[$__rate_interval])))",
                    "{{model}} v{{version}}",
                )
            ],
            "s",
        ),
        Panel(
            "Server error ratio by version",
            [(_ratio_errors("model, version"), "{{model}} v{{version}}")],
            "percentunit",
        ),
        Panel(
            "Mean compute (infer) per request by version",
            [
                (
                    "sum by (model, version) (rate(nv_inference_compute_infer_duration_us"
                    f"{{{M}}}[$__rate_interval])) / 1e6 / sum by (model, version) "
                    f"(rate(nv_inference_request_success{{{M}}}[$__rate_interval]))",
                    "{{model}} v{{version}}",
                )
            ],
            "s",
        ),
    ],
)

QUEUES = Dashboard(
    uid="conch-queues",
    title="Conch / Queues & priorities",
    description="Are requests waiting, at which priority, and is the backlog growing?",
    tags=["queues"],
    panels=[
        "Backlog",
        Panel(
            "Queue depth by model and priority",
            [
                (
                    f"sum by (model, priority) (conch_queue_depth{{{M}}})",
                    "{{model}} p{{priority}}",
                )
            ],
        ),
        Panel(
            "Oldest queued request age",
            [
                (
                    f"max by (model, priority) (conch_queue_oldest_age_seconds{{{M}}})",
                    "{{model}} p{{priority}}",
                )
            ],
            "s",
        ),
        Panel(
            "Pending requests (Triton)",
            [
                (
                    f"sum by (model, version) (nv_inference_pending_request_count{{{M}}})",
                    "{{model}} v{{version}}",
                )
            ],
        ),
        Panel(
            "Mean queue time (Triton counters)",
            [
                (
                    f"sum by (model) (rate(nv_inference_queue_duration_us{{{M}}}"
                    "[$__rate_interval])) / 1e6 / sum by (model) "
                    f"(rate(nv_inference_request_success{{{M}}}[$__rate_interval]))",
                    "{{model}}",
                )
            ],
            "s",
        ),
        "Queue time by priority",
        Panel(
            "Queue time p50 / p95 / p99 by priority",
            _quantiles("conch_queue_duration_seconds", "model, priority"),
            "s",
            width=24,
        ),
        "Delivery",
        Panel(
            "Requests rejected by the scheduler (queue timeout) and given up",
            [
                (
                    "sum by (model, reason) (rate(nv_inference_request_failure"
                    f'{{{M},reason=~"REJECTED|OTHER"}}[$__rate_interval]))',
                    "{{model}} {{reason}}",
                )
            ],
            "reqps",
        ),
        Panel(
            "Reclaimed and redelivered stream entries",
            [
                (
                    "sum by (stage, model) (increase(conch_stream_entries_reclaimed_total"
                    f"{{{M}}}[$__rate_interval]))",
                    "reclaimed {{stage}} {{model}}",
                ),
                (
                    "sum by (stage, model) (increase(conch_stream_entries_redelivered_total"
                    f"{{{M}}}[$__rate_interval]))",
                    "redelivered {{stage}} {{model}}",
                ),
            ],
            description="Entries taken over from a consumer that died, and processed again.",
        ),
    ],
)

WORKERS = Dashboard(
    uid="conch-workers",
    title="Conch / Workers & batching",
    description="Which workers are alive, what they have loaded, and how well they batch.",
    tags=["workers"],
    panels=[
        "Fleet",
        Panel(
            "Live execution instances by model version",
            [
                (
                    f"max by (model, version) (conch_model_ready_instances{{{M}}})",
                    "{{model}} v{{version}}",
                )
            ],
        ),
        Panel(
            "Loaded models per worker",
            [
                (
                    "sum by (instance, backend, model, version) "
                    f"(conch_worker_model_instances{{{M}}})",
                    "{{instance}} {{model}} v{{version}}",
                )
            ],
        ),
        Panel(
            "Heartbeats/s by service and outcome",
            [
                (
                    "sum by (service, outcome) (rate(conch_heartbeats_total[$__rate_interval]))",
                    "{{service}} {{outcome}}",
                )
            ],
            "short",
        ),
        Panel(
            "Scrape targets up",
            [('sum by (job) (up{job=~"conch-.*"})', "{{job}}")],
        ),
        "Batching",
        Panel(
            "Executions/s by model version",
            [
                (
                    "sum by (model, version) "
                    f"(rate(nv_inference_exec_count{{{M}}}[$__rate_interval]))",
                    "{{model}} v{{version}}",
                )
            ],
            "short",
        ),
        Panel(
            "Average batch size (inferences / executions)",
            [
                (
                    f"sum by (model) (rate(nv_inference_count{{{M}}}[$__rate_interval])) / "
                    f"sum by (model) (rate(nv_inference_exec_count{{{M}}}[$__rate_interval]))",
                    "{{model}}",
                )
            ],
        ),
        Panel(
            "Batch size p50 / p95 / p99",
            _quantiles("conch_batch_size", "model"),
        ),
        Panel(
            "Executions in flight",
            [
                (
                    f"sum by (model) (conch_worker_executions_in_flight{{{M}}})",
                    "{{model}}",
                )
            ],
        ),
        "Compute",
        Panel(
            "Compute p99 by phase",
            [
                (
                    "histogram_quantile(0.99, sum by (model, phase, le) (rate("
                    f"conch_compute_duration_seconds_bucket{{{M}}}[$__rate_interval])))",
                    "{{model}} {{phase}}",
                )
            ],
            "s",
        ),
        Panel(
            "Model load time",
            [
                (
                    f"max by (model, version) (nv_model_load_duration_secs{{{M}}})",
                    "{{model}} v{{version}}",
                )
            ],
            "s",
        ),
    ],
)

GPUS = Dashboard(
    uid="conch-gpus",
    title="Conch / GPUs",
    description="GPU utilization, memory and power of the workers' GPUs (Triton's nv_gpu_*).",
    tags=["gpu"],
    model_variable=False,
    panels=[
        Panel(
            "GPU utilization", [("nv_gpu_utilization", "{{instance}} {{gpu_uuid}}")], "percentunit"
        ),
        Panel(
            "GPU memory used / total",
            [
                ("nv_gpu_memory_used_bytes", "used {{gpu_uuid}}"),
                ("nv_gpu_memory_total_bytes", "total {{gpu_uuid}}"),
            ],
            "bytes",
        ),
        Panel(
            "GPU power usage / limit",
            [
                ("nv_gpu_power_usage", "usage {{gpu_uuid}}"),
                ("nv_gpu_power_limit", "limit {{gpu_uuid}}"),
            ],
            "watt",
        ),
        Panel(
            "GPU energy (mean power from nv_energy_consumption)",
            [("rate(nv_energy_consumption[$__rate_interval])", "{{gpu_uuid}}")],
            "watt",
        ),
    ],
)

DASHBOARDS = [OVERVIEW, VERSIONS, QUEUES, WORKERS, GPUS]


def files() -> dict[Path, str]:
    return {
        OUT / f"{d.uid}.json": json.dumps(render(d), indent=2, sort_keys=False) + "\n"
        for d in DASHBOARDS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in files().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
            continue
        path.write_text(text)
        print(f"wrote {path}")
    if stale:
        print(f"out of date (run scripts/make_dashboards.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
