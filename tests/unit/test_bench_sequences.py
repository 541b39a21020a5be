"""The sequence cells of ``conch bench``: their cell syntax and the percentiles they read from
the gateway's histogram (Prometheus' histogram_quantile, linear within a bucket)."""

from __future__ import annotations

import pytest

from bench.cells import parse_cells
from bench.sequences import quantile

INF = float("inf")


def test_sequence_cells_parse() -> None:
    (cell,) = parse_cells("sequence_accumulator:16:sequence")
    assert (cell.model, cell.concurrency, cell.sequence, cell.binary) == (
        "sequence_accumulator",
        16,
        True,
        False,
    )
    assert str(cell) == "sequence_accumulator:16:sequence"
    with pytest.raises(SystemExit):
        parse_cells("sequence_accumulator:16:stream")


def test_quantiles_interpolate_within_buckets_as_prometheus_does() -> None:
    buckets = {0.001: 0.0, 0.002: 50.0, 0.005: 100.0, INF: 100.0}
    assert quantile(buckets, 0.5) == pytest.approx(0.002)
    assert quantile(buckets, 0.75) == pytest.approx(0.0035)
    assert quantile(buckets, 0.25) == pytest.approx(0.0015)
    assert quantile({0.01: 90.0, INF: 100.0}, 0.99) == 0.01  # in +Inf: the last finite bound
    assert quantile({}, 0.5) == 0.0
