"""One benchmark cell: a ``load.sh`` window (or a sequence/ensemble client) with the server's CPU
over the same window and, for Conch, the average batch from the statistics extension."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

from bench import ensembles, sequences
from bench.cells import Cell


def run_cell(
    load_sh: Path,
    url: str,
    label: str,
    cell: Cell,
    args: argparse.Namespace,
    env: dict[str, str],
    cpu: CpuMeter | None = None,
) -> dict[str, Any]:
    """The cell's row, with the server's CPU microseconds per answered request (every process of
    the server, from ``/proc``): the measure that drifts least on these VMs."""
    row = _measure(load_sh, url, label, cell, args, env, cpu)
    cores = sum((row.get("cpu_cores") or {}).values())
    if cores and row.get("rps"):
        row["cpu_us_per_req"] = round(cores / row["rps"] * 1e6, 1)
    return row


class CpuMeter(Protocol):
    def snapshot(self) -> Any: ...

    def cores_since(self, before: Any, wall_s: float) -> dict[str, float]: ...


def _measure(
    load_sh: Path,
    url: str,
    label: str,
    cell: Cell,
    args: argparse.Namespace,
    env: dict[str, str],
    cpu: CpuMeter | None = None,
) -> dict[str, Any]:
    if cell.sequence:
        return run_sequence_cell(url, label, cell, args, cpu)
    if ensembles.wanted(cell):
        started = cpu.snapshot() if cpu else None
        wall = time.monotonic()
        ensemble_row = ensembles.run(url, label, cell, args.duration, args.warmup)
        if cpu and started is not None:
            ensemble_row["cpu_cores"] = cpu.cores_since(started, time.monotonic() - wall)
        return ensemble_row
    cell_env = {
        **env,
        "SERVER": label,
        "FORMAT": "binary" if cell.binary else "json",
        "WARMUP": str(args.warmup),
    }
    before_stats = _stats(url, cell.model) if cpu else None
    if args.warmup:
        subprocess.run(
            ["bash", str(load_sh), url, cell.model, str(cell.concurrency), "1"],
            env={**cell_env, "CHECK": "0"},
            capture_output=True,
            check=False,
        )
        cell_env["WARMUP"] = "0"
        before_stats = _stats(url, cell.model) if cpu else None
    started = cpu.snapshot() if cpu else None
    wall = time.monotonic()
    done = subprocess.run(
        ["bash", str(load_sh), url, cell.model, str(cell.concurrency), str(args.duration)],
        env=cell_env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - wall
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"server"')]
    if not lines:
        raise SystemExit(f"load.sh failed for {cell}: {done.stderr[-2000:]}")
    row: dict[str, Any] = json.loads(lines[-1])
    if cpu and started is not None:
        row["cpu_cores"] = cpu.cores_since(started, wall)
        after_stats = _stats(url, cell.model)
        if before_stats and after_stats:
            inferences = after_stats[0] - before_stats[0]
            executions = after_stats[1] - before_stats[1]
            row["avg_batch"] = round(inferences / executions, 2) if executions else None
    return row


def run_sequence_cell(
    url: str, label: str, cell: Cell, args: argparse.Namespace, cpu: CpuMeter | None
) -> dict[str, Any]:
    from conch import http_wait

    if not http_wait.wait_ok(f"{url}/v2/models/{cell.model}/ready", 120):
        raise SystemExit(f"model {cell.model} is not ready at {url}")
    base = sequences.new_base()
    if args.warmup:
        sequences.run(url, label, cell.model, cell.concurrency, args.warmup, base)
    before_stats = _stats(url, cell.model)
    started = cpu.snapshot() if cpu else None
    wall = time.monotonic()
    row = sequences.run(url, label, cell.model, cell.concurrency, args.duration, base)
    wall = time.monotonic() - wall
    if cpu and started is not None:
        row["cpu_cores"] = cpu.cores_since(started, wall)
    after_stats = _stats(url, cell.model)
    if before_stats and after_stats and after_stats[1] > before_stats[1]:
        inferences, executions = (a - b for a, b in zip(after_stats, before_stats, strict=True))
        row["avg_batch"] = round(inferences / executions, 2)
    return row


def _stats(url: str, model: str) -> tuple[int, int] | None:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/v2/models/{model}/stats", timeout=5) as response:
            stats = json.load(response)["model_stats"]
    except OSError:
        return None
    return (
        sum(int(s["inference_count"]) for s in stats),
        sum(int(s["execution_count"]) for s in stats),
    )
