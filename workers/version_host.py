"""The versions this worker serves: their instances, serving tasks and readiness in Redis.

Starting a version (``start``) loads it, serves it and marks it ready only once its instances are
loaded and warmed up, so traffic never reaches a half-loaded version. Stopping one (``stop``)
drains: the version is marked draining (gateways stop routing requests without a version to
it), then unmarked ready (requests naming it get 503 at once), then its queued and in-flight
batches finish before its instances unload. Fleet control (``workers.control``) decides what to
start and stop; this object is the only one that changes what the worker serves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine

import redis.asyncio as aioredis

from shared import clock, heartbeats, keys, labels, model_registry, readiness, streams
from shared.errors import ConchError
from shared.repository import RepositoryModel
from workers.backend import Backend, ModelInstance
from workers.loader import LoadedVersion, VersionLoadError, load_version, unload_instances
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

VersionKey = tuple[str, int]
# The serving loop of one instance (``BatchLoop.serve``): version, instance, reclaimed batches.
Serve = Callable[
    [LoadedVersion, ModelInstance, asyncio.Queue[streams.Entry]], Coroutine[None, None, None]
]


class VersionHost:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: WorkerSettings,
        backend: Backend,
        worker_id: str,
        serve: Serve,
    ):
        self.redis = redis
        self.settings = settings
        self.backend = backend
        self.id = worker_id
        self._serve = serve
        # The versions held, read by heartbeats, reclaim and the scrape hook, changed only here.
        # A version being stopped leaves it before it drains: no heartbeat announces it again.
        self.loaded: dict[VersionKey, LoadedVersion] = {}
        # Batches reclaimed from dead workers, per version, taken before the stream's new ones.
        self._reclaimed: dict[VersionKey, asyncio.Queue[streams.Entry]] = {}
        self._serving: list[asyncio.Task[None]] = []

    @property
    def serving_tasks(self) -> list[asyncio.Task[None]]:
        """Every loaded version's serving tasks (one per instance)."""
        return self._serving

    def info(self) -> dict[str, str]:
        """The worker's heartbeat info, refreshed with every heartbeat."""
        return {
            "backend": self.settings.backend,
            "pid": str(os.getpid()),
            "health_port": str(self.settings.health_port),
            "models": ",".join(f"{m}:{v}" for m, v in self.loaded),
        }

    async def announce(self) -> None:
        """Heartbeat, and mark every loaded version ready with its instance count."""
        ttl = self.settings.heartbeat_ttl_ms
        await heartbeats.heartbeat(self.redis, "worker", self.id, self.info(), ttl)
        counts = {key: len(v.instances) for key, v in self.loaded.items()}
        await readiness.mark_ready(self.redis, self.id, counts, ttl)

    def requeue(self, key: VersionKey, entry: streams.Entry) -> None:
        """A batch reclaimed from a dead worker: the version's next idle instance takes it."""
        self._reclaimed[key].put_nowait(entry)

    def add(self, loaded: LoadedVersion) -> None:
        """Hold a loaded version (unloaded at shutdown); ``serve`` starts its instances."""
        key = (loaded.name, loaded.version)
        self.loaded[key] = loaded
        self._reclaimed[key] = asyncio.Queue()

    def serve(self, loaded: LoadedVersion) -> None:
        """Start one serving task per instance of a version already held."""
        key = (loaded.name, loaded.version)
        reclaimed = self._reclaimed[key]
        for instance in loaded.instances:
            self._serving.append(
                asyncio.create_task(self._serve(loaded, instance, reclaimed), name=f"serve-{key}")
            )

    # --- start and stop at runtime ----------------------------------------------------------

    async def start(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Load the versions (all or nothing), serve them, mark them ready, route to them.

        Raises ``VersionLoadError`` when one fails to load; none of them is served then.
        """
        name = model.name
        loaded = await self._load_all(model, versions)
        for lv in loaded:
            self.add(lv)
            self.serve(lv)
            _log_loaded(lv)
        await self.announce()
        if loaded:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hdel(keys.draining(), *(f"{name}:{lv.version}" for lv in loaded))
                pipe.incr(keys.policy_rev())
                await pipe.execute()
        return loaded

    async def replace(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Reload versions this worker serves (a new configuration or new files): the new
        instances load beside the old ones and take over the version's batch stream, then the
        old ones finish the batch in hand and unload. The version stays ready throughout, so
        no request is refused or lost. All or nothing, as ``start``."""
        loaded = await self._load_all(model, versions)
        retired: list[tuple[LoadedVersion, list[asyncio.Task[None]]]] = []
        for lv in loaded:
            key = (lv.name, lv.version)
            old = self.loaded.get(key)
            tasks = [t for t in self._serving if t.get_name() == f"serve-{key}"]
            self.loaded[key] = lv
            self._reclaimed.setdefault(key, asyncio.Queue())
            self.serve(lv)
            if old is not None:
                old.retired = True
                retired.append((old, tasks))
            _log_loaded(lv)
        await self.announce()
        for old, tasks in retired:
            await asyncio.gather(*tasks, return_exceptions=True)
            for task in tasks:
                self._serving.remove(task)
            await asyncio.to_thread(unload_instances, old)
        return loaded

    async def _load_all(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Load every version (not served yet); publish the model's configuration and labels."""
        name = model.name
        loaded: list[LoadedVersion] = []
        for version in versions:
            log.info("loading model", extra={"model": name, "version": version})
            try:
                loaded.append(await asyncio.to_thread(load_version, self.backend, model, version))
            except Exception as exc:
                text = exc.message if isinstance(exc, ConchError) else f"{exc}"
                for done in loaded:  # all or nothing: the versions loaded so far go too
                    await asyncio.to_thread(unload_instances, done)
                raise VersionLoadError(version, text) from exc
        await model_registry.publish_model(self.redis, model.config)
        await labels.publish(self.redis, model.path, model.config)
        await streams.ensure_groups(
            self.redis,
            [keys.batch_stream(name, lv.version) for lv in loaded],
            keys.WORKER_GROUP,
        )
        return loaded

    async def stop(self, key: VersionKey) -> None:
        """Route around, unmark, drain, stop serving, unload: no queued request is lost."""
        model, version = key
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.draining(), f"{model}:{version}", clock.now_ms())
            pipe.incr(keys.policy_rev())
            await pipe.execute()
        await asyncio.sleep(self.settings.drain_route_delay_s)
        loaded = self.loaded.pop(key, None)
        if loaded is None:
            return
        await readiness.unmark_ready(self.redis, self.id, [key])
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while time.monotonic() < deadline:
            if await self._drained(loaded):
                break
            await asyncio.sleep(0.05)  # polling Redis: there is no event to wait on
        name = f"serve-{key}"
        tasks = [task for task in self._serving if task.get_name() == name]
        for task in tasks:
            task.cancel()
            self._serving.remove(task)
        await asyncio.gather(*tasks, return_exceptions=True)
        self._reclaimed.pop(key, None)
        await asyncio.to_thread(unload_instances, loaded)
        log.info("model unloaded", extra={"model": model, "version": version})

    async def _drained(self, loaded: LoadedVersion) -> bool:
        """Nothing queued for the version and no batch of it in flight anywhere."""
        name, version = loaded.name, loaded.version
        batch = keys.batch_stream(name, version)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xlen(batch)
            pipe.xpending(batch, keys.WORKER_GROUP)
            for level in loaded.model.config.priority_levels():
                pipe.xlen(keys.request_stream(name, version, level))
            results = await pipe.execute(raise_on_error=False)
        pending = results[1]
        in_flight = pending.get("pending", 0) if isinstance(pending, dict) else 0
        queued = sum(x for x in (results[0], *results[2:]) if isinstance(x, int))
        return queued == 0 and in_flight == 0


def _log_loaded(lv: LoadedVersion) -> None:
    log.info(
        "model loaded",
        extra={
            "model": lv.name,
            "version": lv.version,
            "instances": len(lv.instances),
            "seconds": round(lv.load_seconds, 3),
        },
    )
