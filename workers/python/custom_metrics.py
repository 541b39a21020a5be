"""The custom metrics of a worker's Python models (``pb_utils.MetricFamily``), in its /metrics.

Each model process sends a snapshot of its families (``workers.python.pb_metrics``); this
collector merges the snapshots of every live instance at scrape time under the families' exact
names, as Triton exports them: series with the same labels add up across instances (counters and
histograms; gauges too, each instance owning its share), as in Triton, where every instance of a
model reports into the server's one registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

Snapshots = Callable[[], list[list[dict[str, Any]] | None]]


class CustomMetricsCollector(Collector):
    def __init__(self, snapshots: Snapshots):
        self._snapshots = snapshots

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, dict[str, Any]] = {}
        for families in self._snapshots():
            for family in families or []:
                entry = merged.setdefault(
                    family["name"],
                    {"description": family["description"], "kind": family["kind"], "series": {}},
                )
                if entry["kind"] != family["kind"]:
                    continue  # two models disagree on a family's kind: the first one wins
                for item in family["metrics"]:
                    _add(entry["series"], item)
        for name, entry in sorted(merged.items()):
            metric = Metric(name, entry["description"], entry["kind"])
            for labels, value in entry["series"].items():
                tags = dict(labels)
                if entry["kind"] != "histogram":
                    metric.add_sample(name, tags, value)
                    continue
                buckets, counts, total, count = value
                running = 0
                for bound, observed in zip([*buckets, float("inf")], counts, strict=True):
                    running += observed
                    le = "+Inf" if bound == float("inf") else _number(bound)
                    metric.add_sample(f"{name}_bucket", {**tags, "le": le}, running)
                metric.add_sample(f"{name}_count", tags, count)
                metric.add_sample(f"{name}_sum", tags, total)
            yield metric


def _add(series: dict[tuple[Any, ...], Any], item: tuple[Any, ...]) -> None:
    labels = tuple(tuple(pair) for pair in item[0])
    if len(item) == 2:  # counter or gauge
        series[labels] = series.get(labels, 0.0) + item[1]
        return
    _, _, buckets, counts, total = item
    current = series.get(labels)
    if current is None or current[0] != buckets:
        series[labels] = (list(buckets), list(counts), total, sum(counts))
        return
    series[labels] = (
        buckets,
        [a + b for a, b in zip(current[1], counts, strict=True)],
        current[2] + total,
        current[3] + sum(counts),
    )


def _number(value: float) -> str:
    return repr(float(value))


_registered: list[CustomMetricsCollector] = []


def register(snapshots: Snapshots) -> None:
    """Export the snapshots with the worker's metrics (once per process)."""
    if _registered:
        _registered[0]._snapshots = snapshots
        return
    collector = CustomMetricsCollector(snapshots)
    REGISTRY.register(collector)
    _registered.append(collector)
