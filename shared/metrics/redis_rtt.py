"""The Redis round trip as each service sees it, sampled by a PING in the background."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from shared.metrics.families import REDIS_RTT
from shared.metrics.recording import child
from shared.runtime import ticks


async def redis_rtt_probe(r: Any, service: str, interval_s: float = 10.0) -> None:
    """PING Redis every ``interval_s`` and observe the round trip (runs until cancelled)."""
    observe = child(REDIS_RTT, service).observe
    while True:
        started = time.perf_counter()
        try:
            await r.ping()
        except asyncio.CancelledError:
            raise
        except Exception:
            pass
        else:
            observe(time.perf_counter() - started)
        await asyncio.sleep(ticks.until_boundary(interval_s))  # with the process's other timers
