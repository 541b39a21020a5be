"""Which model versions are READY: some live worker has them loaded.

A worker keeps its id in the version's readiness set with a score equal to its heartbeat
expiry, so a worker that dies stops counting without anyone cleaning up after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from shared import keys
from shared.clock import now_ms


def queue_ready(
    pipe: Any, worker_id: str, versions: Mapping[tuple[str, int], int], ttl_ms: int
) -> None:
    """Queue this worker's readiness on a pipeline (asynchronous or synchronous)."""
    expiry = now_ms() + ttl_ms
    for (model, version), count in versions.items():
        pipe.zadd(keys.ready(model, version), {worker_id: expiry})
        pipe.hset(keys.instances(model, version), worker_id, count)
        pipe.sadd(keys.model_versions(model), version)


async def mark_ready(
    r: aioredis.Redis,
    worker_id: str,
    versions: Mapping[tuple[str, int], int],
    ttl_ms: int,
) -> None:
    """Refresh this worker's readiness for each (model, version) -> instance count."""
    async with r.pipeline(transaction=False) as pipe:
        queue_ready(pipe, worker_id, versions, ttl_ms)
        await pipe.execute()


async def unmark_ready(r: aioredis.Redis, worker_id: str, versions: list[tuple[str, int]]) -> None:
    async with r.pipeline(transaction=False) as pipe:
        for model, version in versions:
            pipe.zrem(keys.ready(model, version), worker_id)
            pipe.hdel(keys.instances(model, version), worker_id)
        await pipe.execute()


async def ready_versions(r: aioredis.Redis, models: list[str]) -> dict[str, dict[int, int]]:
    """Per model: every version ever loaded -> live instances across the fleet (0: none live)."""
    if not models:
        return {}
    async with r.pipeline(transaction=False) as pipe:
        for model in models:
            pipe.smembers(keys.model_versions(model))
        version_sets = await pipe.execute()
    now = now_ms()
    pairs = [
        (model, int(v))
        for model, versions in zip(models, version_sets, strict=True)
        for v in versions
    ]
    async with r.pipeline(transaction=False) as pipe:
        for model, version in pairs:
            pipe.zrangebyscore(keys.ready(model, version), now, "+inf")
            pipe.hgetall(keys.instances(model, version))
        replies = await pipe.execute()
    state: dict[str, dict[int, int]] = {model: {} for model in models}
    for index, (model, version) in enumerate(pairs):
        live, counts = replies[2 * index], replies[2 * index + 1]
        state[model][version] = sum(int(counts.get(w, 1)) for w in live)
    return state
