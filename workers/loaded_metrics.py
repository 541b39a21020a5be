"""Scrape hook: the loaded versions' instance counts and load times, as they are at the scrape.

A version seen for the first time gets its Triton families initialised (so they read 0, not
absent); a version unloaded since the last scrape has its gauges removed.
"""

from __future__ import annotations

from collections.abc import Mapping

from shared import metrics
from workers.loading.loader import LoadedVersion


class LoadedVersionMetrics:
    def __init__(self, backend: str, loaded: Mapping[tuple[str, int], LoadedVersion]):
        self._backend = backend
        self._loaded = loaded
        self._exported: set[tuple[str, int]] = set()

    def export(self) -> None:
        backend = self._backend
        current = set(self._loaded)
        for (name, version), loaded in list(self._loaded.items()):
            if (name, version) not in self._exported:
                metrics.init_model(name, version)
                metrics.init_stage("worker", name, version)
            metrics.child(metrics.WORKER_INSTANCES, name, version, backend).set(
                len(loaded.instances)
            )
            metrics.child(metrics.LOAD_DURATION, name, version).set(loaded.load_seconds)
            metrics.child(metrics.EXECUTIONS_IN_FLIGHT, name, version)
        for name, version in self._exported - current:
            metrics.forget(metrics.WORKER_INSTANCES, name, version, backend)
            metrics.forget(metrics.LOAD_DURATION, name, version)
        self._exported = current
