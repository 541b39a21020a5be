"""Triton's GPU gauges (``nv_gpu_*``, label ``gpu_uuid``) read from NVML at scrape time.

A prometheus_client Collector rather than gauges updated by a thread: values are read when
Prometheus scrapes, so they are never stale and nothing runs between scrapes. On a host without
NVML (no ``nvidia-ml-py``, no driver, no GPU) :func:`register_gpu_metrics` registers nothing, so
a CPU-only worker exports no empty GPU families. A reading NVML refuses for one device (e.g.
power on a GPU without power management) is left out for that device only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

# name -> (help text, as in Triton's metrics.md; how to read it from NVML)
_GAUGES: dict[str, tuple[str, Callable[[Any, Any], float]]] = {
    "nv_gpu_utilization": (
        "GPU utilization rate [0.0 - 1.0)",
        lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0,
    ),
    "nv_gpu_memory_total_bytes": (
        "GPU total memory, in bytes",
        lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).total),
    ),
    "nv_gpu_memory_used_bytes": (
        "GPU used memory, in bytes",
        lambda nvml, h: float(nvml.nvmlDeviceGetMemoryInfo(h).used),
    ),
    "nv_gpu_power_usage": (
        "GPU power usage in watts",
        lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
    ),
    "nv_gpu_power_limit": (
        "GPU power management limit in watts",
        lambda nvml, h: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    ),
}
ENERGY = "nv_energy_consumption"


def load_nvml() -> ModuleType | None:
    """pynvml, initialised, with at least one device; None where any of that is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() > 0:
            nvml: ModuleType = pynvml  # pynvml has no stubs (Any)
            return nvml
        pynvml.nvmlShutdown()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        log.debug("NVML unavailable: %s", exc)
    return None


class GpuMetricsCollector(Collector):
    """Yields the ``nv_gpu_*`` families for every device NVML reports."""

    def __init__(self, nvml: Any):
        self.nvml = nvml

    def _devices(self) -> list[tuple[str, Any]]:
        devices: list[tuple[str, Any]] = []
        for index in range(self.nvml.nvmlDeviceGetCount()):
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = self.nvml.nvmlDeviceGetUUID(handle)
            devices.append((uuid.decode() if isinstance(uuid, bytes) else str(uuid), handle))
        return devices

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            devices = self._devices()
        except Exception as exc:  # the driver went away: export nothing rather than fail
            log.warning("NVML device query failed: %s", exc)
            return
        for name, (help_text, read) in _GAUGES.items():
            family = GaugeMetricFamily(name, help_text, labels=["gpu_uuid"])
            for uuid, handle in devices:
                value = self._read(read, handle)
                if value is not None:
                    family.add_metric([uuid], value)
            yield family
        # Triton's name has no _total suffix, which prometheus_client adds to counters.
        energy = GaugeMetricFamily(ENERGY, "GPU energy consumption in joules", labels=["gpu_uuid"])
        for uuid, handle in devices:
            joules = self._read(lambda n, h: n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3, handle)
            if joules is not None:
                energy.add_metric([uuid], joules)
        yield energy

    def _read(self, read: Callable[[Any, Any], float], handle: Any) -> float | None:
        try:
            return float(read(self.nvml, handle))
        except Exception:  # NVMLError_NotSupported and friends: leave this sample out
            return None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """Names only, so registering does not query NVML."""
        for name, (help_text, _) in _GAUGES.items():
            yield GaugeMetricFamily(name, help_text, labels=["gpu_uuid"])
        yield GaugeMetricFamily(ENERGY, "GPU energy consumption in joules", labels=["gpu_uuid"])


def register_gpu_metrics(
    registry: CollectorRegistry = REGISTRY, nvml: Any | None = None
) -> GpuMetricsCollector | None:
    """Register the GPU collector where NVML works; return it, or None (nothing registered)."""
    nvml = nvml if nvml is not None else load_nvml()
    if nvml is None:
        return None
    collector = GpuMetricsCollector(nvml)
    registry.register(collector)
    return collector
