"""The gateway process's heartbeat: on its event loop (a process whose loop is stuck stops
beating, and the edge stops sending to it), one wake a period.

The beat goes out on the process's shared boundary (``shared.runtime.ticks``, with uvicorn's tick)
on a connection of its own that the event loop does not watch; its replies are read at the next
beat, in that same wake (``shared.runtime.deferred_replies``), rather than waking the process a
second time when they arrive. Replies that are not there by then (Redis stalled for a period) are
waited for on a thread, and no beat is sent meanwhile. A cluster keeps the awaited pipeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import cast

import redis

from shared import metrics
from shared.fleet import heartbeats
from shared.runtime import redis_cluster, redis_conn, ticks
from shared.runtime.deferred_replies import DeferredPipeline, commands_of

log = logging.getLogger(__name__)


async def beat_forever(
    redis_url: str,
    awaited: object,
    service_id: str,
    info: Mapping[str, str],
    ttl_ms: int,
    interval_s: float,
) -> None:
    """Until cancelled; on cancellation the beat in flight is read first (it lands before the
    caller deregisters). ``awaited`` is the process's asynchronous client (cluster only)."""
    if redis_cluster.is_cluster(redis_url):
        await _awaited_beats(awaited, service_id, info, ttl_ms, interval_s)
        return
    client = redis_conn.sync_client(
        redis_url, name="conch-gateway-heartbeat", single_connection=False
    )
    # A plain (not cluster) pool: its connections are redis.Connection.
    deferred = DeferredPipeline(cast(redis.Connection, client.connection_pool.make_connection()))
    try:
        while True:
            try:
                await _settle(deferred)
                if not deferred.connected:
                    await asyncio.to_thread(deferred.connect)
                pipe = client.pipeline(transaction=False)
                heartbeats.queue_heartbeat(pipe, "gateway", service_id, info, ttl_ms)
                deferred.send(commands_of(pipe))
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.record_heartbeat("gateway", False)
                log.exception("gateway heartbeat failed")
            await ticks.sleep_aligned(interval_s)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.to_thread(deferred.settle))
        await asyncio.to_thread(deferred.close)


async def _settle(deferred: DeferredPipeline) -> None:
    """Read the last beat's replies: at once when they are all there, else on a thread."""
    if not deferred.pending:
        return
    if deferred.replies_ready():
        deferred.settle()
    else:
        await asyncio.to_thread(deferred.settle)
    metrics.record_heartbeat("gateway", True)


async def _awaited_beats(
    client: object, service_id: str, info: Mapping[str, str], ttl_ms: int, interval_s: float
) -> None:
    while True:
        try:
            await heartbeats.heartbeat(client, "gateway", service_id, info, ttl_ms)  # type: ignore[arg-type]  # client: object, an aioredis.Redis
        except asyncio.CancelledError:
            raise
        except Exception:
            metrics.record_heartbeat("gateway", False)
            log.exception("gateway heartbeat failed")
        else:
            metrics.record_heartbeat("gateway", True)
        await ticks.sleep_aligned(interval_s)
