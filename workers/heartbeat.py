"""Restoring what a Redis that restarted empty forgot: the model configs, the consumer groups
and the repository index.

The heartbeat itself (registry and readiness) runs on a thread of its own
(``shared.fleet.heartbeat_thread``, started by ``workers.loading.version_host``); this loop puts
back what this worker serves and the index, so the mesh recovers without restarting anything. It
runs whenever the worker's change-feed subscription is made again (a Redis that restarted dropped
it) and on the feed's safety poll, not every heartbeat.
"""

from __future__ import annotations

import asyncio
import logging

from shared.fleet import model_registry, streams
from shared.fleet.change_feed import ChangeFeed
from shared.wire import keys
from workers.loading.repository_index import restore_if_lost
from workers.loading.version_host import VersionHost

log = logging.getLogger(__name__)


RESTORE = "restore"  # never announced: run on (re)subscription and on the safety poll


async def restore_loop(host: VersionHost, stopping: asyncio.Event) -> None:
    """Until cancelled (the worker's shutdown cancels it)."""
    feed = ChangeFeed(
        host.settings.redis_url,
        host.settings.restore_poll_ms / 1000,
        name="conch-worker-changes",
    )
    feed.on(RESTORE, lambda: _restore_after_redis_loss(host))
    await feed.run()


async def _restore_after_redis_loss(host: VersionHost) -> None:
    await restore_if_lost(host.redis, host.repositories, host.settings)
    configs = {v.model.config.name: v.model.config for v in host.loaded.values()}
    if await model_registry.ensure_published(host.redis, list(configs.values())):
        log.warning("redis had lost the model registry; restored", extra={"models": list(configs)})
        await streams.ensure_groups(
            host.redis, [keys.batch_stream(*key) for key in host.loaded], keys.WORKER_GROUP
        )
