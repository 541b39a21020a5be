"""One NVIDIA ``perf_analyzer`` run against a KServe v2 server, read back as numbers.

``perf_analyzer`` is found in ``.conch/perf_analyzer`` (``scripts/fetch_perf_analyzer.sh``) or
``CONCH_PERF_ANALYZER_DIR``; it needs its own ``lib`` on the library path.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ClientFigures:
    """What the client saw over the measurement window: requests/s and latency in µs."""

    throughput: float
    p50_us: float
    p99_us: float


def home() -> Path:
    return Path(os.environ.get("CONCH_PERF_ANALYZER_DIR", str(ROOT / ".conch" / "perf_analyzer")))


def run(
    url: str,
    model: str,
    concurrency: int,
    interval_ms: int,
    protocol: str = "http",
    extra: tuple[str, ...] = (),
) -> ClientFigures:
    """Measure ``model`` at ``concurrency`` until three windows agree (or three trials end)."""
    base = home()
    binary = base / "bin" / "perf_analyzer"
    if not binary.exists():
        raise SystemExit(f"no perf_analyzer at {binary}: run scripts/fetch_perf_analyzer.sh")
    answer = subprocess.run(
        [
            str(binary),
            *("-m", model, "-u", url, "-i", protocol, "--percentile", "50"),
            *("--concurrency-range", str(concurrency), "--measurement-interval", str(interval_ms)),
            *("-s", "1000", "--max-trials", "3"),
            *extra,
        ],
        env={**os.environ, "LD_LIBRARY_PATH": str(base / "lib")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if answer.returncode != 0:
        raise SystemExit(f"perf_analyzer on {model} failed:\n{answer.stdout}\n{answer.stderr}")
    found = {
        key: re.search(pattern, answer.stdout)
        for key, pattern in (
            ("throughput", r"Throughput: ([\d.]+) infer/sec"),
            ("p50", r"p50 latency: (\d+) usec"),
            ("p99", r"p99 latency: (\d+) usec"),
        )
    }
    missing = [key for key, match in found.items() if match is None]
    if missing:
        raise SystemExit(f"perf_analyzer on {model}: no {', '.join(missing)} in\n{answer.stdout}")
    value = {key: float(match.group(1)) for key, match in found.items() if match is not None}
    return ClientFigures(value["throughput"], value["p50"], value["p99"])
