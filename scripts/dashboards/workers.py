"""Conch / Workers & batching: the fleet, how well it batches, compute time."""

from __future__ import annotations

from dashboards.grafana import Dashboard, Panel
from dashboards.promql import M, quantiles

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
            quantiles("conch_batch_size", "model"),
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
        "Generation (generative models)",
        Panel(
            "Time to first token",
            quantiles("conch_generation_time_to_first_token_seconds", "model"),
            "s",
            description="From the request reaching the model to its first token (prefill).",
        ),
        Panel(
            "Inter-token latency",
            quantiles("conch_generation_inter_token_seconds", "model"),
            "s",
            description="Between two tokens of one generation (one engine step).",
        ),
        Panel(
            "Tokens generated/s",
            [
                (
                    "sum by (model) "
                    f"(rate(conch_generation_tokens_total{{{M}}}[$__rate_interval]))",
                    "{{model}}",
                )
            ],
            "short",
        ),
        Panel(
            "Active and waiting sequences",
            [
                (
                    f"sum by (model) (conch_generation_active_sequences{{{M}}})",
                    "{{model}} running",
                ),
                (
                    f"sum by (model) (conch_generation_waiting_sequences{{{M}}})",
                    "{{model}} waiting",
                ),
            ],
        ),
        Panel(
            "KV-cache occupancy",
            [
                (
                    "max by (model, version, instance) "
                    f"(conch_generation_kv_cache_usage_ratio{{{M}}})",
                    "{{model}} v{{version}} {{instance}}",
                )
            ],
            "percentunit",
        ),
        Panel(
            "Cancelled generations/s",
            [
                (
                    "sum by (model) "
                    f"(rate(conch_generation_cancelled_total{{{M}}}[$__rate_interval]))",
                    "{{model}}",
                )
            ],
            "short",
        ),
        "Models on demand (--model-control-mode on_demand)",
        Panel(
            "Loads and unloads/min by reason",
            [
                (
                    "sum by (reason) (rate(conch_model_loads_total[$__rate_interval])) * 60",
                    "load: {{reason}}",
                ),
                (
                    "sum by (reason) (rate(conch_model_unloads_total[$__rate_interval])) * 60",
                    "unload: {{reason}}",
                ),
            ],
            "short",
            description="Loads: demand (a first request), copy (traffic), retry (a loading "
            "worker died), pinned. Unloads: evicted (memory), idle, api.",
        ),
        Panel(
            "Cold start p50 / p99",
            [
                (
                    f"histogram_quantile({q}, sum by (le) "
                    "(rate(conch_model_cold_start_seconds_bucket[$__rate_interval])))",
                    f"p{int(q * 100)}",
                )
                for q in (0.5, 0.99)
            ],
            "s",
            description="From a request's arrival to its model being ready, for requests "
            "that found their model not loaded.",
        ),
        Panel(
            "Hit ratio",
            [
                (
                    'sum(rate(conch_model_demand_total{outcome="hit"}[$__rate_interval])) '
                    "/ sum(rate(conch_model_demand_total[$__rate_interval]))",
                    "hit ratio",
                )
            ],
            "percentunit",
            description="Requests whose model was loaded when they arrived.",
        ),
        Panel(
            "Resident models and memory per worker",
            [
                ("sum by (instance) (conch_worker_resident_models)", "{{instance}} models"),
                (
                    "sum by (instance) (conch_worker_resident_bytes) / "
                    "sum by (instance) (conch_worker_model_memory_budget_bytes)",
                    "{{instance}} of budget",
                ),
            ],
            "short",
        ),
    ],
)
