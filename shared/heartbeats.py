"""Who is alive: each service heartbeats into a per-kind sorted set (id -> expiry, ms).

A service that dies stops counting once its score falls behind the clock, without anyone
cleaning up after it; its info hash expires with it.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as aioredis

from shared import keys
from shared.clock import now_ms


async def heartbeat(
    r: aioredis.Redis, kind: str, service_id: str, info: Mapping[str, str], ttl_ms: int
) -> None:
    expiry = now_ms() + ttl_ms
    info_key = keys.service_info(kind, service_id)
    async with r.pipeline(transaction=False) as pipe:
        pipe.zadd(keys.service_registry(kind), {service_id: expiry})
        if info:
            pipe.hset(info_key, mapping=dict(info))
        pipe.pexpire(info_key, ttl_ms)
        await pipe.execute()


async def deregister(r: aioredis.Redis, kind: str, service_id: str) -> None:
    async with r.pipeline(transaction=False) as pipe:
        pipe.zrem(keys.service_registry(kind), service_id)
        pipe.delete(keys.service_info(kind, service_id))
        await pipe.execute()


async def live_ids(r: aioredis.Redis, kind: str) -> set[str]:
    members = await r.zrangebyscore(keys.service_registry(kind), now_ms(), "+inf")
    return {m.decode() if isinstance(m, bytes) else m for m in members}
