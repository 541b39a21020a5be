"""Ends the streams whose worker died mid-stream, with an error naming the cause.

A decoupled request that already sent frames is not replayed from the start (its client has
those frames): when its frames stop and the worker that sent them has not heartbeated within
the dead bound, the gateway ends the stream with UNAVAILABLE naming the worker, and marks the
request cancelled, so that a reclaim of its batch by another worker does not run it again. A
request that sent nothing is left to the normal reclaim, which may run it elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from gateway.core.cancellation import cancel_request
from shared.fleet import heartbeats
from shared.fleet.replies import ReplyRouter
from shared.wire import envelope
from shared.wire.errors import ErrorCode

log = logging.getLogger(__name__)

CHECK_S = 1.0


async def watch_streams(
    r: aioredis.Redis, replies: ReplyRouter, dead_bound_ms: int, ttl_ms: int
) -> None:
    while True:
        await replies.streams_open.wait()  # an idle gateway has no stream to watch
        await asyncio.sleep(CHECK_S)
        try:
            await check_once(r, replies, dead_bound_ms, ttl_ms)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("could not check the workers of open streams", exc_info=True)


async def check_once(
    r: aioredis.Redis, replies: ReplyRouter, dead_bound_ms: int, ttl_ms: int
) -> int:
    """End the streams of dead workers; returns how many were ended."""
    now = time.monotonic()
    quiet = [
        s
        for s in replies.streams()
        if s.frames and s.worker and not s.ended and now - s.last_frame >= CHECK_S
    ]
    if not quiet:
        return 0
    alive = await heartbeats.not_dead_ids(r, "worker", dead_bound_ms, ttl_ms)
    ended = 0
    for stream in quiet:
        if stream.worker in alive or stream.ended:
            continue
        last = stream.last_reply
        if last is None:
            continue
        message = (
            f"worker '{stream.worker}' died mid-stream (no heartbeat within "
            f"{dead_bound_ms} ms) after {stream.frames} responses; the stream is not replayed"
        )
        stream.fail(
            envelope.error_reply(
                stream.request_id, last.model, last.version, ErrorCode.UNAVAILABLE, message
            )
        )
        deadline_ms = int(time.time() * 1000) + 1
        await cancel_request(r, last.model, stream.request_id, deadline_ms)
        log.warning(message, extra={"request": stream.request_id})
        ended += 1
    return ended
