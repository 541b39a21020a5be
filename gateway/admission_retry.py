"""Admission that rides out a Redis restart: a refused or dropped connection is retried until
the request's deadline is near, then answered 503.

A Redis that restarts (a crash under ``conch up``, which restarts it; a failover) is back within
a second or two; a request that arrives meanwhile would otherwise be refused although the mesh
is about to serve it. Retrying is safe because both admission scripts are idempotent: they
record the request id, so a script that ran before its connection dropped queues nothing the
second time (``shared.admission_script``, ``gateway.sequence_admission``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.errors import REDIS_ERRORS

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 0.05
LONGEST_PAUSE_S = 0.5
# Stop retrying this long before the deadline, so the caller hears why (Redis) rather than a
# timeout, and has time left to retry elsewhere.
MARGIN_S = 0.1


async def admit_within(admit: Callable[[], Awaitable[int]], deadline_ms: int, model: str) -> int:
    """The admission script's answer; Redis connection errors retried with growing pauses while
    the deadline allows, the last one raised (answered 503 by the protocol adapter)."""
    pause, tries = FIRST_PAUSE_S, 0
    while True:
        try:
            return await admit()
        except REDIS_ERRORS as exc:
            left_s = deadline_ms / 1000 - time.time() - MARGIN_S
            if left_s < pause:
                raise
            tries += 1
            if tries == 1:
                log.warning(
                    "redis unreachable at admission; retrying within the deadline",
                    extra={"model": model, "error": str(exc), "left_s": round(left_s, 3)},
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE_S)
