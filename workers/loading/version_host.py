"""The versions this worker serves: their instances, serving tasks and readiness in Redis.

Starting a version (``start``) loads it, serves it and marks it ready only once its instances are
loaded and warmed up, so traffic never reaches a half-loaded version. Stopping one (``stop``)
drains: the version is marked draining (gateways stop routing requests without a version to
it), then unmarked ready (requests naming it get 503 at once), then its queued and in-flight
batches finish before its instances unload. Fleet control (``workers.loading.control``) decides
what to start and stop; this object alone changes what the worker serves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import redis.asyncio as aioredis

from shared.fleet import change_feed, heartbeats, labels, model_registry, readiness, streams
from shared.fleet.control import MODE_ON_DEMAND
from shared.fleet.heartbeat_thread import HeartbeatThread
from shared.runtime import clock
from shared.storage.repositories import Repositories
from shared.storage.repository import RepositoryModel
from shared.wire import keys
from shared.wire.errors import ConchError
from workers.backend import Backend, ModelInstance
from workers.batches.lane import Lane
from workers.loading.loader import LoadedVersion, VersionLoadError, load_version, unload_instances
from workers.loading.placement import Devices
from workers.loading.resident import Residents
from workers.settings import WorkerSettings

log = logging.getLogger(__name__)

VersionKey = tuple[str, int]
# The serving loop of one instance (``BatchLoop.serve``): version, instance, the version's lane.
Serve = Callable[[LoadedVersion, ModelInstance, Lane], Coroutine[None, None, None]]
# Waits until none of these instances executes a batch (``BatchProcessor.wait_idle``); returns
# those still executing when ``timeout_s`` (None: no limit) ran out.
WaitIdle = Callable[[list[ModelInstance], float | None], Awaitable[list[ModelInstance]]]


class VersionHost:
    def __init__(
        self,
        redis: aioredis.Redis,
        settings: WorkerSettings,
        backend: Backend,
        worker_id: str,
        serve: Serve,
        wait_idle: WaitIdle,
    ):
        self.redis = redis
        self.settings = settings
        self.backend = backend
        self.id = worker_id
        # The model repositories (CONCH_WORKER_MODEL_REPOSITORY: one or several, local or s3://).
        self.repositories = Repositories.from_setting(
            settings.model_repository,
            settings.repository_cache_dir or None,
            settings.model_config_name,
        )
        self._serve = serve
        self._wait_idle = wait_idle
        # The versions held, read by heartbeats, reclaim and the scrape hook, changed only here.
        # A version being stopped leaves it before it drains: no heartbeat announces it again.
        self.loaded: dict[VersionKey, LoadedVersion] = {}
        # Per version: reclaimed and recovered batches, what is in hand, the stop signal.
        self.lanes: dict[VersionKey, Lane] = {}
        self._serving: list[asyncio.Task[None]] = []
        # False once shutting down: heartbeats keep the worker registered (its batches stay its
        # own while it drains) but no longer mark any version ready.
        self.announcing = True
        self.residents = Residents.of(settings)  # on_demand: what it holds, and its budget
        self.heartbeats = HeartbeatThread(
            settings.redis_url,
            "worker",
            worker_id,
            ttl_ms=settings.heartbeat_ttl_ms,
            interval_ms=settings.heartbeat_interval_ms,
            info=self.info,
            extra=self._queue_ready,
        )

    @property
    def serving_tasks(self) -> list[asyncio.Task[None]]:  # one per instance of each version
        return self._serving

    def info(self) -> dict[str, str]:
        """The worker's heartbeat info, refreshed with every heartbeat (on its own thread)."""
        return {
            "backend": self.settings.backend,
            "pid": str(os.getpid()),
            "health_port": str(self.settings.health_port),
            "models": ",".join(f"{m}:{v}" for m, v in list(self.loaded)),
            "budget_bytes": str(self.residents.budget_bytes),
        }

    def _queue_ready(self, pipe: Any) -> None:
        """Heartbeat thread: readiness marks (locked: ``_leave``), the placer's resident set."""
        if self.announcing:
            counts = {key: len(v.instances) for key, v in list(self.loaded.items())}
            readiness.queue_ready(pipe, self.id, counts, self.settings.heartbeat_ttl_ms)
        self.residents.queue(pipe, self.id, self.loaded, self.settings.heartbeat_ttl_ms)

    async def _leave(self, key: VersionKey) -> LoadedVersion | None:
        """Stop announcing a version: no heartbeat computed before this lands after it."""
        async with self.heartbeats.lock.held():
            return self.loaded.pop(key, None)

    async def stop_announcing(self) -> None:
        """Shutting down: keep beating, mark nothing ready any more."""
        async with self.heartbeats.lock.held():
            self.announcing = False

    async def announce(self) -> None:
        """Heartbeat, and mark every loaded version ready with its instance count."""
        ttl = self.settings.heartbeat_ttl_ms
        await heartbeats.heartbeat(self.redis, "worker", self.id, self.info(), ttl)
        counts = {key: len(v.instances) for key, v in self.loaded.items()}
        await readiness.mark_ready(self.redis, self.id, counts, ttl)

    def requeue(self, key: VersionKey, entry: streams.Entry) -> None:
        """A batch reclaimed from a dead worker: the version's next idle instance takes it."""
        lane = self.lanes.get(key)
        if lane is not None:
            lane.put(entry)

    def add(self, loaded: LoadedVersion) -> None:
        """Hold a loaded version (unloaded at shutdown); ``serve`` starts its instances."""
        key = (loaded.name, loaded.version)
        self.loaded[key] = loaded
        self.lanes[key] = Lane()

    def serve(self, loaded: LoadedVersion) -> None:
        """Start one serving task per instance of a version already held."""
        key = (loaded.name, loaded.version)
        lane = self.lanes[key]
        for instance in loaded.instances:
            self._serving.append(
                asyncio.create_task(self._serve(loaded, instance, lane), name=f"serve-{key}")
            )

    async def unload(self, loaded: LoadedVersion, timeout_s: float | None = None) -> None:
        """Unload the version's instances once none executes a batch: an instance unloaded
        while ``execute`` still runs on its thread is a use-after-free (CUDA, TensorRT). One
        still executing after ``timeout_s`` is left loaded (logged) rather than freed under it."""
        busy = await self._wait_idle(loaded.instances, timeout_s)
        if busy:
            log.error(
                "instances still executing; left loaded",
                extra={"model": loaded.name, "version": loaded.version, "busy": len(busy)},
            )
        idle = [i for i in loaded.instances if all(i is not b for b in busy)]
        await asyncio.to_thread(unload_instances, LoadedVersion(loaded.model, loaded.version, idle))

    # --- start and stop at runtime ----------------------------------------------------------

    async def start(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Load the versions (all or nothing), serve them, mark them ready, route to them.
        Raises ``VersionLoadError`` when one fails to load; none of them is served then."""
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
            await change_feed.announce(self.redis, change_feed.POLICY)
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
            self.lanes.setdefault(key, Lane())
            self.serve(lv)
            if old is not None:
                old.retired = True
                self.lanes[key].wake()
                retired.append((old, tasks))
            _log_loaded(lv)
        await self.announce()
        for old, tasks in retired:
            # No cancelling: each old loop returns once its batch in hand is published and acked.
            await asyncio.gather(*tasks, return_exceptions=True)
            for task in tasks:
                self._serving.remove(task)
            await self.unload(old)
        return loaded

    async def _load_all(self, model: RepositoryModel, versions: list[int]) -> list[LoadedVersion]:
        """Load every version (not served yet); publish the model's configuration and labels."""
        name = model.name
        loaded: list[LoadedVersion] = []
        for version in versions:
            log.info("loading model", extra={"model": name, "version": version})
            try:
                loaded.append(
                    await asyncio.to_thread(
                        load_version, self.backend, model, version, Devices.of(self.settings)
                    )
                )
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
        await change_feed.announce(self.redis, change_feed.POLICY)
        if self.settings.model_control_mode != MODE_ON_DEMAND:  # on_demand: a refused request
            await asyncio.sleep(self.settings.drain_route_delay_s)  # waits as a miss (gateway)
        loaded = await self._leave(key)
        if loaded is None:
            return
        await readiness.unmark_ready(self.redis, self.id, [key])
        deadline = time.monotonic() + self.settings.drain_timeout_s
        while time.monotonic() < deadline:
            if await self._drained(loaded):
                break
            await asyncio.sleep(0.05)  # polling Redis: there is no event to wait on
        lane = self.lanes.pop(key, None)
        if lane is not None:
            lane.stop.set()  # each loop finishes the batch in hand, then returns
            lane.wake()
        name = f"serve-{key}"
        tasks = [task for task in self._serving if task.get_name() == name]
        for task in tasks:
            self._serving.remove(task)
        # No cancelling: a loop returns once its batch is published and acked (or left pending
        # after a failure), and a batch cut short would stay pending under this live worker.
        while tasks:
            _, still = await asyncio.wait(tasks, timeout=self.settings.drain_timeout_s)
            if still:
                log.warning(
                    "waiting for batches still executing before unloading",
                    extra={"model": model, "version": version, "loops": len(still)},
                )
            tasks = list(still)
        await self.unload(loaded)
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
