"""Admission that rides out a Redis restart: a refused or dropped connection is retried until
the request's deadline is near, then answered 503.

A Redis that restarts (a crash under ``conch up``, which restarts it; a failover) is back within
a second or two; a request that arrives meanwhile would otherwise be refused although the mesh
is about to serve it. Retrying is safe because both admission scripts are idempotent: they
record the request id, so a script that ran before its connection dropped queues nothing the
second time (``shared.fleet.admission_script``, ``gateway.core.sequence_admission``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from shared.runtime.redis_retry import until_answered

log = logging.getLogger(__name__)

# Stop retrying this long before the deadline, so the caller hears why (Redis) rather than a
# timeout, and has time left to retry elsewhere.
MARGIN_S = 0.1


async def admit_within(admit: Callable[[], Awaitable[int]], deadline_ms: int, model: str) -> int:
    """The admission script's answer; Redis connection errors retried while the deadline
    allows, the last one raised (answered 503 by the protocol adapter)."""
    bound_s = deadline_ms / 1000 - time.time() - MARGIN_S
    warned: list[bool] = []

    def warn_once(exc: Exception) -> None:
        if not warned:
            warned.append(True)
            log.warning(
                "redis unreachable at admission; retrying within the deadline",
                extra={"model": model, "error": str(exc), "left_s": round(bound_s, 3)},
            )

    return await until_answered(admit, bound_s, warn_once)
