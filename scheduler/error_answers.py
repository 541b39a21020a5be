"""Answering queued requests with an error, and taking them off their request streams.

The replies, the ack and delete of the entries and the failure count in the stats hash go out
in one MULTI, so a request is answered exactly when it leaves its stream. The failure is counted
with Triton's reason: a scheduler timeout is REJECTED, a delivery limit OTHER.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import redis.asyncio as aioredis

from scheduler.dispatch import ack_delete
from shared import envelope, keys, metrics
from shared.envelope import RequestHeader
from shared.errors import ErrorCode
from shared.publish import queue_replies

log = logging.getLogger(__name__)


async def answer_errors(
    r: aioredis.Redis,
    model: str,
    version: int,
    items: list[tuple[RequestHeader, bytes, bytes]],
    messages: list[str],
    code: ErrorCode,
) -> None:
    """Answer requests ``(header, stream, entry id)`` with an error, one message each."""
    by_stream: dict[bytes, list[bytes]] = defaultdict(list)
    reason = metrics.REJECTED if code == ErrorCode.UNAVAILABLE else metrics.OTHER
    async with r.pipeline(transaction=True) as pipe:
        pipe.hincrby(keys.stats(model, version), "fail_count", len(items))
        queue_replies(
            pipe,
            (
                (
                    h.reply_to,
                    envelope.error_reply(h.id, model, version, code.value, msg),
                )
                for (h, _, _), msg in zip(items, messages, strict=True)
            ),
        )
        for _, stream, entry_id in items:
            by_stream[stream].append(entry_id)
        ack_delete(pipe, by_stream)
        await pipe.execute()
    metrics.record_failures(model, version, reason, len(items))
    log.warning(
        "requests answered with an error by the scheduler",
        extra={
            "model": model,
            "version": version,
            "count": len(items),
            "reason": messages[0],
        },
    )
