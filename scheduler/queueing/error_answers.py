"""Answering queued requests with an error, and taking them off their request streams.

The replies go to the gateways' reply streams first, then one fenced script
(``shared/lua/fenced_ack_many.lua``) acks and deletes the entries this scheduler still owns
and counts them in the stats hash, all in one round trip. A crash between the two leaves the
entries pending: they are answered again later, and the gateway keeps only the first answer. The
failure is counted with Triton's reason: a scheduler timeout is REJECTED, a delivery limit OTHER.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import redis.asyncio as aioredis

from shared import metrics
from shared.fleet.fencing import queue_fenced_ack_many
from shared.fleet.publish import queue_replies
from shared.wire import envelope, keys
from shared.wire.envelope import RequestHeader
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)


async def answer_errors(
    r: aioredis.Redis,
    model: str,
    version: int,
    items: list[tuple[RequestHeader, bytes, bytes]],
    messages: list[str],
    code: ErrorCode,
    consumer: str,
) -> int:
    """Answer requests ``(header, stream, entry id)`` with an error, one message each; returns
    how many were still this scheduler's (acked and counted)."""
    by_stream: dict[bytes, list[bytes]] = defaultdict(list)
    for _, stream, entry_id in items:
        by_stream[stream].append(entry_id)
    reason = metrics.REJECTED if code == ErrorCode.UNAVAILABLE else metrics.OTHER
    async with r.pipeline(transaction=False) as pipe:
        queue_replies(
            pipe,
            (
                (h.reply_to, envelope.error_reply(h.id, model, version, code.value, msg))
                for (h, _, _), msg in zip(items, messages, strict=True)
            ),
        )
        queue_fenced_ack_many(
            pipe, keys.stats(model, version), keys.SCHEDULER_GROUP, consumer, by_stream
        )
        results = await pipe.execute()
    acked = int(results[-1])
    if acked:
        metrics.record_failures(model, version, reason, acked)
    if acked < len(items):
        metrics.record_late_result("scheduler", model, version, len(items) - acked)
    log.warning(
        "requests answered with an error by the scheduler",
        extra={
            "model": model,
            "version": version,
            "count": len(items),
            "reason": messages[0],
            "request_ids": [h.id for h, _, _ in items],
        },
    )
    return acked
