"""Conch / Queues & priorities: the backlog, queue time by priority, redelivery."""

from __future__ import annotations

from dashboards.grafana import Dashboard, Panel
from dashboards.promql import M, quantiles

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
            quantiles("conch_queue_duration_seconds", "model, priority"),
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
