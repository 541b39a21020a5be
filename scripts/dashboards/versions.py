"""Conch / A/B versions: the candidate version beside the current one."""

from __future__ import annotations

from dashboards.grafana import Dashboard, Panel
from dashboards.promql import M, ratio_errors

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
            [(ratio_errors("model, version"), "{{model}} v{{version}}")],
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
