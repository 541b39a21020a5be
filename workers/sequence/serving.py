"""The entry point the worker service uses for an instance of a sequence model: run its holder
loop, and hand its sequences over when the instance stops (shutdown, unload). Executions run on
the worker's pool and are tracked per instance, so that an instance is never unloaded while
``execute`` still runs on its thread (``wait_idle``, as the batch loop's)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from concurrent.futures import Executor

import redis.asyncio as aioredis

from shared.fleet.cancel_listener import CancelledRequests
from shared.model_config.sequences import sequence_spec
from workers.backend import Execution, ModelInstance, ModelRequest
from workers.loading.loader import LoadedVersion
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
        heard: CancelledRequests | None = None,
    ):
        self._redis = redis
        self._settings = settings
        self._id = worker_id
        self._stopping = stopping
        self._executor = executor
        self._heard = heard  # cancellations the worker heard: a cancelled step ends its sequence
        # Instance (by identity) -> its execution running on the pool.
        self._running: dict[int, concurrent.futures.Future[Execution]] = {}

    async def execute(self, instance: ModelInstance, requests: list[ModelRequest]) -> Execution:
        pool = self._executor()
        assert pool is not None, "the service sizes the executor before serving"
        running = pool.submit(instance.execute, requests)
        self._running[id(instance)] = running

        def finished(done: concurrent.futures.Future[Execution]) -> None:  # on the pool
            if self._running.get(id(instance)) is done:
                del self._running[id(instance)]

        running.add_done_callback(finished)
        return await asyncio.wrap_future(running)

    async def wait_idle(
        self, instances: list[ModelInstance], timeout_s: float | None = None
    ) -> list[ModelInstance]:
        """Wait until none of these instances executes; those still executing at the timeout."""
        running = [f for i in instances if (f := self._running.get(id(i))) is not None]
        if running:
            await asyncio.wait([asyncio.wrap_future(f) for f in running], timeout=timeout_s)
        return [i for i in instances if (f := self._running.get(id(i))) and not f.done()]

    async def serve(
        self, loaded: LoadedVersion, instance: ModelInstance, unloading: asyncio.Event
    ) -> None:
        spec = sequence_spec(loaded.model.config)
        assert spec is not None

        async def execute(instance: ModelInstance, requests: list[ModelRequest]) -> Execution:
            done = loaded.executing()  # the version's own count and last use, for eviction
            try:
                return await self.execute(instance, requests)
            finally:
                done()

        holder = SequenceHolder(
            self._redis,
            self._settings,
            self._id,
            loaded,
            instance,
            loaded.instances.index(instance),
            spec,
            execute,
            self._heard,
        )
        log.info(
            "holding sequences",
            extra={"model": loaded.name, "instance": holder.id, "slots": spec.slots},
        )
        try:
            await holder.serve(self._stopping, unloading)
        finally:
            await holder.hand_over()
