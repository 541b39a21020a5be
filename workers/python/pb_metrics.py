"""``pb_utils.MetricFamily`` and ``pb_utils.Metric``: custom metrics of a Python model.

Lives in the model process. The worker exports them with its own metrics: the model process
sends a snapshot of every family (:func:`snapshot`) with its answer to ``initialize`` and to each
``execute`` after a change, and the worker renders the snapshots of all its instances at scrape
time (``workers.python.custom_metrics``). Names, kinds and methods follow Triton's Python backend:
``MetricFamily(name, description, kind)``, ``family.Metric(labels, buckets)``, ``increment``,
``set``, ``observe``, ``value``.
"""

from __future__ import annotations

import bisect
import re
import threading
from typing import Any

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_lock = threading.Lock()
_families: dict[str, MetricFamily] = {}
_version = 0


def _changed() -> None:
    global _version
    _version += 1


class Metric:
    """One labelled series of a family."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None):
        self._family = family
        self._labels = tuple(sorted(labels.items()))
        self._value = 0.0
        self._buckets = sorted(buckets) if buckets is not None else None
        self._counts = [0] * (len(self._buckets) + 1) if self._buckets is not None else []
        self._sum = 0.0
        self._count = 0

    def increment(self, value: float) -> None:
        kind = self._family.kind
        if kind == MetricFamily.HISTOGRAM:
            raise ValueError("increment is not supported for a histogram metric; use observe")
        if kind == MetricFamily.COUNTER and value < 0:
            raise ValueError("a counter cannot be decremented: increment needs a value >= 0")
        with _lock:
            self._value += value
            _changed()

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise ValueError("set is supported for gauge metrics only")
        with _lock:
            self._value = float(value)
            _changed()

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM or self._buckets is None:
            raise ValueError("observe is supported for histogram metrics only")
        with _lock:
            self._counts[bisect.bisect_left(self._buckets, value)] += 1
            self._sum += value
            self._count += 1
            _changed()

    def value(self) -> float:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise ValueError("value is not supported for a histogram metric")
        return self._value

    def _snapshot(self) -> tuple[Any, ...]:
        if self._buckets is None:
            return (self._labels, self._value)
        return (self._labels, self._value, list(self._buckets), list(self._counts), self._sum)


_Metric = Metric


class MetricFamily:
    """A metric family; ``kind`` is COUNTER, GAUGE or HISTOGRAM."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    _KINDS = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}

    def __init__(self, name: str, description: str, kind: int):
        if not _NAME.match(name or ""):
            raise ValueError(f"metric family name '{name}' is not a valid Prometheus name")
        if kind not in self._KINDS:
            raise ValueError("kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM")
        self.name = name
        self.description = description
        self.kind = kind
        self._metrics: dict[tuple[tuple[str, str], ...], Metric] = {}
        with _lock:
            existing = _families.get(name)
            if existing is not None and (existing.kind, existing.description) != (
                kind,
                description,
            ):
                raise ValueError(
                    f"metric family '{name}' already exists with another kind or description"
                )
            _families[name] = existing or self
            if existing is not None:
                self._metrics = existing._metrics
            _changed()

    def Metric(  # Triton's name
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> _Metric:
        labels = {str(k): str(v) for k, v in (labels or {}).items()}
        for key in labels:
            if not _LABEL.match(key) or key.startswith("__"):
                raise ValueError(f"label name '{key}' is not a valid Prometheus label name")
        if self.kind == self.HISTOGRAM and buckets is None:
            raise ValueError("a histogram metric needs buckets")
        if self.kind != self.HISTOGRAM and buckets is not None:
            raise ValueError("buckets are for histogram metrics only")
        label_key = tuple(sorted(labels.items()))
        with _lock:
            metric = self._metrics.get(label_key)
            if metric is None:
                metric = self._metrics[label_key] = Metric(self, labels, buckets)
                _changed()
        return metric


def snapshot(since: int) -> tuple[int, list[dict[str, Any]] | None]:
    """(version, every family's state) when anything changed after ``since``; else (since, None)."""
    with _lock:
        if _version == since:
            return since, None
        families = [
            {
                "name": family.name,
                "description": family.description,
                "kind": MetricFamily._KINDS[family.kind],
                "metrics": [m._snapshot() for m in family._metrics.values()],
            }
            for family in _families.values()
        ]
        return _version, families
