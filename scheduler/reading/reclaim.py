"""Taking over the request entries of dead schedulers.

An entry stays pending under the scheduler that read it until it is dispatched or answered.
Once that scheduler's last heartbeat is older than the dead bound, a live one claims its entries
that have been idle that long (``shared.fleet.streams.reclaim_dead``) and queues them as its own.
Passes are paced by the registry (``shared.fleet.reclaim_pace``): short while someone may be dying,
long otherwise, with the same bound.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis

from scheduler.reading.intake import Intake
from scheduler.settings import SchedulerSettings
from shared import metrics
from shared.fleet import heartbeats, reclaim_pace, streams
from shared.runtime import ticks
from shared.wire import keys

log = logging.getLogger(__name__)


async def reclaim_loop(
    r: aioredis.Redis,
    settings: SchedulerSettings,
    consumer: str,
    stream_keys: dict[bytes, tuple[str, int]],
    intake: Intake,
) -> None:
    s = settings
    wait_s = s.reclaim_interval_ms / 1000
    while True:
        await asyncio.sleep(ticks.until_boundary(wait_s))  # with the rest
        wait_s = s.reclaim_interval_ms / 1000
        dead: list[str] = []
        try:
            live = await heartbeats.not_dead_ids(
                r, "scheduler", s.dead_bound_ms, s.heartbeat_ttl_ms
            )
            live.add(consumer)
            names = [stream.decode() for stream in list(stream_keys)]
            scan = await reclaim_pace.streams_to_scan(
                r, names, keys.SCHEDULER_GROUP, consumer, live
            )
            for stream in [name.encode() for name in scan]:
                for entry in await streams.reclaim_dead(
                    r,
                    stream.decode(),
                    keys.SCHEDULER_GROUP,
                    consumer,
                    live,
                    min_idle_ms=s.dead_bound_ms,
                    dead_pending=dead,
                ):
                    key = stream_keys.get(stream)
                    if key is not None:
                        metrics.child(metrics.RECLAIMED, "scheduler", *key).inc()
                    intake.accept(entry)
            # Sleep long while no one is dying (``shared.fleet.reclaim_pace``): same bound.
            wait_s = await reclaim_pace.next_pass_s(
                r,
                "scheduler",
                dead_bound_ms=s.dead_bound_ms,
                ttl_ms=s.heartbeat_ttl_ms,
                interval_ms=s.reclaim_interval_ms,
                found_dead=bool(dead),
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reclaim failed")
