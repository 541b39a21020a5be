"""One timer per process, and one instant per period for the whole mesh
(``shared.runtime.ticks``)."""

from __future__ import annotations

import asyncio
import time

import pytest

from shared.runtime import ticks


@pytest.mark.parametrize(
    ("now", "expected"),
    [(10.0, 1.0), (10.25, 0.75), (10.999, 0.001), (0.0, 1.0)],
)
def test_the_next_boundary_is_a_whole_period_from_zero(now: float, expected: float) -> None:
    assert ticks.boundary_after(1.0, now) == pytest.approx(expected)


def test_a_longer_period_shares_the_shorter_ones_boundaries() -> None:
    # The 10 s safety poll falls on a 1 s heartbeat boundary: one wake, not two.
    now = 1234.4
    poll_at = now + ticks.boundary_after(10.0, now)
    beat_at = now + ticks.boundary_after(1.0, now)
    assert poll_at == pytest.approx(1240.0)
    assert (poll_at - beat_at) % 1.0 == pytest.approx(0.0)


def test_no_period_means_now() -> None:
    assert ticks.boundary_after(0.0, 5.5) == 0.0


async def test_threads_and_event_loops_share_the_boundaries() -> None:
    """A heartbeat thread (``time.monotonic``) and every process's event loop (asyncio's and
    uvloop's ``loop.time()``) read the same clock, so their boundaries coincide."""
    loop = asyncio.get_running_loop()
    for _ in range(3):
        thread_s = ticks.until_boundary_monotonic(1.0)
        loop_s = ticks.until_boundary(1.0, loop)
        # Read a moment apart: the same boundary, unless one read fell just across it.
        assert abs(thread_s - loop_s) < 0.05 or abs(abs(thread_s - loop_s) - 1.0) < 0.05
        assert abs(time.monotonic() - loop.time()) < 0.05
