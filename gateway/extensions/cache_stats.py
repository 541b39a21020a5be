"""Cache hits and misses counted for Triton's statistics extension and its ``nv_cache_*``
metrics. The metrics are this process's; the statistics are the fleet's, so the counts are
added to the model version's statistics hash in Redis, batched (once a second) to keep a
Redis write off each cached answer. Nothing runs while nothing is counted (an idle mesh
sleeps)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

import redis.asyncio as aioredis

from shared import metrics
from shared.wire import keys

log = logging.getLogger(__name__)

FIELDS = ("cache_hit_count", "cache_hit_ns", "cache_miss_count", "cache_miss_ns")


class CacheStats:
    def __init__(self, r: aioredis.Redis, flush_interval_s: float = 1.0):
        self._redis = r
        self._interval = flush_interval_s
        self._pending: dict[tuple[str, int], dict[str, int]] = defaultdict(
            lambda: dict.fromkeys(FIELDS, 0)
        )
        self._flushing: asyncio.Task[None] | None = None

    def hit(self, model: str, version: int, ns: int) -> None:
        counts = self._pending[(model, version)]
        counts["cache_hit_count"] += 1
        counts["cache_hit_ns"] += ns
        metrics.child(metrics.CACHE_HITS, model, version).inc()
        metrics.child(metrics.CACHE_HIT_US, model, version).inc(ns / 1000)
        self._schedule()

    def miss(self, model: str, version: int, ns: int) -> None:
        counts = self._pending[(model, version)]
        counts["cache_miss_count"] += 1
        counts["cache_miss_ns"] += ns
        metrics.child(metrics.CACHE_MISSES, model, version).inc()
        metrics.child(metrics.CACHE_MISS_US, model, version).inc(ns / 1000)
        self._schedule()

    def _schedule(self) -> None:
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self._interval)
        await self.flush()

    async def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, defaultdict(lambda: dict.fromkeys(FIELDS, 0))
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for (model, version), counts in pending.items():
                    for field, value in counts.items():
                        if value:
                            pipe.hincrby(keys.stats(model, version), field, value)
                await pipe.execute()
        except Exception as exc:  # counted again next time rather than lost
            for key, counts in pending.items():
                for field, value in counts.items():
                    self._pending[key][field] += value
            self._schedule()
            log.warning("could not record cache statistics", extra={"error": str(exc)})

    async def close(self) -> None:
        """Flush what is counted (the process is stopping)."""
        if self._flushing is not None:
            self._flushing.cancel()
            with contextlib.suppress(BaseException):
                await self._flushing
        await self.flush()
