"""Metrics written by several processes in prometheus_client's multiprocess mode, read back the
way a scrape of the gateway reads them (``shared.metrics.exposition`` in another process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from shared import metrics

ROOT = Path(__file__).resolve().parents[1]


def families_after_children(child: str, counts: tuple[int, ...], directory: Path) -> dict[str, Any]:
    """Run ``child`` (Python source) once per count, ``sys.argv[1]`` being the count, each a
    process of its own sharing ``directory``; then the metric families one exposition shows."""
    env = {**os.environ, metrics.MULTIPROC_ENV: str(directory), "PYTHONPATH": str(ROOT)}
    for count in counts:
        subprocess.run([sys.executable, "-c", child, str(count)], env=env, check=True)
    reader = "from shared import metrics; print(metrics.exposition().decode())"
    out = subprocess.run(
        [sys.executable, "-c", reader], env=env, check=True, capture_output=True, text=True
    ).stdout
    return {f.name: f for f in text_string_to_metric_families(out)}


def gateway_request_counts(families: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The values of the gateway's request counters and of its duration histograms' counts,
    one per series: what every gateway process's answered requests add up to."""
    requests = families["conch_gateway_requests"].samples
    duration = families["conch_request_duration_seconds"].samples
    return (
        [s.value for s in requests if s.name == "conch_gateway_requests_total"],
        [s.value for s in duration if s.name.endswith("_count")],
    )
