"""GPU gauges: nothing registered without NVML; Triton's names, units and label with it.

The second test feeds the collector a stand-in NVML module: that checks pure conversion logic
(percent -> ratio, milliwatts -> watts, an unsupported reading left out); the real NVML path is
covered by ``tests/gpu``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from workers.gpu_metrics import GpuMetricsCollector, load_nvml, register_gpu_metrics


def test_registers_nothing_without_nvml() -> None:
    if load_nvml() is not None:
        pytest.skip("this host has a working NVML")
    registry = CollectorRegistry()
    assert register_gpu_metrics(registry) is None
    assert b"nv_gpu" not in generate_latest(registry)


class FakeNvml:
    """Two devices; the second does not support power readings."""

    class NVMLError(Exception):
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> Any:
        return f"GPU-{handle}" if handle else b"GPU-0"

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=25 + handle)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=(handle + 1) << 30)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle:
            raise self.NVMLError("Not Supported")
        return 123_500

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        if handle:
            raise self.NVMLError("Not Supported")
        return 700_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        return 5_000


def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels["gpu_uuid"]): s.value
        for family in registry.collect()
        for s in family.samples
    }


def test_triton_names_units_and_labels() -> None:
    registry = CollectorRegistry()
    collector = register_gpu_metrics(registry, nvml=FakeNvml())
    assert isinstance(collector, GpuMetricsCollector)
    got = samples(registry)
    assert got[("nv_gpu_utilization", "GPU-0")] == 0.25
    assert got[("nv_gpu_utilization", "GPU-1")] == 0.26
    assert got[("nv_gpu_memory_total_bytes", "GPU-1")] == float(80 << 30)
    assert got[("nv_gpu_memory_used_bytes", "GPU-1")] == float(2 << 30)
    assert got[("nv_gpu_power_usage", "GPU-0")] == 123.5
    assert got[("nv_gpu_power_limit", "GPU-0")] == 700.0
    assert ("nv_gpu_power_usage", "GPU-1") not in got  # unsupported: left out, not zero
    assert got[("nv_energy_consumption", "GPU-1")] == 5.0
    text = generate_latest(registry).decode()
    assert 'nv_gpu_utilization{gpu_uuid="GPU-0"} 0.25' in text
