"""Run a refresh coroutine forever on an interval, logging (not raising) its failures.

Every cache of Redis state (model table, tenants, weights) refreshes this way: a failed refresh
keeps the last good view and tries again at the next tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


async def every(interval_s: float, refresh: Callable[[], Awaitable[object]], what: str) -> None:
    while True:
        try:
            await refresh()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("refresh failed", extra={"what": what})
        await asyncio.sleep(interval_s)
