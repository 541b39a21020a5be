"""Taking over the batches of dead workers of the same versions.

A batch stays pending under the worker that read it until it is acked. Once that worker's last
heartbeat is older than the dead bound (heartbeats run on their own thread, so only a dead or
frozen process misses them), a live worker claims its batches that have been idle that long
(exclusive: the claim resets their idle time) and hands them to its own instances of the
version, which take them ahead of the stream's new batches.
"""

from __future__ import annotations

import asyncio
import logging

from shared import metrics
from shared.fleet import heartbeats, reclaim_pace, streams
from shared.runtime import ticks
from shared.wire import keys
from workers.loading.version_host import VersionHost

log = logging.getLogger(__name__)


async def reclaim_loop(host: VersionHost, stopping: asyncio.Event) -> None:
    s = host.settings
    wait_s = s.reclaim_interval_ms / 1000
    while not stopping.is_set():
        await asyncio.sleep(ticks.until_boundary(wait_s))  # with the rest
        wait_s = s.reclaim_interval_ms / 1000
        dead: list[str] = []
        try:
            live = await heartbeats.not_dead_ids(
                host.redis, "worker", s.dead_bound_ms, s.heartbeat_ttl_ms
            )
            live.add(host.id)
            by_stream = {keys.batch_stream(*key): key for key in list(host.loaded)}
            scan = await reclaim_pace.streams_to_scan(
                host.redis, list(by_stream), keys.WORKER_GROUP, host.id, live
            )
            for key in [by_stream[stream] for stream in scan]:
                for entry in await streams.reclaim_dead(
                    host.redis,
                    keys.batch_stream(*key),
                    keys.WORKER_GROUP,
                    host.id,
                    live,
                    min_idle_ms=s.dead_bound_ms,
                    dead_pending=dead,
                ):
                    metrics.child(metrics.RECLAIMED, "worker", *key).inc()
                    host.requeue(key, entry)
            # Sleep long while no one is dying (``shared.fleet.reclaim_pace``): same bound, fewer
            # passes.
            wait_s = await reclaim_pace.next_pass_s(
                host.redis,
                "worker",
                dead_bound_ms=s.dead_bound_ms,
                ttl_ms=s.heartbeat_ttl_ms,
                interval_ms=s.reclaim_interval_ms,
                found_dead=bool(dead),
            )
        except Exception:
            log.exception("reclaim failed")
