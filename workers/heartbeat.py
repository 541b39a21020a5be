"""Restoring what a Redis that restarted empty forgot: the model configs and consumer groups.

The heartbeat itself (registry and readiness) runs on a thread of its own
(``shared.heartbeat_thread``, started by ``workers.version_host``); this loop, at the same
interval, puts back what this worker serves, so the mesh recovers without restarting anything.
"""

from __future__ import annotations

import asyncio
import logging

from shared import keys, model_registry, streams
from workers.version_host import VersionHost

log = logging.getLogger(__name__)


async def restore_loop(host: VersionHost, stopping: asyncio.Event) -> None:
    while not stopping.is_set():
        await asyncio.sleep(host.settings.heartbeat_interval_ms / 1000)
        try:
            await _restore_after_redis_loss(host)
        except Exception:
            log.exception("could not check the model registry")


async def _restore_after_redis_loss(host: VersionHost) -> None:
    configs = {v.model.config.name: v.model.config for v in host.loaded.values()}
    if await model_registry.ensure_published(host.redis, list(configs.values())):
        log.warning("redis had lost the model registry; restored", extra={"models": list(configs)})
        await streams.ensure_groups(
            host.redis, [keys.batch_stream(*key) for key in host.loaded], keys.WORKER_GROUP
        )
