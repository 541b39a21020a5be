"""Marking a request cancelled: its client disconnected, cancelled, or stopped reading.

One key per request (``keys.cancel``) and its sub-requests' (ensemble steps, BLS calls), each
announced on ``keys.cancel_channel()``: ``shared.fleet.cancel_marks``. Schedulers take a queued
request out at once, workers never start one and let a running model see ``is_cancelled()``; a
request that already finished ignores it. Best effort: a failed write is logged, and the
request's deadline still bounds the work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis.asyncio as aioredis

from shared import metrics
from shared.fleet.cancel_marks import mark_cancelled

log = logging.getLogger(__name__)


async def cancel_request(r: aioredis.Redis, model: str, request_id: str, deadline_ms: int) -> None:
    try:
        await mark_cancelled(r, model, request_id, deadline_ms)
    except Exception:
        log.warning("could not mark a request cancelled", extra={"request": request_id})
        return
    metrics.record_client_cancel(model)


def zero_counters(models: Iterable[str]) -> None:
    """Create each model's cancellation counter at zero (after each model-table refresh), so
    that rates and the dashboards' cancellation panel read 0 before the first cancel."""
    for model in models:
        metrics.init_client_cancels(model)
