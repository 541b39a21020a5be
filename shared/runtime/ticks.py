"""One timer per process: periodic work due on the same whole multiples of the event loop's
clock, so that a process's periodic loops (uvicorn's tick, the heartbeat, the change feed's
safety poll, the reclaim pass) wake it once together rather than each at its own instant.

An event loop runs every timer that is due when it wakes; two timers a millisecond apart are
two wake-ups, two timers due at the same boundary are one.
"""

from __future__ import annotations

import asyncio
import time


def until_boundary(period_s: float, loop: asyncio.AbstractEventLoop | None = None) -> float:
    """Seconds from now to the next whole multiple of ``period_s`` on the loop's clock (a full
    period when exactly on one)."""
    return boundary_after(period_s, (loop or asyncio.get_running_loop()).time())


def until_boundary_monotonic(period_s: float) -> float:
    """The same for a thread, on ``time.monotonic()``: the clock every event loop here reads
    (asyncio's and uvloop's both read CLOCK_MONOTONIC), so a thread's periodic work falls on
    the boundaries of every process's loops, and Redis takes the beats of the whole mesh in
    one wake rather than one each."""
    return boundary_after(period_s, time.monotonic())


def boundary_after(period_s: float, now: float) -> float:
    """Seconds from ``now`` to the next whole multiple of ``period_s`` (pure)."""
    if period_s <= 0:
        return 0.0
    return period_s - (now % period_s) or period_s


async def sleep_aligned(period_s: float) -> None:
    """Sleep to the next boundary of ``period_s`` (at most one period)."""
    await asyncio.sleep(until_boundary(period_s))
