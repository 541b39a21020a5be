"""The benchmark's comparison: each Conch cell against the peer's best configuration for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import peers
from bench.cells import parse_cells
from bench.report import markdown_table, same_run_ratios


def _row(server: str, model: str, c: int, rps: float, p50: float, p99: float, cpu: float):
    return {
        "server": server,
        "model": model,
        "concurrency": c,
        "format": "json",
        "rps": rps,
        "p50_ms": p50,
        "p90_ms": p50,
        "p99_ms": p99,
        "errors": 0,
        "cpu_us_per_req": cpu,
    }


def test_ratios_pair_each_conch_cell_with_every_peer_that_served_it() -> None:
    rows = [
        _row("mlserver-tuned", "mlp", 64, 2000, 30, 60, 500),
        _row("rayserve-tuned", "mlp", 64, 2500, 25, 50, 750),
        _row("rayserve-tuned-nobatch", "add_sub", 1, 1500, 0.5, 2.0, 600),
        _row("conch", "mlp", 64, 5000, 10, 40, 300),
        _row("conch", "add_sub", 1, 1000, 1.0, 3.0, 900),
    ]
    table = same_run_ratios(rows)
    assert "| mlp c=64 json | mlserver-tuned | 2.50 | 0.33 | 0.67 | 0.60 |" in table
    assert "| mlp c=64 json | rayserve-tuned | 2.00 | 0.40 | 0.80 | 0.40 |" in table
    # The c=1 peer ran with batching off; it is still the Ray Serve peer.
    assert "| add_sub c=1 json | rayserve-tuned | 0.67 | 2.00 | 1.50 | 1.50 |" in table
    assert "CPU µs/req" in markdown_table(rows)


def test_no_peer_rows_means_no_comparison() -> None:
    assert same_run_ratios([_row("conch", "mlp", 64, 5000, 10, 40, 300)]) == ""


def test_each_peer_runs_its_best_configuration_per_cell(tmp_path: Path) -> None:
    cells = parse_cells("mlp:1,mlp:64,add_sub:1,mlp:64:binary,membound:64")
    groups = dict(
        (config.label, served)
        for config, served in peers.grouped("ray", cells, tmp_path, 8080, tmp_path)
    )
    assert [str(c) for c in groups["rayserve-tuned-nobatch"]] == ["mlp:1", "add_sub:1"]
    assert [str(c) for c in groups["rayserve-tuned"]] == ["mlp:64"]
    ((mlserver, served),) = peers.grouped("mlserver", cells, tmp_path, 8080, tmp_path)
    assert "off" in mlserver.argv  # adaptive batching off: its best at every concurrency
    assert len(served) == 3


def test_an_unknown_peer_is_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="unknown peer 'triton'"):
        peers.parse_peers("mlserver,triton")
