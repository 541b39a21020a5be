"""Sequence cells: steps of N concurrent sequences of the stateful ``sequence_accumulator``.

The model is the example repository's (ONNX, implicit state, ``direct``, 8 slots per instance),
served with two instances: 16 slots, so 16 sequences run at once rather than half of them waiting
in the backlog for a slot, as Triton's sequence batcher would make them wait too. The warmup and
the measured run drive the same sequence ids (each START restarts its sequence in place), so
the sequences a run leaves open do not hold slots the next one needs.

A cell ``sequence_accumulator:16:sequence`` runs wrk (one thread, 16 connections) with
``bench/sequence.lua``: 16 sequences, each sent its next step as soon as the answer to its last
one is back, every answer checked against the running sum, so a wrong or lost step shows up as
an error, not as speed. The harness's ``load.sh`` posts one fixed body and cannot carry a
sequence; this cell reports the same columns (requests/s, p50/p90/p99, errors, CPU by process).

Requests/s, errors and answers come from wrk. The latency percentiles come from the gateway's
``conch_request_duration_seconds`` histogram over the measured window (interpolated within
buckets as ``histogram_quantile`` does): wrk 4.1's own latency figures for a script that builds
each request and reads each answer did not add up (a mean latency that Little's law forbids at
that concurrency and rate), while the gateway's agree with it. They leave out the client's
loopback HTTP leg (well under a millisecond here); wrk's figures are kept in the row as
``wrk_p50_ms``/``wrk_p99_ms``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LUA = Path(__file__).resolve().parent / "sequence.lua"
MODEL = "sequence_accumulator"


def write(repo: Path) -> None:
    """The example repository's accumulator (ONNX, implicit state), built by its own script."""
    if (repo / MODEL / "1" / "model.onnx").exists():
        return
    spec = importlib.util.spec_from_file_location(
        "conch_sequence_models", ROOT / "examples" / "sequence_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    example = module.build_sequence_accumulator()
    (repo / MODEL / "1").mkdir(parents=True, exist_ok=True)
    (repo / MODEL / "1" / "model.onnx").write_bytes(example.onnx_model.SerializeToString())
    config = example.config_pbtxt().replace(
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
        "instance_group [ { count: 2 kind: KIND_CPU } ]",
    )
    (repo / MODEL / "config.pbtxt").write_text(config)


def new_base() -> int:
    """The first sequence id of a cell: a fresh one per cell keeps cells and runs apart."""
    return random.randrange(1, 2**40)


def close(url: str, model: str, sequences: int, base: int) -> None:
    """End the sequences a run left open (wrk stops mid-sequence), so that their slots are free
    for the next cell rather than held until the idle timeout."""
    import urllib.error
    import urllib.request

    for index in range(1, sequences + 1):
        body = json.dumps(
            {
                "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [0]}],
                "parameters": {"sequence_id": base + index, "sequence_end": True},
            }
        ).encode()
        request = urllib.request.Request(
            f"{url.rstrip('/')}/v2/models/{model}/infer",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with contextlib.suppress(urllib.error.HTTPError):  # already ended by its last step
            urllib.request.urlopen(request, timeout=30).close()


def run(
    url: str, label: str, model: str, sequences: int, seconds: int, base: int
) -> dict[str, Any]:
    """One wrk run, then its sequences ended; the row has load.sh's fields (``format`` is
    "sequence")."""
    before = _histogram(url, model)
    done = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{sequences}",
            f"-d{seconds}s",
            "--timeout",
            "30s",
            "-s",
            str(LUA),
            f"{url.rstrip('/')}/v2/models/{model}/infer",
        ],
        env={"SEQUENCE_BASE": str(base), "SEQUENCES": str(sequences)},
        capture_output=True,
        text=True,
        check=False,
    )
    after = _histogram(url, model)
    close(url, model, sequences, base)
    lines = [line for line in done.stdout.splitlines() if line.startswith("WRKJSON ")]
    if not lines:
        raise SystemExit(f"wrk failed for the sequence cell: {done.stdout[-1000:]}{done.stderr}")
    summary = json.loads(lines[-1].split(" ", 1)[1])
    window = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in after}
    return {
        "server": label,
        "model": model,
        "concurrency": sequences,
        "format": "sequence",
        "rps": summary["rps"],
        "p50_ms": quantile(window, 0.50) * 1000,
        "p90_ms": quantile(window, 0.90) * 1000,
        "p99_ms": quantile(window, 0.99) * 1000,
        "errors": summary["errors"],
        "requests": summary["requests"],
        "wrong_answers": summary["wrong_answers"],
        "wrk_p50_ms": summary["p50_ms"],
        "wrk_p99_ms": summary["p99_ms"],
    }


def _histogram(url: str, model: str) -> dict[float, float]:
    """Cumulative bucket counts (upper bound -> count) of the gateway's request durations."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=10) as response:
        text = response.read().decode()
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "conch_request_duration_seconds_bucket"
                and sample.labels.get("model") == model
            ):
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    return buckets


def quantile(buckets: dict[float, float], q: float) -> float:
    """Prometheus' histogram_quantile over cumulative buckets (linear within a bucket)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return 0.0
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == float("inf"):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, count
    return lower
