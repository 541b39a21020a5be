"""Which requests of a batch their clients cancelled (``keys.cancel``), in one MGET.

Workers ask before running a request (a cancelled one is answered CANCELLED and never runs)
and, for a decoupled model, every ``POLL_S`` while its streams are open (the model then sees
``is_cancelled()``). An ordinary request is asked about only when it waited long enough to have
been abandoned (``WAITED_MS``), and then only when the worker's cancel listener
(``shared.fleet.cancel_listener``) may have missed its cancellation: the hot path makes no extra
round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import redis.asyncio as aioredis

from shared.fleet.cancel_listener import CancelledRequests
from shared.fleet.cancel_marks import CANCELLED_TEXT
from shared.wire import envelope, keys
from shared.wire.envelope import InferRequest, Reply
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

POLL_S = 0.05
WAITED_MS = 20


async def cancelled_ids(r: aioredis.Redis, model: str, request_ids: Sequence[str]) -> set[str]:
    if not request_ids:
        return set()
    values = await r.mget([keys.cancel(model, request_id) for request_id in request_ids])
    return {rid for rid, value in zip(request_ids, values, strict=True) if value is not None}


async def drop_cancelled(
    r: aioredis.Redis,
    model: str,
    now_ms: float,
    runnable: list[tuple[int, InferRequest]],
    replies: list[tuple[str, Reply]],
    stats: dict[str, int],
    heard: CancelledRequests,
) -> list[tuple[int, InferRequest]]:
    """The requests of an ordinary batch that may run: those whose clients cancelled them are
    answered CANCELLED (added to ``replies``), counted as ``cancel_count``, and never run.
    Redis is asked only about requests that waited ``WAITED_MS`` or more and whose
    cancellation the listener may have missed."""
    cancelled = {request.id for _, request in runnable if request.id in heard}
    unsure = [
        request.id
        for _, request in runnable
        if now_ms - request.enqueued_ms >= WAITED_MS
        and not heard.heard_all_since(request.enqueued_ms)
        and request.id not in cancelled
    ]
    if unsure:
        try:
            cancelled |= await cancelled_ids(r, model, unsure)
        except Exception:  # cannot ask: run them (the deadline still bounds the work)
            log.warning("could not read cancel keys", exc_info=True)
    if not cancelled:
        return runnable
    for _, request in runnable:
        if request.id in cancelled:
            reply = envelope.error_reply(
                request.id, request.model, request.version, ErrorCode.CANCELLED, CANCELLED_TEXT
            )
            replies.append((request.reply_to, reply))
    stats["cancel_count"] = len(cancelled)
    return [(i, request) for i, request in runnable if request.id not in cancelled]
