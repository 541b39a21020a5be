"""One timer per process: periodic work due on the same whole multiples of the event loop's
clock, so that a process's periodic loops (uvicorn's tick, the heartbeat, the change feed's
safety poll, the reclaim pass) wake it once together rather than each at its own instant.

An event loop runs every timer that is due when it wakes; two timers a millisecond apart are
two wake-ups, two timers due at the same boundary are one.
"""

from __future__ import annotations

import asyncio


def until_boundary(period_s: float, loop: asyncio.AbstractEventLoop | None = None) -> float:
    """Seconds from now to the next whole multiple of ``period_s`` on the loop's clock (a full
    period when exactly on one)."""
    if period_s <= 0:
        return 0.0
    now = (loop or asyncio.get_running_loop()).time()
    return period_s - (now % period_s) or period_s


async def sleep_aligned(period_s: float) -> None:
    """Sleep to the next boundary of ``period_s`` (at most one period)."""
    await asyncio.sleep(until_boundary(period_s))
