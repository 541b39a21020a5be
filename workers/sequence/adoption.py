"""Adoption: the sequences of a holder that died move to live instances.

A holder is dead when its worker has not heartbeated for the dead bound (``dead_bound_ms``, the
bound after which its pending batches may be claimed too; a late heartbeat is not a death). Any
worker serving the version may adopt; the adoption script re-checks the bound and runs once (the
first caller takes the instance's whole holder index), so two adopters never split or repeat it.
The next step of an adopted sequence then runs on its new holder from the last committed state:
a step the dead holder had executed but not committed runs again, with the same answer, and a
step it had committed is never applied twice.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from shared import metrics
from shared.model_config.sequences import sequence_spec
from shared.wire import keys
from workers.loading.version_host import VersionHost
from workers.sequence.store import SequenceStore

log = logging.getLogger(__name__)


async def adoption_loop(host: VersionHost, stopping: asyncio.Event) -> None:
    s = host.settings
    while not stopping.is_set():
        sequences = any(sequence_spec(v.model.config) for v in list(host.loaded.values()))
        # Without a sequence model there is nothing to adopt: look again less often (a model
        # loaded meanwhile is adopted for within the dead bound's slack, dead bound - TTL).
        quiet_s = max(s.dead_bound_ms - s.heartbeat_ttl_ms, s.reclaim_interval_ms) / 1000
        await asyncio.sleep(s.reclaim_interval_ms / 1000 if sequences else quiet_s)
        for (model, version), loaded in list(host.loaded.items()):
            spec = sequence_spec(loaded.model.config)
            if spec is None:
                continue
            try:
                await adopt_dead(host.redis, model, version, host.id, spec.idle_us // 1000, host)
            except Exception:
                log.exception("sequence adoption failed", extra={"model": model})


async def adopt_dead(
    r: aioredis.Redis, model: str, version: int, me: str, idle_ms: int, host: VersionHost
) -> int:
    """Adopt the sequences of every dead holder of a version; returns how many moved."""
    store = SequenceStore(r, model, version, me)
    table = await store.slot_table()
    others = [inst for inst in table if not inst.startswith(f"{me}#")]
    if not others:
        return 0
    now = int(time.time() * 1000)
    # Readiness scores are heartbeat expiries (beat + TTL): dead once the beat is dead_bound old.
    settings = host.settings
    dead_before = now - max(0, settings.dead_bound_ms - settings.heartbeat_ttl_ms)
    ready = keys.ready(model, version)
    async with r.pipeline(transaction=False) as pipe:
        for inst in others:
            pipe.zscore(ready, inst.rsplit("#", 1)[0])
        scores = await pipe.execute()
    moved = 0
    for inst, score in zip(others, scores, strict=True):
        if score is not None and float(score) >= dead_before:
            continue
        done, adopted, released, backlogged = await store.adopt(
            inst, now, dead_before, max(1, idle_ms)
        )
        if done < 0:
            continue
        moved += adopted + backlogged
        metrics.record_sequence_event(model, version, "adopted", adopted + backlogged)
        metrics.record_sequence_event(model, version, "idle_released", released)
        if not adopted + released + backlogged:
            continue
        log.warning(
            "adopted the sequences of a dead holder",
            extra={
                "model": model,
                "version": version,
                "dead_holder": inst,
                "adopted": adopted,
                "released": released,
                "backlogged": backlogged,
            },
        )
    return moved
