"""The entry point the worker service uses for an instance of a sequence model: run its holder
loop, and hand its sequences over when the instance stops (shutdown, unload)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor

import redis.asyncio as aioredis

from shared.sequence_config import sequence_spec
from workers.backend import ModelInstance
from workers.loader import LoadedVersion
from workers.sequence.holder import SequenceHolder
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)


class SequenceServing:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: WorkerSettings,
        worker_id: str,
        stopping: asyncio.Event,
        executor: Callable[[], Executor | None],
    ):
        self._redis = redis
        self._settings = settings
        self._id = worker_id
        self._stopping = stopping
        self._executor = executor

    async def serve(self, loaded: LoadedVersion, instance: ModelInstance) -> None:
        spec = sequence_spec(loaded.model.config)
        assert spec is not None
        holder = SequenceHolder(
            self._redis,
            self._settings,
            self._id,
            loaded,
            instance,
            loaded.instances.index(instance),
            spec,
            self._executor,
        )
        log.info(
            "holding sequences",
            extra={"model": loaded.name, "instance": holder.id, "slots": spec.slots},
        )
        try:
            await holder.serve(self._stopping)
        finally:
            await holder.hand_over()
