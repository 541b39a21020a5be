"""Marking a request cancelled in Redis, with the sub-requests it made.

One key per request (``keys.cancel``, "1" until ``CANCEL_KEY_GRACE_MS`` past its deadline) and
the same for each sub-request listed under ``keys.cancel_children`` (BLS calls), each also
announced on ``keys.cancel_channel()`` (schedulers take it out of their queues, workers never
start it and tell a running model). Used by the gateways (a client gone) and by a Python
model's BLS client (a decoupled call whose responses are no longer read, or past its deadline).
"""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from shared.wire import keys

# The answer to a request whose client cancelled it, wherever it was stopped.
CANCELLED_TEXT = "Request was cancelled: the client disconnected or cancelled it"

# How long a cancel key outlives the request's deadline (a late redelivery still sees it).
CANCEL_KEY_GRACE_MS = 60_000


async def mark_cancelled(r: aioredis.Redis, model: str, request_id: str, deadline_ms: int) -> None:
    """Set the request's cancel key and its children's, and announce each (raises on a Redis
    error: the caller decides whether that matters)."""
    ttl_ms = max(1, deadline_ms - int(time.time() * 1000)) + CANCEL_KEY_GRACE_MS
    # The notices go after the pipelines, one PUBLISH each: a Redis Cluster pipeline refuses
    # PUBLISH (and a notice must not announce a key that is not set yet).
    async with r.pipeline(transaction=False) as pipe:
        pipe.set(keys.cancel(model, request_id), "1", px=ttl_ms)
        pipe.smembers(keys.cancel_children(model, request_id))
        _, children = await pipe.execute()
    notices = [f"{model}\x00{request_id}"]
    if children:
        async with r.pipeline(transaction=False) as pipe:
            for child in children:
                text = child.decode() if isinstance(child, bytes) else child
                child_model, _, child_id = text.partition("\x00")
                pipe.set(keys.cancel(child_model, child_id), "1", px=ttl_ms)
                notices.append(text)
            await pipe.execute()
    for notice in notices:
        await r.publish(keys.cancel_channel(), notice)
