"""Who is alive: each service heartbeats into a per-kind sorted set (id -> expiry, ms).

A service that dies stops counting once its score falls behind the clock, without anyone
cleaning up after it; its info hash expires with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from shared.runtime.clock import now_ms
from shared.wire import keys


def queue_heartbeat(
    pipe: Any, kind: str, service_id: str, info: Mapping[str, str], ttl_ms: int
) -> None:
    """Queue one heartbeat on a pipeline (asynchronous or synchronous: ``HeartbeatThread``)."""
    expiry = now_ms() + ttl_ms
    info_key = keys.service_info(kind, service_id)
    pipe.zadd(keys.service_registry(kind), {service_id: expiry})
    if info:
        pipe.hset(info_key, mapping=dict(info))
    pipe.pexpire(info_key, ttl_ms)


async def heartbeat(
    r: aioredis.Redis, kind: str, service_id: str, info: Mapping[str, str], ttl_ms: int
) -> None:
    async with r.pipeline(transaction=False) as pipe:
        queue_heartbeat(pipe, kind, service_id, info, ttl_ms)
        await pipe.execute()


async def deregister(r: aioredis.Redis, kind: str, service_id: str) -> None:
    async with r.pipeline(transaction=False) as pipe:
        pipe.zrem(keys.service_registry(kind), service_id)
        pipe.delete(keys.service_info(kind, service_id))
        await pipe.execute()


async def live_ids(r: aioredis.Redis, kind: str, grace_ms: int = 0) -> set[str]:
    """Services whose heartbeat has not expired (or expired less than ``grace_ms`` ago)."""
    members = await r.zrangebyscore(keys.service_registry(kind), now_ms() - grace_ms, "+inf")
    return {m.decode() if isinstance(m, bytes) else str(m) for m in members}


async def not_dead_ids(r: aioredis.Redis, kind: str, dead_bound_ms: int, ttl_ms: int) -> set[str]:
    """Services that heartbeated within the dead bound: their pending entries stay theirs.

    The registry holds each heartbeat's expiry (beat + TTL); a service is dead once its last
    beat is ``dead_bound_ms`` old, i.e. its expiry is ``dead_bound_ms - ttl_ms`` in the past
    (services of one kind share their heartbeat TTL)."""
    return await live_ids(r, kind, max(0, dead_bound_ms - ttl_ms))
