"""The run's figures (the issue's list) from its raw records, and the Markdown table of them.

Latency percentiles are over answered requests (2xx) only; the hit ratio is over every request
sent (one that failed did not find its model serving either way). Percentiles take the lower of
the two nearest ranks, as bench/loadgen.py does, so a figure is always a latency measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

MIB = 1024 * 1024
TIMEOUT, SOCKET_ERROR = -1, 0  # outcomes that are not HTTP statuses


def percentile_ms(latency_s: npt.NDArray[np.float64], q: float) -> float | None:
    """The ``q`` quantile (0..1) in milliseconds; None with no latencies."""
    if len(latency_s) == 0:
        return None
    ordered = np.sort(latency_s)
    return round(float(ordered[int(q * (len(ordered) - 1))]) * 1000, 3)


def outcome_name(status: int) -> str:
    if status == TIMEOUT:
        return "timeout"
    if status == SOCKET_ERROR:
        return "socket error"
    return str(status)


def summarize(
    models: npt.NDArray[np.int64],
    latency: npt.NDArray[np.float64],
    status: npt.NDArray[np.int64],
    cold: npt.NDArray[np.bool_],
    elapsed_s: float,
    loads: int,
    evictions: int,
    peak_rss_bytes: int,
) -> dict[str, Any]:
    """The figures of one run: throughput, hit ratio, cold and warm percentiles, loads per
    minute, peak resident memory of the workers, and the outcomes."""
    ok = (status >= 200) & (status < 300)
    outcomes: dict[str, int] = {}
    for value, count in zip(*np.unique(status, return_counts=True), strict=True):
        outcomes[outcome_name(int(value))] = int(count)
    cold_ok, warm_ok = latency[ok & cold], latency[ok & ~cold]
    sent = len(models)
    return {
        "requests": sent,
        "answered": int(ok.sum()),
        "errors": int(sent - ok.sum()),
        "outcomes": outcomes,
        "models_requested": len(np.unique(models)),
        "elapsed_s": round(elapsed_s, 3),
        "throughput_rps": round(float(ok.sum()) / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        "hit_ratio": round(float((~cold).sum()) / sent, 4) if sent else None,
        "cold_requests": int(cold.sum()),
        "cold_p50_ms": percentile_ms(cold_ok, 0.50),
        "cold_p99_ms": percentile_ms(cold_ok, 0.99),
        "warm_p50_ms": percentile_ms(warm_ok, 0.50),
        "warm_p99_ms": percentile_ms(warm_ok, 0.99),
        "all_p50_ms": percentile_ms(latency[ok], 0.50),
        "all_p99_ms": percentile_ms(latency[ok], 0.99),
        "loads": loads,
        "loads_per_min": round(loads * 60.0 / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        "evictions": evictions,
        "peak_worker_rss_mib": round(peak_rss_bytes / MIB, 1),
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


# (label, how one run's summary shows it)
_ROWS: list[tuple[str, Any]] = [
    ("throughput (req/s)", lambda s: f"{s['throughput_rps']:,.1f}"),
    (
        "hit ratio (requests that found their model loaded)",
        lambda s: "-" if s["hit_ratio"] is None else f"{s['hit_ratio']:.1%}",
    ),
    ("cold-start p50 / p99 (ms)", lambda s: f"{_ms(s['cold_p50_ms'])} / {_ms(s['cold_p99_ms'])}"),
    ("warm p50 / p99 (ms)", lambda s: f"{_ms(s['warm_p50_ms'])} / {_ms(s['warm_p99_ms'])}"),
    ("loads per minute", lambda s: f"{s['loads_per_min']:,.1f} ({s['loads']} loads)"),
    ("evictions seen in the index", lambda s: str(s["evictions"])),
    ("peak resident memory, workers (MiB)", lambda s: f"{s['peak_worker_rss_mib']:,.1f}"),
    (
        "workers' resident memory before the run (MiB)",
        lambda s: _num(s.get("idle_worker_rss_mib")),
    ),
    ("loads the workers counted (conch_model_loads_total)", lambda s: _num(s.get("server_loads"))),
    ("load generator's CPU (cores)", lambda s: _num(s.get("client_cpu_cores"))),
    (
        "requests (errors) / models requested",
        lambda s: f"{s['requests']:,} ({s['errors']}) / {s['models_requested']}",
    ),
]


def markdown_table(runs: list[dict[str, Any]]) -> str:
    """One column per run (its label: mode, models, workers), one row per figure."""
    header = "| figure | " + " | ".join(run["label"] for run in runs) + " |"
    lines = [header, "|---|" + "---:|" * len(runs)]
    for label, show in _ROWS:
        lines.append(f"| {label} | " + " | ".join(show(run["summary"]) for run in runs) + " |")
    return "\n".join(lines)
