"""The custom metrics of a worker's Python models (``pb_utils.MetricFamily``), in its /metrics.

Each model process sends a snapshot of its families (``workers.python.pb_metrics``); at scrape
time the snapshots of every live instance are merged and rendered under the families' exact
names, as Triton exports them (prometheus_client would add ``_total`` to a counter). Series with
the same labels add up across instances (counters, histograms, and gauges, each instance owning
its share), as in Triton, where every instance of a model reports into the server's registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.utils import floatToGoString

from shared import metrics

Snapshots = Callable[[], list[list[dict[str, Any]] | None]]


def render(snapshots: list[list[dict[str, Any]] | None]) -> str:
    """The text exposition of the merged snapshots."""
    merged: dict[str, dict[str, Any]] = {}
    for families in snapshots:
        for family in families or []:
            entry = merged.setdefault(
                family["name"],
                {"description": family["description"], "kind": family["kind"], "series": {}},
            )
            if entry["kind"] != family["kind"]:
                continue  # two models disagree on a family's kind: the first one wins
            for item in family["metrics"]:
                _add(entry["series"], item)
    lines: list[str] = []
    for name, entry in sorted(merged.items()):
        lines += [
            f"# HELP {name} {_escape(entry['description'])}",
            f"# TYPE {name} {entry['kind']}",
        ]
        for labels, value in entry["series"].items():
            if entry["kind"] != "histogram":
                lines.append(f"{name}{_labels(labels)} {floatToGoString(value)}")
                continue
            buckets, counts, total, count = value
            running = 0
            for bound, observed in zip([*buckets, float("inf")], counts, strict=True):
                running += observed
                bucket = (*labels, ("le", floatToGoString(bound)))
                lines.append(f"{name}_bucket{_labels(bucket)} {floatToGoString(running)}")
            lines.append(f"{name}_count{_labels(labels)} {floatToGoString(count)}")
            lines.append(f"{name}_sum{_labels(labels)} {floatToGoString(total)}")
    return "".join(f"{line}\n" for line in lines)


def _add(series: dict[tuple[Any, ...], Any], item: tuple[Any, ...]) -> None:
    labels = tuple(tuple(pair) for pair in item[0])
    if len(item) == 2:  # counter or gauge
        series[labels] = series.get(labels, 0.0) + item[1]
        return
    _, _, buckets, counts, total = item
    current = series.get(labels)
    if current is None or current[0] != list(buckets):
        series[labels] = (list(buckets), list(counts), total, sum(counts))
        return
    series[labels] = (
        current[0],
        [a + b for a, b in zip(current[1], counts, strict=True)],
        current[2] + total,
        current[3] + sum(counts),
    )


def _escape(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels
    )
    return "{" + inner + "}"


_source: list[Snapshots] = []


def register(snapshots: Snapshots) -> None:
    """Export the snapshots with the worker's metrics (the latest source wins)."""
    if not _source:
        metrics.add_renderer(lambda: render(_source[0]()))
        _source.append(snapshots)
    else:
        _source[0] = snapshots
