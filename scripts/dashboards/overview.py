"""Conch / Overview: is the mesh serving? Throughput, errors, latency by model."""

from __future__ import annotations

from dashboards.grafana import Dashboard, Panel
from dashboards.promql import M, quantiles, ratio_errors

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
            [(ratio_errors("model").replace("sum by (model) ", "sum "), "errors")],
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
            "Cancelled requests/s by model",
            [
                (
                    "sum by (model) "
                    f"(rate(conch_requests_cancelled_total{{{M}}}[$__rate_interval]))",
                    "{{model}} marked by gateways",
                ),
                (
                    "sum by (model) (rate(nv_inference_request_failure"
                    f'{{{M},reason="CANCELED"}}[$__rate_interval]))',
                    "{{model}} never run (scheduler, worker)",
                ),
            ],
            "reqps",
            description="Clients that disconnected, cancelled or stopped reading (gateways); "
            "cancelled requests taken out of a queue or skipped before running (Triton's "
            "CANCELED failures).",
        ),
        Panel(
            "Server error ratio by model (gateway)",
            [(ratio_errors("model"), "{{model}}")],
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
            quantiles("conch_request_duration_seconds", "model"),
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
