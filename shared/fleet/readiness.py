"""Which model versions are READY: some live worker has them loaded.

A worker keeps its id in the version's readiness set with a score equal to its heartbeat
expiry, so a worker that dies stops counting without anyone cleaning up after it.

A mark that makes a version ready where it was not (a new member, or one whose expiry had
passed: a worker back from a stall) is announced on the change feed; a mark that only moves an
expiry forward (every heartbeat) is not. An expiry passing is announced by no one: readers
judge liveness from the expiries they read (``gateway.core.model_table``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from shared import lua
from shared.fleet import change_feed
from shared.runtime.clock import now_ms
from shared.wire import keys


def queue_ready(
    pipe: Any,
    worker_id: str,
    versions: Mapping[tuple[str, int], int],
    ttl_ms: int,
    join_versions: bool = True,
) -> None:
    """Queue this worker's readiness on a pipeline (asynchronous or synchronous); the mark
    (shared/lua/mark_ready.lua) announces a version it makes ready. EVAL with its source: it
    runs in the heartbeat thread's plain pipeline and in cluster pipelines alike.

    ``join_versions``: the version also joins the model's version set (a worker's loaded
    version is known from its first mark on). An ensemble's version set belongs to whoever
    published it: a scheduler's mark must not put back a version an unload just removed (a
    heartbeat pipeline built before the unload and sent after it would make the unloaded
    ensemble ready again, for good)."""
    now = now_ms()
    expiry = now + ttl_ms
    for (model, version), count in versions.items():
        pipe.execute_command(  # EVAL by name: a cluster pipeline's ``eval`` takes no arguments
            "EVAL",
            lua.MARK_READY.source,
            1,
            keys.ready(model, version),
            worker_id,
            expiry,
            now,
            change_feed.channel(),
            change_feed.named(change_feed.MODELS, model),
        )
        pipe.hset(keys.instances(model, version), worker_id, count)
        if join_versions:
            pipe.sadd(keys.model_versions(model), version)


async def mark_ready(
    r: aioredis.Redis,
    worker_id: str,
    versions: Mapping[tuple[str, int], int],
    ttl_ms: int,
    join_versions: bool = True,
) -> None:
    """Refresh this worker's readiness for each (model, version) -> instance count."""
    async with r.pipeline(transaction=False) as pipe:
        queue_ready(pipe, worker_id, versions, ttl_ms, join_versions)
        await pipe.execute()


async def unmark_ready(r: aioredis.Redis, worker_id: str, versions: list[tuple[str, int]]) -> None:
    async with r.pipeline(transaction=False) as pipe:
        for model, version in versions:
            pipe.zrem(keys.ready(model, version), worker_id)
            pipe.hdel(keys.instances(model, version), worker_id)
        await pipe.execute()
    models = sorted({model for model, _ in versions})
    await change_feed.announce(r, *(change_feed.named(change_feed.MODELS, m) for m in models))


async def ready_versions(r: aioredis.Redis, models: list[str]) -> dict[str, dict[int, int]]:
    """Per model: every version ever loaded -> live instances across the fleet (0: none live)."""
    return live_counts(await ready_expiries(r, models), now_ms())


Expiries = dict[str, dict[int, list[tuple[int, int]]]]


def live_counts(found: Expiries, now: int) -> dict[str, dict[int, int]]:
    """``ready_versions`` judged at ``now`` from what ``ready_expiries`` read."""
    return {
        model: {v: sum(n for expiry, n in marks if expiry >= now) for v, marks in versions.items()}
        for model, versions in found.items()
    }


async def live_view(
    r: aioredis.Redis, models: list[str]
) -> tuple[dict[str, dict[int, int]], float]:
    """What a cache of live versions holds: ``ready_versions`` now, and the instant (ms) the
    first heartbeat it counted expires, from when on the view may be stale (inf: none)."""
    found = await ready_expiries(r, models)
    now = now_ms()
    stale_at = min(
        (e for vs in found.values() for marks in vs.values() for e, _ in marks if e >= now),
        default=math.inf,
    )
    return live_counts(found, now), stale_at


async def ready_expiries(r: aioredis.Redis, models: list[str]) -> Expiries:
    """Per model: every version ever loaded -> (heartbeat expiry ms, instances) of each worker
    not yet expired when read, so that a cache can judge liveness later without re-reading."""
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
            pipe.zrangebyscore(keys.ready(model, version), now, "+inf", withscores=True)
            pipe.hgetall(keys.instances(model, version))
        replies = await pipe.execute()
    state: Expiries = {model: {} for model in models}
    for index, (model, version) in enumerate(pairs):
        live, counts = replies[2 * index], replies[2 * index + 1]
        state[model][version] = [(int(score), int(counts.get(w, 1))) for w, score in live]
    return state


async def ready_workers(
    r: aioredis.Redis, pairs: list[tuple[str, int]]
) -> dict[tuple[str, int], list[str]]:
    """Per (model, version): the live workers (and schedulers, for an ensemble) that hold it."""
    if not pairs:
        return {}
    now = now_ms()
    async with r.pipeline(transaction=False) as pipe:
        for model, version in pairs:
            pipe.zrangebyscore(keys.ready(model, version), now, "+inf")
        replies = await pipe.execute()
    return {
        pair: sorted(m.decode() if isinstance(m, bytes) else m for m in members)
        for pair, members in zip(pairs, replies, strict=True)
    }
