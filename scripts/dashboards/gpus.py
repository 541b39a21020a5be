"""Conch / GPUs: utilization, memory and power of the workers' GPUs."""

from __future__ import annotations

from dashboards.grafana import Dashboard, Panel

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
