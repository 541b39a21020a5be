"""Who is alive and what is loaded: service heartbeats and model readiness, all in Redis.

A model version is READY while some live worker has it loaded: the worker keeps its id in the
version's readiness set with a score equal to its heartbeat expiry, so a worker that dies stops
counting without anyone cleaning up after it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import msgspec
import redis.asyncio as aioredis

from shared import keys, model_config
from shared.model_config import ModelConfig

_json = msgspec.json


def now_ms() -> int:
    return int(time.time() * 1000)


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


async def publish_model(r: aioredis.Redis, config: ModelConfig) -> None:
    """Make the configuration visible to gateways and schedulers (bumps the revision)."""
    payload = _json.encode(config.to_json())
    async with r.pipeline(transaction=True) as pipe:
        pipe.hset(keys.models(), config.name, payload)
        pipe.incr(keys.models_rev())
        await pipe.execute()


async def ensure_published(r: aioredis.Redis, configs: list[ModelConfig]) -> bool:
    """Publish any of these configurations Redis has lost (a restart without persistence).

    Returns True when something had to be restored; the revision is bumped only then, so the
    gateways' and schedulers' caches reload only after a real loss.
    """
    if not configs:
        return False
    async with r.pipeline(transaction=False) as pipe:
        for config in configs:
            pipe.hsetnx(keys.models(), config.name, _json.encode(config.to_json()))
        added = await pipe.execute()
    if any(added):
        await r.incr(keys.models_rev())
        return True
    return False


async def mark_ready(
    r: aioredis.Redis,
    worker_id: str,
    versions: Mapping[tuple[str, int], int],
    ttl_ms: int,
) -> None:
    """Refresh this worker's readiness for each (model, version) -> instance count."""
    expiry = now_ms() + ttl_ms
    async with r.pipeline(transaction=False) as pipe:
        for (model, version), count in versions.items():
            pipe.zadd(keys.ready(model, version), {worker_id: expiry})
            pipe.hset(keys.instances(model, version), worker_id, count)
            pipe.sadd(keys.model_versions(model), version)
        await pipe.execute()


async def unmark_ready(r: aioredis.Redis, worker_id: str, versions: list[tuple[str, int]]) -> None:
    async with r.pipeline(transaction=False) as pipe:
        for model, version in versions:
            pipe.zrem(keys.ready(model, version), worker_id)
            pipe.hdel(keys.instances(model, version), worker_id)
        await pipe.execute()


async def read_models(r: aioredis.Redis) -> tuple[int, dict[str, ModelConfig]]:
    """The revision and every published configuration."""
    async with r.pipeline(transaction=True) as pipe:
        pipe.get(keys.models_rev())
        pipe.hgetall(keys.models())
        rev, raw = await pipe.execute()
    configs: dict[str, ModelConfig] = {}
    for name, payload in raw.items():
        config = model_config.from_json(_json.decode(payload), source=f"registry:{name!r}")
        configs[config.name] = config
    return int(rev or 0), configs


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
