"""Marking a request cancelled: its client disconnected, cancelled, or stopped reading.

One key per request (``keys.cancel``), set to "1" until 60 s past the request's deadline, and
the same for each sub-request listed under ``keys.cancel_children`` (ensemble steps, BLS calls),
each also announced on ``keys.cancel_channel()`` (workers keep what they hear).
Workers never start a request whose key exists and let a running decoupled model see
``is_cancelled()``; a request that already finished ignores it. Best effort: a failed write is
logged, and the request's deadline still bounds the work.
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis

from shared import keys, metrics

log = logging.getLogger(__name__)

# How long a cancel key outlives the request's deadline (a late redelivery still sees it).
CANCEL_KEY_GRACE_MS = 60_000


async def cancel_request(r: aioredis.Redis, model: str, request_id: str, deadline_ms: int) -> None:
    ttl_ms = max(1, deadline_ms - int(time.time() * 1000)) + CANCEL_KEY_GRACE_MS
    try:
        async with r.pipeline(transaction=False) as pipe:
            pipe.set(keys.cancel(model, request_id), "1", px=ttl_ms)
            pipe.publish(keys.cancel_channel(), f"{model}\x00{request_id}")
            pipe.smembers(keys.cancel_children(model, request_id))
            _, _, children = await pipe.execute()
        if children:
            async with r.pipeline(transaction=False) as pipe:
                for child in children:
                    text = child.decode() if isinstance(child, bytes) else child
                    child_model, _, child_id = text.partition("\x00")
                    pipe.set(keys.cancel(child_model, child_id), "1", px=ttl_ms)
                    pipe.publish(keys.cancel_channel(), text)
                await pipe.execute()
    except Exception:
        log.warning("could not mark a request cancelled", extra={"request": request_id})
        return
    metrics.record_client_cancel(model)
