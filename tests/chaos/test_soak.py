"""The soak: many requests at mixed priorities and tenants, faults at random moments.

The short form (2,000 requests, a few faults) runs with the suite and checks every figure but
RSS, which a run of a minute cannot judge against a warm-up; the full form (100,000 requests,
``chaos`` marker, ``make chaos``) checks RSS too. ``CONCH_SOAK_REQUESTS``, ``CONCH_SOAK_RATE``
and ``CONCH_SOAK_SEED`` change the full form's size, rate and fault schedule.
"""

from __future__ import annotations

import os

import pytest

from tests.chaos.chaos_mesh import ChaosMesh
from tests.chaos.soak import RSS_GROWTH_LIMIT, run_soak

pytestmark = [pytest.mark.e2e]


def _check(report_failures: dict[str, int], extra_keys: list[str], summary: str) -> None:
    assert not report_failures, summary
    assert not extra_keys, f"keys left after the traffic stopped: {extra_keys[:20]}"


@pytest.mark.timeout(600)
def test_soak_short(chaos_mesh: ChaosMesh) -> None:
    report = run_soak(chaos_mesh, total=2_000, rate=60, fault_gap_s=8, seed=3)
    assert len(report.faults) >= 2
    summary = f"{report.verdict.summary()}\n{report.verdict.examples}\nfaults {report.faults}"
    _check(report.verdict.failures, report.extra_keys, summary)


@pytest.mark.chaos
@pytest.mark.timeout(7200)
def test_soak_full(chaos_mesh: ChaosMesh) -> None:
    total = int(os.environ.get("CONCH_SOAK_REQUESTS", "100000"))
    rate = float(os.environ.get("CONCH_SOAK_RATE", "100"))
    seed = int(os.environ.get("CONCH_SOAK_SEED", "12"))
    report = run_soak(chaos_mesh, total=total, rate=rate, fault_gap_s=45, seed=seed)
    summary = f"{report.verdict.summary()}\n{report.verdict.examples}\nfaults {report.faults}"
    _check(report.verdict.failures, report.extra_keys, summary)
    assert not report.rss_over_limit, (
        f"RSS grew {RSS_GROWTH_LIMIT:.0%} or more after warm-up: {report.rss_over_limit}"
    )
